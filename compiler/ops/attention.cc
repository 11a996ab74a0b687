// Op family: attention. kiln.Attention (compiler/ops/kiln_ops.md) and ONNX Attention (opset 23/24:
// Q/K/V 4-D [B, H, S, D] or 3-D [B, S, H·D], GQA, is_causal, attn_mask, past_key/past_value).
// Both compute through attention_ref (ops/attention_ref.h).
#include <fmt/format.h>

#include <cmath>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/attention_ref.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// Q, K and V share one float dtype.
Status check_qkv_dtypes(const InferContext& c) {
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "Q"));
  for (size_t i : {1, 2})
    if (c.input(i).dtype != c.input(0).dtype)
      return c.error(fmt::format("input '{}' is {}, Q is {}", c.input(i).name,
                                 dtype_name(c.input(i).dtype), dtype_name(c.input(0).dtype)));
  return Status::ok_status();
}

// --- kiln.Attention ------------------------------------------------------------------------------

Status infer_kiln_attention(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 5, 1, 1));
  KILN_RETURN_IF_ERROR(check_qkv_dtypes(c));
  for (size_t i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(infer_rank(c, i, 4, "Q/K/V"));
  const ir::Shape& q = c.input(0).shape;
  const ir::Shape& k = c.input(1).shape;
  const ir::Shape& v = c.input(2).shape;
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[0], q[0], "K batch vs Q batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[0], q[0], "V batch vs Q batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[3], q[3], "K head size vs Q head size"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[1], k[1], "V heads vs K heads"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[2], k[2], "V sequence vs K sequence"));
  if (q[1] != k[1] && (!q[1].is_constant() || !k[1].is_constant() || k[1].offset <= 0 ||
                       q[1].offset % k[1].offset != 0))
    return c.error(fmt::format("{} query heads are not a multiple of {} key/value heads",
                               q[1].to_string(), k[1].to_string()));
  if (!c.node().has_attr("scale")) return c.error("attribute 'scale' is required");
  const int64_t causal = c.node().attr_int("causal", 0);
  if (causal != 0 && causal != 1)
    return c.error(fmt::format("attribute 'causal' must be 0 or 1, got {}", causal));
  if (c.has_input(3)) {
    KILN_RETURN_IF_ERROR(infer_float(c, 3, "mask"));
    KILN_RETURN_IF_ERROR(
        infer_check_broadcast(c, c.input(3).shape, {q[0], q[1], q[2], k[2]}, "mask"));
  }
  if (c.has_input(4)) {
    const ir::Value& kp = c.input(4);
    if (kp.shape != ir::Shape{q[0], k[2]})
      return c.error(fmt::format("key_padding '{}' is {}, expected [{}, {}]", kp.name,
                                 ir::shape_to_string(kp.shape), q[0].to_string(),
                                 k[2].to_string()));
  }
  c.set_output(0, c.input(0).dtype, {q[0], q[1], q[2], v[3]});
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_kiln_attention(const ir::Node& n,
                                                  const std::vector<const RefTensor*>& in) {
  if (in.size() < 3 || !in[0] || !in[1] || !in[2])
    return invalid_argument("kiln.Attention needs Q, K and V");
  AttentionRefArgs args;
  args.scale = n.attr_float("scale", 1.0);
  args.mask = in.size() > 3 ? in[3] : nullptr;
  args.key_padding = in.size() > 4 ? in[4] : nullptr;
  if (n.attr_int("causal", 0) != 0 && in[0]->dims.size() == 4 && in[1]->dims.size() == 4)
    args.causal_offset = in[1]->dims[2] - in[0]->dims[2];
  KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(*in[0], *in[1], *in[2], args));
  return std::vector<RefTensor>{std::move(y)};
}

// --- kiln.PagedAttention -------------------------------------------------------------------------
// Generation programs (passes/kv_paged): one layer's attention over the runtime's paged KV cache.
// Q [1, Hq, T, D], K [1, Hkv, T, D], V [1, Hkv, T, Dv]: the step's T tokens. The runtime appends K
// and V to layer `layer`'s cache and attends each token's query over its own sequence's cache.
// With cos/sin (inputs 3 and 4; attributes rotary_dim, interleaved), Q and K are rotated as
// kiln.Rotary would first. The reference computes the one case it can see without a cache: a
// single sequence's prefill from position 0 (causal attention over the step's own tokens).

Status infer_kiln_paged_attention(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 5, 1, 1));
  const bool rotary = c.num_inputs() > 3;
  if (rotary && (c.num_inputs() != 5 || !c.has_input(3) || !c.has_input(4)))
    return c.error("rotary takes both cos and sin (inputs 3 and 4)");
  KILN_RETURN_IF_ERROR(check_qkv_dtypes(c));
  for (size_t i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(infer_rank(c, i, 4, "Q/K/V"));
  const ir::Shape& q = c.input(0).shape;
  const ir::Shape& k = c.input(1).shape;
  const ir::Shape& v = c.input(2).shape;
  for (const ir::Shape* s : {&q, &k, &v})
    if ((*s)[0] != ir::DimExpr::constant(1))
      return c.error(fmt::format("Q/K/V {}: a generation step has batch 1 (its tokens on axis 2)",
                                 ir::shape_to_string(*s)));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[2], q[2], "K tokens vs Q tokens"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[2], q[2], "V tokens vs Q tokens"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[3], q[3], "K head size vs Q head size"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[1], k[1], "V heads vs K heads"));
  for (const ir::DimExpr* d : {&q[1], &k[1], &q[3], &v[3]})
    if (!d->is_constant() || d->offset <= 0)
      return c.error("heads and head sizes must be positive numbers");
  if (q[1].offset % k[1].offset != 0)
    return c.error(fmt::format("{} query heads are not a multiple of {} key/value heads",
                               q[1].offset, k[1].offset));
  if (!c.node().has_attr("scale")) return c.error("attribute 'scale' is required");
  if (c.node().attr_int("layer", -1) < 0) return c.error("attribute 'layer' (>= 0) is required");
  if (rotary) {
    KILN_RETURN_IF_ERROR(infer_rotary_tables(c, 3, q));
    KILN_RETURN_IF_ERROR(infer_rotary_tables(c, 3, k));
  }
  c.set_output(0, c.input(0).dtype, {q[0], q[1], q[2], v[3]});
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_kiln_paged_attention(const ir::Node& n,
                                                        const std::vector<const RefTensor*>& in) {
  if ((in.size() != 3 && in.size() != 5) || !in[0] || !in[1] || !in[2])
    return invalid_argument("kiln.PagedAttention needs Q, K and V (and cos, sin)");
  AttentionRefArgs args;
  args.scale = n.attr_float("scale", 1.0);
  args.causal_offset = 0;
  if (in.size() == 5) {
    if (!in[3] || !in[4])
      return invalid_argument("kiln.PagedAttention: cos and sin are both needed");
    const int64_t r = n.attr_int("rotary_dim", 0);
    const bool interleaved = n.attr_int("interleaved", 0) != 0;
    KILN_ASSIGN_OR_RETURN(RefTensor q, ref_rotary(*in[0], *in[3], *in[4], r, interleaved));
    KILN_ASSIGN_OR_RETURN(RefTensor k, ref_rotary(*in[1], *in[3], *in[4], r, interleaved));
    KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(q, k, *in[2], args));
    return std::vector<RefTensor>{std::move(y)};
  }
  KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(*in[0], *in[1], *in[2], args));
  return std::vector<RefTensor>{std::move(y)};
}

// --- ONNX Attention ------------------------------------------------------------------------------
// Inputs: Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen (opset 24).
// Outputs: Y, present_key, present_value, qk_matmul_output (unsupported).

// The 4-D [B, H, S, D] shapes of Q, K, V (3-D inputs split into heads).
struct OnnxAttnShapes {
  ir::Shape q, k, v;
};

Result<OnnxAttnShapes> onnx_attention_shapes(const InferContext& c) {
  const size_t rank = c.input(0).shape.size();
  if (rank != 3 && rank != 4)
    return c.error(fmt::format("Q '{}' is {}, expected 3-D [B, S, H·D] or 4-D [B, H, S, D]",
                               c.input(0).name, ir::shape_to_string(c.input(0).shape)));
  for (size_t i : {1, 2}) KILN_RETURN_IF_ERROR(infer_rank(c, i, rank, "K/V (same rank as Q)"));
  OnnxAttnShapes s;
  if (rank == 4) {
    s = {c.input(0).shape, c.input(1).shape, c.input(2).shape};
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t hq, infer_heads_attr(c, "q_num_heads"));
    KILN_ASSIGN_OR_RETURN(int64_t hkv, infer_heads_attr(c, "kv_num_heads"));
    const ir::DimExpr Hq = ir::DimExpr::constant(hq), Hkv = ir::DimExpr::constant(hkv);
    auto split = [&](size_t i, const ir::DimExpr& heads) -> Result<ir::Shape> {
      const ir::Shape& x = c.input(i).shape;
      KILN_ASSIGN_OR_RETURN(ir::DimExpr d, infer_head_size(c, x[2], heads.offset, c.input(i).name));
      return ir::Shape{x[0], heads, x[1], d};
    };
    KILN_ASSIGN_OR_RETURN(s.q, split(0, Hq));
    KILN_ASSIGN_OR_RETURN(s.k, split(1, Hkv));
    KILN_ASSIGN_OR_RETURN(s.v, split(2, Hkv));
  }
  KILN_RETURN_IF_ERROR(infer_same_dim(c, s.k[0], s.q[0], "K batch vs Q batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, s.v[0], s.q[0], "V batch vs Q batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, s.k[3], s.q[3], "K head size vs Q head size"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, s.v[1], s.k[1], "V heads vs K heads"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, s.v[2], s.k[2], "V sequence vs K sequence"));
  const ir::DimExpr hq = s.q[1], hkv = s.k[1];
  if (!hq.is_constant() || !hkv.is_constant() || hkv.offset <= 0 || hq.offset % hkv.offset != 0)
    return c.error(fmt::format("{} query heads are not a multiple of {} key/value heads",
                               hq.to_string(), hkv.to_string()));
  return s;
}

Status infer_onnx_attention(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 7, 1, 4));
  if (c.num_outputs() > 3) return c.unsupported("output 3 (qk_matmul_output) is not supported");
  if (c.has_input(6)) return c.unsupported("input 6 (nonpad_kv_seqlen) is not supported");
  KILN_RETURN_IF_ERROR(check_qkv_dtypes(c));
  KILN_ASSIGN_OR_RETURN(OnnxAttnShapes s, onnx_attention_shapes(c));
  const int64_t causal = c.node().attr_int("is_causal", 0);
  if (causal != 0 && causal != 1)
    return c.error(fmt::format("attribute 'is_causal' must be 0 or 1, got {}", causal));
  if (c.node().attr_float("softcap", 0.0) < 0)
    return c.error(fmt::format("attribute 'softcap' must be >= 0, got {}",
                               c.node().attr_float("softcap", 0.0)));
  ir::DimExpr total = s.k[2];
  if (c.has_input(4) != c.has_input(5))
    return c.error("past_key and past_value must be given together");
  if (c.has_input(4)) {
    for (size_t i : {4, 5}) {
      KILN_RETURN_IF_ERROR(infer_rank(c, i, 4, "past_key/past_value"));
      if (c.input(i).dtype != c.input(0).dtype)
        return c.error(fmt::format("'{}' is {}, Q is {}", c.input(i).name,
                                   dtype_name(c.input(i).dtype), dtype_name(c.input(0).dtype)));
    }
    const ir::Shape& pk = c.input(4).shape;
    const ir::Shape& pv = c.input(5).shape;
    const ir::Shape want_k = {s.k[0], s.k[1], pk[2], s.k[3]};
    const ir::Shape want_v = {s.v[0], s.v[1], pk[2], s.v[3]};
    if (pk != want_k || pv != want_v)
      return c.error(fmt::format("past_key {} / past_value {} do not match K {} / V {}",
                                 ir::shape_to_string(pk), ir::shape_to_string(pv),
                                 ir::shape_to_string(s.k), ir::shape_to_string(s.v)));
    std::optional<ir::DimExpr> t = dim_add(pk[2], s.k[2]);
    if (!t) return c.error("past + new sequence length overflows");
    total = *t;
  }
  if (c.has_input(3)) {
    const ir::Value& m = c.input(3);
    if (m.dtype != DType::kBool && m.dtype != c.input(0).dtype)
      return c.error(fmt::format("attn_mask '{}' is {}, expected bool or {} (Q's dtype)", m.name,
                                 dtype_name(m.dtype), dtype_name(c.input(0).dtype)));
    KILN_RETURN_IF_ERROR(
        infer_check_broadcast(c, m.shape, {s.q[0], s.q[1], s.q[2], total}, "attn_mask"));
  }
  const DType dt = c.input(0).dtype;
  if (c.input(0).shape.size() == 4) {
    c.set_output(0, dt, {s.q[0], s.q[1], s.q[2], s.v[3]});
  } else {
    std::optional<ir::DimExpr> hidden = ir::dim_mul(s.q[1], s.v[3]);
    if (!hidden) return c.error("output hidden size is not linear in S");
    c.set_output(0, dt, {s.q[0], s.q[2], *hidden});
  }
  if (c.num_outputs() > 1) c.set_output(1, dt, {s.k[0], s.k[1], total, s.k[3]});
  if (c.num_outputs() > 2) c.set_output(2, dt, {s.v[0], s.v[1], total, s.v[3]});
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_onnx_attention(const ir::Node& n,
                                                  const std::vector<const RefTensor*>& in) {
  auto arg = [&](size_t i) { return i < in.size() ? in[i] : nullptr; };
  if (!arg(0) || !arg(1) || !arg(2)) return invalid_argument("Attention needs Q, K and V");
  const bool three_d = in[0]->dims.size() == 3;
  RefTensor q = *in[0], k = *in[1], v = *in[2];
  if (three_d) {
    const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
    KILN_ASSIGN_OR_RETURN(q, ref_split_heads(*in[0], hq, "Q"));
    KILN_ASSIGN_OR_RETURN(k, ref_split_heads(*in[1], hkv, "K"));
    KILN_ASSIGN_OR_RETURN(v, ref_split_heads(*in[2], hkv, "V"));
  }
  if (q.dims.size() != 4) return invalid_argument("Attention: Q must be 3-D or 4-D");
  AttentionRefArgs args;
  int64_t past = 0;
  if (arg(4) && arg(5)) {
    past = arg(4)->dims.size() == 4 ? arg(4)->dims[2] : 0;
    KILN_ASSIGN_OR_RETURN(k, ref_concat_seq(*arg(4), k, "past_key"));
    KILN_ASSIGN_OR_RETURN(v, ref_concat_seq(*arg(5), v, "past_value"));
  }
  args.scale = n.has_attr("scale") ? n.attr_float("scale", 1.0)
                                   : 1.0 / std::sqrt(static_cast<double>(q.dims[3]));
  args.softcap = n.attr_float("softcap", 0.0);
  // ONNX aligns the causal mask to the past: query i sees key j <= i + past_length.
  if (n.attr_int("is_causal", 0) != 0) args.causal_offset = past;
  RefTensor mask;
  if (arg(3)) {
    mask = ref_bool_to_additive(*arg(3));
    args.mask = &mask;
  }
  KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(q, k, v, args));
  std::vector<RefTensor> out;
  out.push_back(three_d ? ref_merge_heads(y) : std::move(y));
  out.push_back(std::move(k));
  out.push_back(std::move(v));
  return out;
}

}  // namespace

void ops_register_attention(std::vector<OpDef>& defs) {
  defs.push_back({kDomainKiln, "Attention", infer_kiln_attention, ref_kiln_attention});
  defs.push_back(
      {kDomainKiln, "PagedAttention", infer_kiln_paged_attention, ref_kiln_paged_attention});
  defs.push_back({kDomainOnnx, "Attention", infer_onnx_attention, ref_onnx_attention});
}

}  // namespace kiln::compiler
