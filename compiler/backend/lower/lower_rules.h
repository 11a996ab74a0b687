// The lowering rules, one family per file of compiler/backend/lower/. lowering.cc dispatches each
// pending node to the rule registered for its qualified op ("MatMul", "kiln.Attention", ...).
#pragma once

#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/lower/lower_context.h"

namespace kiln::compiler {

using LowerFn = Status (*)(LowerContext& cx, int node);

struct LowerRule {
  std::string op;  // ir::Node::qualified_op()
  LowerFn fn;
};

// lower_gemm.cc: MatMul, Gemm (cuBLASLt; bias/activation/residual epilogues, batched).
std::vector<LowerRule> gemm_rules();
// lower_elementwise.cc: fused elementwise chains with broadcasting (unary, binary, comparisons
// and logic, Where, Cast, Clip, Gelu, Identity, Expand).
std::vector<LowerRule> elementwise_rules();
// lower_reduce.cc: LayerNormalization, RMSNormalization (residual fused), Softmax, ReduceMean/
// Sum/Max.
std::vector<LowerRule> reduce_rules();
// lower_layout.cc: views (Reshape, Squeeze, Unsqueeze, Flatten), Transpose, Concat, Slice,
// Split, Gather, GatherElements, Range, kiln.Rotary.
std::vector<LowerRule> layout_rules();
// lower_attention.cc: kiln.Attention (prefill and decode kernels, strided Q/K/V/O views).
std::vector<LowerRule> attention_rules();

// Runs before any rule: attention claims the view chains (Split/Slice → Reshape → Transpose)
// that feed it and the Transpose → Reshape after it, so that it reads and writes the GEMM
// buffers in place. Claimed nodes are marked done and their outputs recorded as views.
Status attention_absorb_views(LowerContext& cx);

}  // namespace kiln::compiler
