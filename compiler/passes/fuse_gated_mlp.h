// fuse_gated_mlp: the gated MLP of Llama-style models, act(x·Wg) · (x·Wu), becomes one
// kiln.GatedMatMul over one weight whose columns interleave the two ([K, 2N]: column 2j is
// Wg's column j, 2j + 1 Wu's; compiler/ops/kiln_ops.md). The back end runs it as one GEMM whose
// epilogue applies the gating (kernels/skinny_gemm.cuh, "Gated form"), so the gate GEMM, the up
// GEMM and the elementwise kernel between them become one launch at decode sizes.
//
// Matched: Mul(act(MatMul(x, Wg)), MatMul(x, Wu)), either operand order, where act is
//   SiLU  Mul(g, Sigmoid(g)) (either order), as the exporters write x·sigmoid(x);
//   Gelu  (erf or tanh form; fuse_gelu has turned the exporters' formulas into Gelu);
//   Relu.
// Wg and Wu are 2-D constants of one dtype and shape [K, N] that only their MatMul reads, and
// nothing else reads the products, the activation or its parts. Phi-3's form is matched too: one
// MatMul(x, W) with W [K, 2N] whose output is cut into gate and up halves (a two-way Split or two
// Slices of the last axis). Anything else stays as it is (a bias on either projection, casts
// between the GEMMs and the activation).
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_gated_mlp(ir::Graph& g);

}  // namespace kiln::compiler
