// Lowering: a canonical ir::Graph → LoweredProgram. MatMul/Gemm become cuBLASLt GEMM steps
// (bias and ReLU folded into the epilogue where they follow), chains of elementwise ops fuse
// into one generated kernel, Softmax becomes a generated row kernel.
//
// Padding safety: the runtime pads a request of size S up to a captured size, so no op may mix
// values across the size dimension. Lowering refuses graphs where S reaches a reduced axis
// (a GEMM's K, the softmax axis) with an error naming the node.
#pragma once

#include "cache/status.h"
#include "compiler/ir.h"
#include "compiler/launch_plan.h"

namespace kiln::compiler {

// May add values to `g` (intermediates such as a GEMM result before a general-C add, or a
// beta-scaled bias constant).
Result<LoweredProgram> lower_graph(ir::Graph& g);

}  // namespace kiln::compiler
