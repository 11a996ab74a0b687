// The lowering rules, one family per file of compiler/backend/lower/. lowering.cc dispatches each
// pending node to the rule registered for its qualified op ("MatMul", "kiln.Attention", ...).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/lower/lower_context.h"
#include "compiler/passes/graph_split.h"

namespace kiln::compiler {

using LowerFn = Status (*)(LowerContext& cx, int node);

struct LowerRule {
  std::string op;  // ir::Node::qualified_op()
  LowerFn fn;
};

// lower_gemm.cc: MatMul, Gemm (cuBLASLt; bias/activation/residual epilogues, batched),
// kiln.GatedMatMul (a GEMM and its gating, or one skinny kernel with the gating fused).
std::vector<LowerRule> gemm_rules();
// lower_elementwise.cc: fused elementwise chains with broadcasting (unary, binary, comparisons
// and logic, Where, Cast, Clip, Gelu, Identity, Expand).
std::vector<LowerRule> elementwise_rules();
// lower_reduce.cc: LayerNormalization, RMSNormalization (residual fused), Softmax, ReduceMean/
// Sum/Max.
std::vector<LowerRule> reduce_rules();
// lower_scan.cc: CumSum (any axis, exclusive, reverse; a warp, block or thread per line).
std::vector<LowerRule> scan_rules();
// lower_layout.cc: views (Reshape, Squeeze, Unsqueeze, Flatten), Transpose, Concat, Slice,
// Split, Gather, GatherElements, GatherND, Range, ConstantOfShape (a fill), kiln.Rotary.
std::vector<LowerRule> layout_rules();
// lower_attention.cc: kiln.Attention (prefill and decode kernels, strided Q/K/V/O views
// from attention_views.cc); lower_paged_attention.cc: kiln.PagedAttention.
std::vector<LowerRule> attention_rules();

// Every family's rules, in the order above: the table lowering.cc dispatches on (lower_rules.cc).
std::vector<LowerRule> lower_rules_all();

// The one list of ops the front end accepts but the back end does not lower yet, each with the
// reason (lower_rules.cc). Lowering such a node fails naming the op and the reason; the parity
// test (tests/compiler/backend/op_parity_test.cc) prints the list and keeps it short. Ops the
// front end always folds or rewrites away are listed in compiler/ops/op_folds.h instead.
struct UnloweredOp {
  std::string_view domain;  // "" (ONNX), "com.microsoft", "kiln"
  std::string_view op;
  std::string_view reason;
};
std::span<const UnloweredOp> unlowered_ops();
// nullptr when (domain, op) is not in the list.
const UnloweredOp* unlowered_op_find(std::string_view domain, std::string_view op);

// lower_layout.cc: whether node `n` is a Reshape / Flatten / Squeeze / Unsqueeze of `v` whose
// result keeps v's rows (it still ends in `row` elements, of v's dtype): the same bytes under
// another shape, which the view rule lowers as an alias.
bool row_view_of(const LowerContext& cx, const ir::Node& n, int v, const ir::DimExpr& row);

// lower_layout.cc: copies the first `cols` elements of every `in_cols`-wide row of `in`
// ([rows, in_cols]) into `out` ([rows, cols], contiguous; a float dtype other than in's converts
// each element), with `after_cublaslt` only where the GEMM step just before it runs on cuBLASLt
// (KernelLaunch::after_cublaslt): how a GEMM computed over rows padded to 16 bytes reaches its
// real output (lower_gemm.cc, "Padded rows").
Status emit_gemm_unpad(LowerContext& cx, int node, int in, int out, const ir::DimExpr& rows,
                       int64_t cols, int64_t in_cols, bool after_cublaslt,
                       const std::string& nodes);
// Runs on the graph in piece order, before the context is made: within each piece, an
// elementwise node whose readers are all elementwise nodes of that piece moves to just before the
// first of them (last node first, so chains move together). A group then finds the inputs of its
// consumers ready: SiLU(gate) · up becomes one kernel after both GEMMs instead of two around the
// up GEMM. A node feeding an Add whose other input is a GEMM's stays put, for the GEMM may take
// that Add as its residual only when the node ran before it. Returns the pieces' new node order.
void elementwise_sink(const ir::Graph& g, std::vector<Piece>& pieces);

// Runs before any rule: attention claims the view chains (Split/Slice → Reshape → Transpose)
// that feed it and the Transpose → Reshape after it, so that it reads and writes the GEMM
// buffers in place; kiln.Rotary claims the chain that feeds its X likewise. Claimed nodes are
// marked done and their outputs recorded as views.
Status attention_absorb_views(LowerContext& cx);

}  // namespace kiln::compiler
