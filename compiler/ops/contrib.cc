// Op family: contrib — onnxruntime's com.microsoft ops. Attention-like ones here
// (MultiHeadAttention, GroupQueryAttention, Attention); the norm and GELU ones in
// contrib_norm.cc. All attention math goes through attention_ref (ops/attention_ref.h).
//
// Masked keys are excluded from the softmax. onnxruntime instead adds mask_filter_value
// (-10000) to their scores: the results agree except for a row whose keys are all masked, which
// we return as zeros (onnxruntime: the unmasked softmax, since a constant shift cancels).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/attention_ref.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

void ops_register_contrib_norm(std::vector<OpDef>& defs);  // ops/contrib_norm.cc

namespace {

Status check_unsupported_inputs(const InferContext& c, size_t from, size_t to,
                                std::string_view what) {
  for (size_t i = from; i < to; ++i)
    if (c.has_input(i))
      return c.unsupported(fmt::format("input {} ({}) is not supported", i, what));
  return Status::ok_status();
}

Status check_01(const InferContext& c, const char* attr, int64_t fallback) {
  const int64_t v = c.node().attr_int(attr, fallback);
  if (v == 0 || v == 1) return Status::ok_status();
  return c.error(fmt::format("attribute '{}' must be 0 or 1, got {}", attr, v));
}

// An additive attention_bias input, broadcastable to [B, H, S, T].
Status check_attention_bias(const InferContext& c, size_t i, const ir::Shape& scores) {
  if (!c.has_input(i)) return Status::ok_status();
  KILN_RETURN_IF_ERROR(check_dtype_as(c, i, 0, "attention_bias"));
  return infer_check_broadcast(c, c.input(i).shape, scores, "attention_bias");
}

// A [B, T] key padding mask (0 = masked); other mask layouts are unsupported.
Status check_key_mask(const InferContext& c, size_t i, const ir::Shape& want, const char* what) {
  if (!c.has_input(i)) return Status::ok_status();
  const ir::Value& m = c.input(i);
  if (!dtype_is_integer(m.dtype) && m.dtype != DType::kBool)
    return c.error(fmt::format("{} '{}' is {}, expected int32", what, m.name, dtype_name(m.dtype)));
  if (m.shape != want)
    return c.unsupported(fmt::format(
        "{} '{}' is {}; only the 2-D [batch, total_sequence_length] 1/0 mask ({}) is supported",
        what, m.name, ir::shape_to_string(m.shape), ir::shape_to_string(want)));
  return Status::ok_status();
}

double default_scale(const ir::Node& n, int64_t head_size) {
  const double s = n.attr_float("scale", 0.0);
  return s != 0.0 ? s : 1.0 / std::sqrt(static_cast<double>(head_size));
}

// MultiHeadAttention's and Attention's reference once the heads are split: the scale attribute
// (or 1/√D), key padding and additive mask, and `unidirectional` as causal attention without a
// past (onnxruntime: query i sees keys j <= i); the heads merged back.
Result<std::vector<RefTensor>> ref_attend_unidirectional(const ir::Node& n, const RefTensor& q,
                                                         const RefTensor& k, const RefTensor& v,
                                                         const RefTensor* key_padding,
                                                         const RefTensor* mask) {
  AttentionRefArgs args;
  args.scale = default_scale(n, q.dims[3]);
  args.key_padding = key_padding;
  args.mask = mask;
  if (n.attr_int("unidirectional", 0) != 0) args.causal_offset = 0;
  KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(q, k, v, args));
  return std::vector<RefTensor>{ref_merge_heads(y)};
}

// --- MultiHeadAttention --------------------------------------------------------------------------
// Inputs: query, key, value [B, S|L, H·D], bias, key_padding_mask, attention_bias, then
// past_key, past_value, past_sequence_length, cache_indirection (unsupported).

Status infer_mha(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 10, 1, 4));
  if (!c.has_input(1) || !c.has_input(2))
    return c.unsupported("packed QKV / KV (no separate key and value) is not supported");
  if (c.num_outputs() > 1)
    return c.unsupported("outputs present_key / present_value / qk are not supported");
  KILN_RETURN_IF_ERROR(
      check_unsupported_inputs(c, 6, 10, "past state / past_sequence_length / cache_indirection"));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "query"));
  for (size_t i : {1, 2}) {
    KILN_RETURN_IF_ERROR(check_dtype_as(c, i, 0, "key/value"));
    KILN_RETURN_IF_ERROR(infer_rank(c, i, 3, "key/value (only 3-D [B, L, hidden] is supported)"));
  }
  KILN_RETURN_IF_ERROR(infer_rank(c, 0, 3, "query"));
  KILN_RETURN_IF_ERROR(check_01(c, "unidirectional", 0));
  KILN_ASSIGN_OR_RETURN(int64_t H, infer_heads_attr(c, "num_heads"));
  const ir::Shape &q = c.input(0).shape, &k = c.input(1).shape, &v = c.input(2).shape;
  KILN_RETURN_IF_ERROR(infer_head_size(c, q[2], H, "query").status());
  KILN_RETURN_IF_ERROR(infer_head_size(c, v[2], H, "value").status());
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[2], q[2], "key hidden size vs query hidden size"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, k[0], q[0], "key batch vs query batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[0], q[0], "value batch vs query batch"));
  KILN_RETURN_IF_ERROR(infer_same_dim(c, v[1], k[1], "value sequence vs key sequence"));
  if (c.has_input(3)) {
    KILN_RETURN_IF_ERROR(check_dtype_as(c, 3, 0, "bias"));
    std::optional<ir::DimExpr> n = dim_add(q[2], k[2]);
    if (n) n = dim_add(*n, v[2]);
    if (!n || c.input(3).shape != ir::Shape{*n})
      return c.error(fmt::format("bias is {}, expected [query + key + value hidden sizes]",
                                 ir::shape_to_string(c.input(3).shape)));
  }
  KILN_RETURN_IF_ERROR(check_key_mask(c, 4, {q[0], k[1]}, "key_padding_mask"));
  KILN_RETURN_IF_ERROR(check_attention_bias(c, 5, {q[0], ir::DimExpr::constant(H), q[1], k[1]}));
  c.set_output(0, c.input(0).dtype, {q[0], q[1], v[2]});
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_mha(const ir::Node& n, const std::vector<const RefTensor*>& in) {
  if (!ref_opt(in, 0) || !ref_opt(in, 1) || !ref_opt(in, 2))
    return invalid_argument("MultiHeadAttention needs query, key and value");
  const int64_t H = n.attr_int("num_heads", 0);
  RefTensor q = *in[0], k = *in[1], v = *in[2];
  if (const RefTensor* bias = ref_opt(in, 3)) {
    const int64_t hq = q.dims.empty() ? 0 : q.dims.back(), hk = k.dims.empty() ? 0 : k.dims.back();
    KILN_ASSIGN_OR_RETURN(q, ref_add_bias(q, *bias, 0, "query bias"));
    KILN_ASSIGN_OR_RETURN(k, ref_add_bias(k, *bias, hq, "key bias"));
    KILN_ASSIGN_OR_RETURN(v, ref_add_bias(v, *bias, hq + hk, "value bias"));
  }
  KILN_ASSIGN_OR_RETURN(q, ref_split_heads(q, H, "query"));
  KILN_ASSIGN_OR_RETURN(k, ref_split_heads(k, H, "key"));
  KILN_ASSIGN_OR_RETURN(v, ref_split_heads(v, H, "value"));
  return ref_attend_unidirectional(n, q, k, v, ref_opt(in, 4), ref_opt(in, 5));
}

// --- GroupQueryAttention -------------------------------------------------------------------------
// Inputs: query, key, value, past_key, past_value, seqlens_k, total_sequence_length, cos_cache,
// sin_cache, position_ids, attention_bias, head_sink, k_scale, v_scale, q_norm_weight,
// k_norm_weight. Outputs: output, present_key, present_value.
// Supported: the prompt (no past, or an empty one), where padding keys (j > seqlens_k[b]) only
// ever meet padding queries, so causality alone decides; and a past without padding
// (seqlens_k[b] + 1 == past + S for every batch), where present = concat(past, new).

Status infer_gqa(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 16, 1, 3));
  if (!c.has_input(5) || !c.has_input(6))
    return c.error("inputs 5 (seqlens_k) and 6 (total_sequence_length) are required");
  const ir::Node& n = c.node();
  if (n.attr_int("do_rotary", 0) != 0) return c.unsupported("do_rotary = 1 is not supported");
  if (n.attr_int("local_window_size", -1) > 0)
    return c.unsupported("local_window_size (sliding window) is not supported");
  if (n.attr_int("smooth_softmax", 0) != 0) return c.unsupported("smooth_softmax is not supported");
  if (n.attr_int("qk_output", 0) != 0) return c.unsupported("qk_output is not supported");
  if (n.attr_int("sliding_window_cache", 0) != 0)
    return c.unsupported("sliding_window_cache is not supported");
  if (n.attr_float("softcap", 0.0) < 0) return c.error("attribute 'softcap' must be >= 0");
  KILN_RETURN_IF_ERROR(check_01(c, "causal", 1));
  KILN_RETURN_IF_ERROR(check_unsupported_inputs(c, 7, 10, "cos_cache/sin_cache/position_ids"));
  KILN_RETURN_IF_ERROR(check_unsupported_inputs(c, 11, 16, "head_sink/k_scale/v_scale/qk norm"));
  if (c.has_input(1) != c.has_input(2)) return c.error("key and value must be given together");
  KILN_ASSIGN_OR_RETURN(int64_t H, infer_heads_attr(c, "num_heads"));
  KILN_ASSIGN_OR_RETURN(int64_t Hkv, infer_heads_attr(c, "kv_num_heads"));
  if (H % Hkv != 0)
    return c.error(fmt::format("num_heads {} is not a multiple of kv_num_heads {}", H, Hkv));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "query"));
  KILN_RETURN_IF_ERROR(infer_rank(c, 0, 3, "query"));
  const ir::Shape& q = c.input(0).shape;
  ir::DimExpr D;
  if (c.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(D, infer_head_size(c, q[2], H, "query"));
    for (size_t i : {1, 2}) {
      KILN_RETURN_IF_ERROR(check_dtype_as(c, i, 0, "key/value"));
      const ir::Shape want = {q[0], q[1], *ir::dim_mul(D, ir::DimExpr::constant(Hkv))};
      if (c.input(i).shape != want)
        return c.error(fmt::format(
            "'{}' is {}, expected {} (kv_sequence_length == sequence_length)", c.input(i).name,
            ir::shape_to_string(c.input(i).shape), ir::shape_to_string(want)));
    }
  } else {
    KILN_ASSIGN_OR_RETURN(D, infer_head_size(c, q[2], H + 2 * Hkv, "packed query"));
  }
  const ir::DimExpr Hk = ir::DimExpr::constant(Hkv);
  ir::DimExpr total = q[1];
  if (c.has_input(3) != c.has_input(4))
    return c.error("past_key and past_value must be given together");
  if (c.has_input(3)) {
    for (size_t i : {3, 4}) {
      KILN_RETURN_IF_ERROR(check_dtype_as(c, i, 0, "past_key/past_value"));
      KILN_RETURN_IF_ERROR(infer_rank(c, i, 4, "past_key/past_value"));
    }
    const ir::Shape& pk = c.input(3).shape;
    if (pk != ir::Shape{q[0], Hk, pk[2], D} || c.input(4).shape != pk)
      return c.error(fmt::format("past_key {} / past_value {} must be [{}, {}, P, {}]",
                                 ir::shape_to_string(pk), ir::shape_to_string(c.input(4).shape),
                                 q[0].to_string(), Hkv, D.to_string()));
    std::optional<ir::DimExpr> t = dim_add(pk[2], q[1]);
    if (!t) return c.error("past + new sequence length overflows");
    total = *t;
  }
  const ir::Value &sl = c.input(5), &ts = c.input(6);
  if (!dtype_is_integer(sl.dtype) || sl.shape != ir::Shape{q[0]})
    return c.error(fmt::format("seqlens_k '{}' is {} {}, expected int32 [{}]", sl.name,
                               dtype_name(sl.dtype), ir::shape_to_string(sl.shape),
                               q[0].to_string()));
  if (!dtype_is_integer(ts.dtype) ||
      !(ts.shape.empty() || ts.shape == ir::Shape{ir::DimExpr::constant(1)}))
    return c.error(fmt::format("total_sequence_length '{}' is {} {}, expected an int32 scalar",
                               ts.name, dtype_name(ts.dtype), ir::shape_to_string(ts.shape)));
  KILN_RETURN_IF_ERROR(check_attention_bias(c, 10, {q[0], ir::DimExpr::constant(H), q[1], total}));
  const DType dt = c.input(0).dtype;
  c.set_output(0, dt, {q[0], q[1], *ir::dim_mul(D, ir::DimExpr::constant(H))});
  if (c.num_outputs() > 1) c.set_output(1, dt, {q[0], Hk, total, D});
  if (c.num_outputs() > 2) c.set_output(2, dt, {q[0], Hk, total, D});
  return Status::ok_status();
}

// Splits a packed [B, S, (H + 2·Hkv)·D] query into q, k, v on the last axis.
Result<std::vector<RefTensor>> split_last(const RefTensor& x, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  if (x.dims.empty() || x.dims.back() != total)
    return invalid_argument(fmt::format("cannot split {} into {} on the last axis",
                                        dims_to_string(x.dims), fmt::join(sizes, " + ")));
  std::vector<RefTensor> out;
  const int64_t rows = x.numel() / total;
  int64_t off = 0;
  for (int64_t s : sizes) {
    std::vector<int64_t> dims = x.dims;
    dims.back() = s;
    RefTensor t = ref_make(x.dtype, dims);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(x.data.begin() + r * total + off, s, t.data.begin() + r * s);
    out.push_back(std::move(t));
    off += s;
  }
  return out;
}

Result<std::vector<RefTensor>> ref_gqa(const ir::Node& n, const std::vector<const RefTensor*>& in) {
  if (!ref_opt(in, 0) || !ref_opt(in, 5) || !ref_opt(in, 6))
    return invalid_argument("GroupQueryAttention needs query, seqlens_k, total_sequence_length");
  const int64_t H = n.attr_int("num_heads", 0), Hkv = n.attr_int("kv_num_heads", 0);
  const RefTensor& q3 = *in[0];
  if (q3.dims.size() != 3 || H <= 0 || Hkv <= 0)
    return invalid_argument(
        fmt::format("GroupQueryAttention: query {} must be 3-D", dims_to_string(q3.dims)));
  RefTensor q, k, v;
  if (ref_opt(in, 1) && ref_opt(in, 2)) {
    KILN_ASSIGN_OR_RETURN(q, ref_split_heads(q3, H, "query"));
    KILN_ASSIGN_OR_RETURN(k, ref_split_heads(*in[1], Hkv, "key"));
    KILN_ASSIGN_OR_RETURN(v, ref_split_heads(*in[2], Hkv, "value"));
  } else {
    const int64_t D = q3.dims[2] / (H + 2 * Hkv);
    KILN_ASSIGN_OR_RETURN(auto parts, split_last(q3, {H * D, Hkv * D, Hkv * D}));
    KILN_ASSIGN_OR_RETURN(q, ref_split_heads(parts[0], H, "query"));
    KILN_ASSIGN_OR_RETURN(k, ref_split_heads(parts[1], Hkv, "key"));
    KILN_ASSIGN_OR_RETURN(v, ref_split_heads(parts[2], Hkv, "value"));
  }
  const int64_t S = q.dims[2];
  int64_t past = 0;
  if (ref_opt(in, 3) && ref_opt(in, 4)) {
    past = in[3]->dims.size() == 4 ? in[3]->dims[2] : 0;
    KILN_ASSIGN_OR_RETURN(k, ref_concat_seq(*in[3], k, "past_key"));
    KILN_ASSIGN_OR_RETURN(v, ref_concat_seq(*in[4], v, "past_value"));
  }
  const int64_t T = past + S;
  const RefTensor &seqlens = *in[5], &total = *in[6];
  if (total.numel() != 1 || ref_to_int(total.data[0]) != T)
    return invalid_argument(fmt::format(
        "GroupQueryAttention: total_sequence_length must be past + sequence length = {}", T));
  if (seqlens.numel() != q.dims[0])
    return invalid_argument(fmt::format("GroupQueryAttention: seqlens_k {} must have {} entries",
                                        dims_to_string(seqlens.dims), q.dims[0]));
  for (double x : seqlens.data) {
    const int64_t len = ref_to_int(x) + 1;
    if (past == 0 ? (len < 1 || len > T) : len != T)
      return invalid_argument(fmt::format(
          "GroupQueryAttention: seqlens_k + 1 = {} is not supported (with {} past tokens and {} "
          "new ones it must be {})",
          len, past, S, past == 0 ? fmt::format("in [1, {}]", T) : fmt::format("{}", T)));
  }
  AttentionRefArgs args;
  args.scale = default_scale(n, q.dims[3]);
  args.softcap = n.attr_float("softcap", 0.0);
  args.mask = ref_opt(in, 10);
  if (n.attr_int("causal", 1) != 0) args.causal_offset = past;  // bottom-right: T - S
  KILN_ASSIGN_OR_RETURN(RefTensor y, attention_ref(q, k, v, args));
  std::vector<RefTensor> out;
  out.push_back(ref_merge_heads(y));
  out.push_back(std::move(k));
  out.push_back(std::move(v));
  return out;
}

// --- Attention -----------------------------------------------------------------------------------
// Inputs: input [B, S, Din], weights [Din, hq + hk + hv], bias, mask_index, past,
// attention_bias, past_sequence_length. Outputs: output [B, S, hv], present (unsupported).

Result<std::vector<int64_t>> ms_qkv_sizes(const InferContext* c, const ir::Node& n, int64_t width) {
  std::vector<int64_t> sizes = n.attr_ints("qkv_hidden_sizes");
  if (sizes.empty()) sizes.assign(3, width / 3);
  const int64_t heads = n.attr_int("num_heads", 0);
  std::string bad;
  if (sizes.size() != 3 || sizes[0] + sizes[1] + sizes[2] != width)
    bad = fmt::format("qkv_hidden_sizes [{}] must be 3 sizes adding up to the weights' {} columns",
                      fmt::join(sizes, ", "), width);
  else if (sizes[0] != sizes[1] || heads <= 0 || sizes[0] % heads != 0 || sizes[2] % heads != 0)
    bad = fmt::format("Q/K/V hidden sizes [{}] must have Q == K and divide into {} heads",
                      fmt::join(sizes, ", "), heads);
  if (bad.empty()) return sizes;
  return c ? c->error(bad) : invalid_argument("Attention: " + bad);
}

Status infer_ms_attention(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 7, 1, 2));
  if (c.num_outputs() > 1) return c.unsupported("output 1 (present) is not supported");
  if (c.has_input(4)) return c.unsupported("input 4 (past) is not supported");
  if (c.has_input(6)) return c.unsupported("input 6 (past_sequence_length) is not supported");
  if (c.node().attr_int("do_rotary", 0) != 0) return c.unsupported("do_rotary is not supported");
  KILN_RETURN_IF_ERROR(check_01(c, "unidirectional", 0));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "input"));
  KILN_RETURN_IF_ERROR(check_dtype_as(c, 1, 0, "weights"));
  KILN_RETURN_IF_ERROR(infer_rank(c, 0, 3, "input"));
  KILN_RETURN_IF_ERROR(infer_rank(c, 1, 2, "weights"));
  KILN_ASSIGN_OR_RETURN(int64_t H, infer_heads_attr(c, "num_heads"));
  const ir::Shape &x = c.input(0).shape, &w = c.input(1).shape;
  KILN_RETURN_IF_ERROR(infer_same_dim(c, w[0], x[2], "weights rows vs input hidden size"));
  if (!w[1].is_constant()) return c.error("the weights' column count must be constant");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ms_qkv_sizes(&c, c.node(), w[1].offset));
  if (c.has_input(2)) {
    KILN_RETURN_IF_ERROR(check_dtype_as(c, 2, 0, "bias"));
    if (c.input(2).shape != ir::Shape{w[1]})
      return c.error(fmt::format("bias is {}, expected [{}]", ir::shape_to_string(c.input(2).shape),
                                 w[1].offset));
  }
  KILN_RETURN_IF_ERROR(check_key_mask(c, 3, {x[0], x[1]}, "mask_index"));
  KILN_RETURN_IF_ERROR(check_attention_bias(c, 5, {x[0], ir::DimExpr::constant(H), x[1], x[1]}));
  c.set_output(0, c.input(0).dtype, {x[0], x[1], ir::DimExpr::constant(sizes[2])});
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_ms_attention(const ir::Node& n,
                                                const std::vector<const RefTensor*>& in) {
  if (!ref_opt(in, 0) || !ref_opt(in, 1))
    return invalid_argument("Attention needs input and weights");
  const RefTensor &x = *in[0], &w = *in[1];
  if (x.dims.size() != 3 || w.dims.size() != 2 || w.dims[0] != x.dims[2])
    return invalid_argument(fmt::format("Attention: input {} and weights {} do not multiply",
                                        dims_to_string(x.dims), dims_to_string(w.dims)));
  const int64_t rows = x.dims[0] * x.dims[1], K = x.dims[2], N = w.dims[1];
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ms_qkv_sizes(nullptr, n, N));
  RefTensor qkv = ref_make(x.dtype, {x.dims[0], x.dims[1], N});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kk = 0; kk < K; ++kk) {
      const double a = x.data[r * K + kk];
      for (int64_t j = 0; j < N; ++j) qkv.data[r * N + j] += a * w.data[kk * N + j];
    }
  if (const RefTensor* bias = ref_opt(in, 2)) {
    KILN_ASSIGN_OR_RETURN(qkv, ref_add_bias(qkv, *bias, 0, "bias"));
  }
  KILN_ASSIGN_OR_RETURN(auto parts, split_last(qkv, sizes));
  const int64_t H = n.attr_int("num_heads", 0);
  KILN_ASSIGN_OR_RETURN(RefTensor q, ref_split_heads(parts[0], H, "Q"));
  KILN_ASSIGN_OR_RETURN(RefTensor k, ref_split_heads(parts[1], H, "K"));
  KILN_ASSIGN_OR_RETURN(RefTensor v, ref_split_heads(parts[2], H, "V"));
  return ref_attend_unidirectional(n, q, k, v, ref_opt(in, 3), ref_opt(in, 5));
}

}  // namespace

void ops_register_contrib(std::vector<OpDef>& defs) {
  defs.push_back({kDomainMs, "MultiHeadAttention", infer_mha, ref_mha});
  defs.push_back({kDomainMs, "GroupQueryAttention", infer_gqa, ref_gqa});
  defs.push_back({kDomainMs, "Attention", infer_ms_attention, ref_ms_attention});
  ops_register_contrib_norm(defs);
}

}  // namespace kiln::compiler
