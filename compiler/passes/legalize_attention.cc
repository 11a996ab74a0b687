// legalize_variants, part 2: every attention variant onto kiln.Attention
// (compiler/ops/kiln_ops.md). 3-D [B, S, H·D] tensors go through Reshape [0, 0, H, D] + Transpose
// to [B, H, S, D] and back; a past cache is a Concat on the sequence axis, which is also the
// present output.
//
// kiln.Attention aligns its causal mask to the end of the keys (j <= i + Skv − Sq). ONNX Attention
// and onnxruntime's ops align it to the past length instead; both agree when the new keys are as
// many as the queries, so a causal node with other lengths is kept as it is.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "compiler/passes/legalize_builder.h"

namespace kiln::compiler {

namespace {

// com.microsoft ops: scale 0 (the default) means 1/sqrt(head size).
double ms_scale(const ir::Node& n, int64_t head_size) {
  const double s = n.attr_float("scale", 0.0);
  return s != 0.0 ? s : 1.0 / std::sqrt(static_cast<double>(head_size));
}

// kiln.Attention(q, k, v, mask, key_padding) → output `into` (3-D outputs through from_heads).
void emit_attention(LegalizeBuilder& b, int q, int k, int v, int mask, int key_padding,
                    double scale, bool causal, bool three_d, int into) {
  std::vector<int> ins = {q, k, v, mask, key_padding};
  while (ins.back() < 0) ins.pop_back();
  const ir::Shape &qs = b.shape(q), &vs = b.shape(v);
  const ir::Shape y_shape = {qs[0], qs[1], qs[2], vs[3]};
  const AttrMap attrs = {{"scale", scale}, {"causal", int64_t{causal ? 1 : 0}}};
  const int y = b.op1("Attention", ins, b.dtype(q), y_shape, attrs, three_d ? -1 : into, "kiln");
  if (three_d) b.from_heads(y, into);
}

// K or V in [B, H, T, D] form: split into heads when 3-D, joined after the past when there is
// one. The result is written into `present` (when >= 0), or aliased to it.
int kv_heads(LegalizeBuilder& b, int x, bool three_d, int64_t heads, int past, int present) {
  if (past >= 0) {
    const int h = three_d ? b.to_heads(x, heads) : x;
    return b.concat({past, h}, 2, present);
  }
  if (three_d) return b.to_heads(x, heads, present);
  if (present >= 0) b.alias(present, x);
  return x;
}

bool constant_dim(const ir::DimExpr& d) { return d.is_constant() && d.offset > 0; }

}  // namespace

// ONNX Attention: Q, K, V, attn_mask, past_key, past_value → Y, present_key, present_value.
Result<bool> legalize_onnx_attention(LegalizeBuilder& b) {
  const ir::Node& n = b.node();
  if (n.attr_float("softcap", 0.0) != 0.0 || b.out(3) >= 0 || b.in(6) >= 0) return false;
  const bool three_d = b.shape(b.in(0)).size() == 3;
  const size_t seq_axis = three_d ? 1 : 2;
  const bool causal = n.attr_int("is_causal", 0) != 0;
  if (causal && b.shape(b.in(0))[seq_axis] != b.shape(b.in(1))[seq_axis]) return false;
  const int64_t hq = n.attr_int("q_num_heads", 0), hkv = n.attr_int("kv_num_heads", 0);
  const ir::DimExpr last = b.shape(b.in(0)).back();
  if (!constant_dim(last) || (three_d && (hq <= 0 || last.offset % hq != 0))) return false;
  const int64_t head_size = three_d ? last.offset / hq : last.offset;
  const int q = three_d ? b.to_heads(b.in(0), hq) : b.in(0);
  const int k = kv_heads(b, b.in(1), three_d, hkv, b.in(4), b.needed(1) ? b.out(1) : -1);
  const int v = kv_heads(b, b.in(2), three_d, hkv, b.in(5), b.needed(2) ? b.out(2) : -1);
  int mask = b.in(3);
  if (mask >= 0 && b.dtype(mask) == DType::kBool) {  // true = attend → 0, false → -inf
    const DType dt = b.dtype(b.in(0));
    mask = b.op1("Where",
                 {mask, b.scalar(dt, 0.0), b.scalar(dt, -std::numeric_limits<double>::infinity())},
                 dt, b.shape(mask));
  }
  const double scale = n.has_attr("scale") ? n.attr_float("scale", 1.0)
                                           : 1.0 / std::sqrt(static_cast<double>(head_size));
  emit_attention(b, q, k, v, mask, -1, scale, causal, three_d, b.out(0));
  return true;
}

// com.microsoft MultiHeadAttention: query, key, value, bias, key_padding_mask, attention_bias.
Result<bool> legalize_ms_mha(LegalizeBuilder& b) {
  const ir::Node& n = b.node();
  const int64_t H = n.attr_int("num_heads", 0);
  int q = b.in(0), k = b.in(1), v = b.in(2);
  const bool causal = n.attr_int("unidirectional", 0) != 0;
  if (causal && b.shape(q)[1] != b.shape(k)[1]) return false;
  const ir::DimExpr hq = b.shape(q)[2], hk = b.shape(k)[2], hv = b.shape(v)[2];
  if (!constant_dim(hq) || !constant_dim(hk) || !constant_dim(hv)) return false;
  if (b.in(3) >= 0) {
    const std::vector<int> bias = b.split(b.in(3), 0, {hq.offset, hk.offset, hv.offset});
    q = b.binary("Add", q, bias[0]);
    k = b.binary("Add", k, bias[1]);
    v = b.binary("Add", v, bias[2]);
  }
  q = b.to_heads(q, H);
  k = b.to_heads(k, H);
  v = b.to_heads(v, H);
  const double scale = ms_scale(n, hq.offset / H);
  emit_attention(b, q, k, v, b.in(5), b.in(4), scale, causal, true, b.out(0));
  return true;
}

// com.microsoft GroupQueryAttention: query (or packed QKV), key, value, past_key, past_value,
// seqlens_k, total_sequence_length, …, attention_bias (10). Causal by default. seqlens_k and
// total_sequence_length only pick the cases the reference accepts (compiler/ops/contrib.cc), where
// causality alone decides which keys a query sees, so the legalized graph does not read them.
Result<bool> legalize_ms_gqa(LegalizeBuilder& b) {
  const ir::Node& n = b.node();
  if (n.attr_float("softcap", 0.0) != 0.0) return false;
  const int64_t H = n.attr_int("num_heads", 0), Hkv = n.attr_int("kv_num_heads", 0);
  int q = b.in(0), k = b.in(1), v = b.in(2);
  const ir::DimExpr width = b.shape(q)[2];
  if (!constant_dim(width)) return false;
  const int64_t D = width.offset / (k < 0 ? H + 2 * Hkv : H);
  if (k < 0) {
    const std::vector<int> parts = b.split(q, 2, {H * D, Hkv * D, Hkv * D});
    q = parts[0], k = parts[1], v = parts[2];
  }
  q = b.to_heads(q, H);
  k = kv_heads(b, k, true, Hkv, b.in(3), b.needed(1) ? b.out(1) : -1);
  v = kv_heads(b, v, true, Hkv, b.in(4), b.needed(2) ? b.out(2) : -1);
  const double scale = ms_scale(n, D);
  emit_attention(b, q, k, v, b.in(10), -1, scale, n.attr_int("causal", 1) != 0, true, b.out(0));
  return true;
}

// com.microsoft Attention: input, weights, bias, mask_index, past, attention_bias.
Result<bool> legalize_ms_attention(LegalizeBuilder& b) {
  const ir::Node& n = b.node();
  const int64_t H = n.attr_int("num_heads", 0);
  const int x = b.in(0), w = b.in(1);
  const ir::Shape xs = b.shape(x);
  const ir::DimExpr N = b.shape(w)[1];
  if (!constant_dim(N)) return false;
  std::vector<int64_t> sizes = n.attr_ints("qkv_hidden_sizes");
  if (sizes.empty()) sizes.assign(3, N.offset / 3);
  int xw = b.op1("MatMul", {x, w}, b.dtype(x), {xs[0], xs[1], N});
  if (b.in(2) >= 0) xw = b.binary("Add", xw, b.in(2));
  const std::vector<int> parts = b.split(xw, 2, sizes);
  const int q = b.to_heads(parts[0], H), k = b.to_heads(parts[1], H);
  const int v = b.to_heads(parts[2], H);
  const double scale = ms_scale(n, sizes[0] / H);
  emit_attention(b, q, k, v, b.in(5), b.in(3), scale, n.attr_int("unidirectional", 0) != 0, true,
                 b.out(0));
  return true;
}

}  // namespace kiln::compiler
