// Precision lowering (README.md, "How it works", step 3): with `precision: fp16` or `bf16`, every
// f32 tensor inside the graph (activations and weights) becomes the compute dtype; model inputs and
// outputs keep their ONNX dtypes, with a Cast after each f32 input and before each f32 output.
// Kernels and GEMMs still accumulate in fp32 (their own business). Integer and bool tensors are
// kept. A Cast to f32 inside the graph (exporters put them around norms and softmax) casts to the
// compute dtype instead, and a Cast left casting to its input's own dtype goes (its readers read
// the input). fp32 and tf32 change nothing here (tf32 is a GEMM compute mode).
#pragma once

#include "cache/status.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status precision_lower(ir::Graph& g, Precision precision);

}  // namespace kiln::compiler
