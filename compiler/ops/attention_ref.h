// The attention reference that every attention op shares (kiln.Attention, ONNX Attention and the
// com.microsoft attention ops), plus the head-layout helpers — concrete and symbolic — they use.
// One kernel for all variants keeps their semantics identical where they agree (masking, GQA,
// rows with no visible key), so legalize_variants can map each onto kiln.Attention exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/ir/op_registry.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

struct AttentionRefArgs {
  const RefTensor* mask = nullptr;         // additive, broadcastable to [B, Hq, Sq, Skv]
  const RefTensor* key_padding = nullptr;  // [B, Skv]; 0 marks a padding key
  double scale = 1.0;
  // Query i may see key j only when j <= i + *causal_offset (unset: no causal mask).
  std::optional<int64_t> causal_offset;
  double softcap = 0.0;  // > 0: scores become softcap·tanh(scores / softcap) before the mask
};

// q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv] → [B, Hq, Sq, Dv] (dtype of q).
// Query head h reads key/value head h / (Hq / Hkv). Keys hidden by the causal mask, by padding or
// by a -inf score are excluded from the softmax; a row with no key left is all zeros.
Result<RefTensor> attention_ref(const RefTensor& q, const RefTensor& k, const RefTensor& v,
                                const AttentionRefArgs& args);

// [B, S, H·D] → [B, H, S, D]. `what` names the tensor in errors.
Result<RefTensor> ref_split_heads(const RefTensor& x, int64_t heads, std::string_view what);
// [B, H, S, D] → [B, S, H·D] (x must be 4-D).
RefTensor ref_merge_heads(const RefTensor& x);
// Two 4-D tensors joined on axis 2 (the sequence axis of [B, H, S, D]).
Result<RefTensor> ref_concat_seq(const RefTensor& past, const RefTensor& cur,
                                 std::string_view what);
// x + bias[offset : offset + x's last dim] broadcast over the last axis.
Result<RefTensor> ref_add_bias(const RefTensor& x, const RefTensor& bias, int64_t offset,
                               std::string_view what);
// kiln.Rotary's reference: x [..., D] with its first R elements rotated (rotary_dim 0 = D) by
// cos/sin, which broadcast to x's leading dims (compiler/ops/kiln_ops.md).
Result<RefTensor> ref_rotary(const RefTensor& x, const RefTensor& cos, const RefTensor& sin,
                             int64_t rotary_dim, bool interleaved);
// A bool mask (1 = attend) as an additive one (0 / -inf); other dtypes are returned unchanged.
RefTensor ref_bool_to_additive(const RefTensor& mask);
// Errors when a result with these dims would exceed the reference's element limit.
Status ref_check_numel(const std::vector<int64_t>& dims, std::string_view what);

// --- inference helpers -------------------------------------------------------------------------
// Inputs cos_in and cos_in + 1 of c's node as kiln.Rotary's cos/sin for X of shape x (non-empty),
// under the node's `rotary_dim` and `interleaved` attributes: X's dtype, one shape, last dim
// rotary_dim/2 or rotary_dim (then not interleaved), leading dims broadcasting to x's.
Status infer_rotary_tables(InferContext& c, size_t cos_in, const ir::Shape& x);
// Errors unless `s` broadcasts (numpy rules) to exactly `target`.
Status infer_check_broadcast(const InferContext& c, const ir::Shape& s, const ir::Shape& target,
                             std::string_view what);
// The head size hidden / heads; errors when it does not divide exactly.
Result<ir::DimExpr> infer_head_size(const InferContext& c, const ir::DimExpr& hidden, int64_t heads,
                                    std::string_view what);
// Errors unless a == b, naming both.
Status infer_same_dim(const InferContext& c, const ir::DimExpr& a, const ir::DimExpr& b,
                      std::string_view what);
// Errors unless input i has rank `rank`.
Status infer_rank(const InferContext& c, size_t i, size_t rank, std::string_view what);
// Errors unless input i is a float tensor.
Status infer_float(const InferContext& c, size_t i, std::string_view what);
// The attribute as a positive head count; errors when missing or not positive.
Result<int64_t> infer_heads_attr(const InferContext& c, const char* attr);

}  // namespace kiln::compiler
