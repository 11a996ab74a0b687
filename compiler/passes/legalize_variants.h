// Maps op variants onto the internal op set (compiler/ops/kiln_ops.md): ONNX Attention and the
// com.microsoft attention ops → kiln.Attention; ONNX / com.microsoft RotaryEmbedding →
// kiln.Rotary; the com.microsoft norm and GELU ops → Add + LayerNormalization / RMSNormalization /
// Gelu. Nodes the internal ops cannot express (softcap, a used mean / inv_std_var output, ...) are
// kept as they are; graph output names and topological order are kept.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status legalize_variants(ir::Graph& g);

}  // namespace kiln::compiler
