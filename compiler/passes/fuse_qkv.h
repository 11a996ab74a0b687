// fuse_qkv: the query, key and value projections of an attention that read one input become one
// GEMM over their weights side by side ([K, Nq + Nk + Nv], biases likewise), followed by a Split
// whose outputs take the projections' places. The attention lowering reads Q, K and V through
// the Split and the head views in place (compiler/backend/lower/attention_views.cc), so three
// GEMM launches become one, as in exports that fuse QKV themselves (GPT-2's c_attn).
//
// A projection qualifies when the attention's Q, K or V input is, through Reshape, Transpose,
// Squeeze, Unsqueeze or Flatten views and a kiln.Rotary's X (Llama-style Q and K: the rotary
// kernel reads its slice of the fused product in place, attention_views.cc) that nothing else
// reads, MatMul(A, W) or
// MatMul(A, W) + b, with W a 2-D constant [K, N] that only it reads and b a constant [N]. Two or
// three projections of one attention over the same A and weight dtype, all with a bias or none,
// are fused.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_qkv(ir::Graph& g);

}  // namespace kiln::compiler
