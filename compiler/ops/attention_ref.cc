#include "compiler/ops/attention_ref.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

Status ref_check_numel(const std::vector<int64_t>& dims, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kRefMaxElements)
      return resource_exhausted(fmt::format("{} {} would have more than {} elements", what,
                                            dims_to_string(dims), kRefMaxElements));
  return Status::ok_status();
}

Result<RefTensor> attention_ref(const RefTensor& q, const RefTensor& k, const RefTensor& v,
                                const AttentionRefArgs& args) {
  if (q.dims.size() != 4 || k.dims.size() != 4 || v.dims.size() != 4)
    return invalid_argument(fmt::format("attention needs 4-D Q, K, V; got {}, {}, {}",
                                        dims_to_string(q.dims), dims_to_string(k.dims),
                                        dims_to_string(v.dims)));
  const int64_t B = q.dims[0], Hq = q.dims[1], Sq = q.dims[2], D = q.dims[3];
  const int64_t Hkv = k.dims[1], Skv = k.dims[2], Dv = v.dims[3];
  if (k.dims[0] != B || v.dims[0] != B || k.dims[3] != D || v.dims[1] != Hkv || v.dims[2] != Skv)
    return invalid_argument(
        fmt::format("attention Q {}, K {}, V {} disagree (want [B, Hq, Sq, D], [B, Hkv, Skv, D], "
                    "[B, Hkv, Skv, Dv])",
                    dims_to_string(q.dims), dims_to_string(k.dims), dims_to_string(v.dims)));
  if (Hkv <= 0 || Hq % Hkv != 0)
    return invalid_argument(
        fmt::format("attention: {} query heads are not a multiple of {} key/value heads", Hq, Hkv));
  const std::vector<int64_t> score_dims = {B, Hq, Sq, Skv};
  std::vector<int64_t> mask_index;
  if (args.mask) {
    const std::vector<int64_t>& m = args.mask->dims;
    bool ok = m.size() <= 4;
    for (size_t i = 0; ok && i < m.size(); ++i) {
      const int64_t want = score_dims[4 - m.size() + i];
      ok = m[i] == want || m[i] == 1;
    }
    if (!ok)
      return invalid_argument(fmt::format("attention mask {} does not broadcast to {}",
                                          dims_to_string(m), dims_to_string(score_dims)));
    KILN_RETURN_IF_ERROR(ref_check_numel(score_dims, "attention scores"));
    mask_index = ref_broadcast_index(score_dims, m);
  }
  if (args.key_padding && args.key_padding->dims != std::vector<int64_t>{B, Skv})
    return invalid_argument(fmt::format("attention key padding is {}, expected [{}, {}]",
                                        dims_to_string(args.key_padding->dims), B, Skv));
  KILN_RETURN_IF_ERROR(ref_check_numel({B, Hq, Sq, Dv}, "attention output"));
  RefTensor out = ref_make(q.dtype, {B, Hq, Sq, Dv});
  const int64_t group = Hq / Hkv;
  std::vector<double> score(static_cast<size_t>(Skv));
  std::vector<char> keep(static_cast<size_t>(Skv));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kv_row = (b * Hkv + h / group) * Skv;
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t row = (b * Hq + h) * Sq + i;
        const double* qi = &q.data[static_cast<size_t>(row * D)];
        double top = -std::numeric_limits<double>::infinity();
        bool any = false;
        for (int64_t j = 0; j < Skv; ++j) {
          keep[j] = 0;
          if (args.causal_offset && j > i + *args.causal_offset) continue;
          if (args.key_padding && args.key_padding->data[b * Skv + j] == 0.0) continue;
          const double* kj = &k.data[static_cast<size_t>((kv_row + j) * D)];
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
          s *= args.scale;
          if (args.softcap > 0) s = args.softcap * std::tanh(s / args.softcap);
          if (args.mask) s += args.mask->data[mask_index[row * Skv + j]];
          if (s == -std::numeric_limits<double>::infinity()) continue;  // masked out
          score[j] = s;
          keep[j] = 1;
          any = true;
          if (s > top) top = s;  // a NaN score reaches the sum through exp() below
        }
        if (!any) continue;  // nothing visible: the row stays zero
        double sum = 0;
        for (int64_t j = 0; j < Skv; ++j)
          if (keep[j]) sum += score[j] = std::exp(score[j] - top);
        double* y = &out.data[static_cast<size_t>(row * Dv)];
        for (int64_t j = 0; j < Skv; ++j) {
          if (!keep[j]) continue;
          const double p = score[j] / sum;
          const double* vj = &v.data[static_cast<size_t>((kv_row + j) * Dv)];
          for (int64_t d = 0; d < Dv; ++d) y[d] += p * vj[d];
        }
      }
    }
  }
  return out;
}

Result<RefTensor> ref_split_heads(const RefTensor& x, int64_t heads, std::string_view what) {
  if (x.dims.size() != 3 || heads <= 0 || x.dims[2] % heads != 0)
    return invalid_argument(fmt::format("{} is {}, expected [B, S, H·D] with {} heads", what,
                                        dims_to_string(x.dims), heads));
  const int64_t B = x.dims[0], S = x.dims[1], D = x.dims[2] / heads;
  RefTensor out = ref_make(x.dtype, {B, heads, S, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < D; ++d)
          out.data[((b * heads + h) * S + s) * D + d] = x.data[((b * S + s) * heads + h) * D + d];
  return out;
}

RefTensor ref_merge_heads(const RefTensor& x) {
  const int64_t B = x.dims[0], H = x.dims[1], S = x.dims[2], D = x.dims[3];
  RefTensor out = ref_make(x.dtype, {B, S, H * D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d)
          out.data[((b * S + s) * H + h) * D + d] = x.data[((b * H + h) * S + s) * D + d];
  return out;
}

Result<RefTensor> ref_concat_seq(const RefTensor& past, const RefTensor& cur,
                                 std::string_view what) {
  if (past.dims.size() != 4 || cur.dims.size() != 4 || past.dims[0] != cur.dims[0] ||
      past.dims[1] != cur.dims[1] || past.dims[3] != cur.dims[3])
    return invalid_argument(fmt::format("{}: past {} and new {} do not join on the sequence axis",
                                        what, dims_to_string(past.dims), dims_to_string(cur.dims)));
  const int64_t BH = past.dims[0] * past.dims[1], P = past.dims[2], S = cur.dims[2];
  const int64_t D = past.dims[3];
  RefTensor out = ref_make(cur.dtype, {past.dims[0], past.dims[1], P + S, D});
  for (int64_t r = 0; r < BH; ++r) {
    std::copy_n(past.data.begin() + r * P * D, P * D, out.data.begin() + r * (P + S) * D);
    std::copy_n(cur.data.begin() + r * S * D, S * D, out.data.begin() + (r * (P + S) + P) * D);
  }
  return out;
}

Result<RefTensor> ref_add_bias(const RefTensor& x, const RefTensor& bias, int64_t offset,
                               std::string_view what) {
  const int64_t n = x.dims.empty() ? 1 : x.dims.back();
  if (bias.dims.size() != 1 || offset < 0 || offset + n > bias.dims[0])
    return invalid_argument(fmt::format("{}: bias {} has no elements [{}, {})", what,
                                        dims_to_string(bias.dims), offset, offset + n));
  RefTensor out = x;
  for (size_t i = 0; i < out.data.size(); ++i)
    out.data[i] += bias.data[static_cast<size_t>(offset) + i % static_cast<size_t>(n)];
  return out;
}

RefTensor ref_bool_to_additive(const RefTensor& mask) {
  if (mask.dtype != DType::kBool) return mask;
  RefTensor out = mask;
  out.dtype = DType::kF32;
  for (double& x : out.data) x = x != 0.0 ? 0.0 : -std::numeric_limits<double>::infinity();
  return out;
}

Status infer_check_broadcast(const InferContext& c, const ir::Shape& s, const ir::Shape& target,
                             std::string_view what) {
  bool ok = s.size() <= target.size();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    const ir::DimExpr& want = target[target.size() - s.size() + i];
    ok = s[i] == want || s[i] == ir::DimExpr::constant(1);
  }
  if (!ok)
    return c.error(fmt::format("{} {} does not broadcast to {}", what, ir::shape_to_string(s),
                               ir::shape_to_string(target)));
  return Status::ok_status();
}

Result<ir::DimExpr> infer_head_size(const InferContext& c, const ir::DimExpr& hidden, int64_t heads,
                                    std::string_view what) {
  std::optional<ir::DimExpr> d = dim_div_exact(hidden, ir::DimExpr::constant(heads));
  if (!d)
    return c.error(fmt::format("{} hidden size {} is not a multiple of {} heads", what,
                               hidden.to_string(), heads));
  return *d;
}

Status infer_same_dim(const InferContext& c, const ir::DimExpr& a, const ir::DimExpr& b,
                      std::string_view what) {
  if (a == b) return Status::ok_status();
  return c.error(fmt::format("{}: {} vs {}", what, a.to_string(), b.to_string()));
}

Status infer_rank(const InferContext& c, size_t i, size_t rank, std::string_view what) {
  if (c.input(i).shape.size() == rank) return Status::ok_status();
  return c.error(fmt::format("{} '{}' is {}, expected rank {}", what, c.input(i).name,
                             ir::shape_to_string(c.input(i).shape), rank));
}

Status infer_float(const InferContext& c, size_t i, std::string_view what) {
  if (dtype_is_float(c.input(i).dtype)) return Status::ok_status();
  return c.error(fmt::format("{} '{}' is {}, expected a float tensor", what, c.input(i).name,
                             dtype_name(c.input(i).dtype)));
}

Result<int64_t> infer_heads_attr(const InferContext& c, const char* attr) {
  const int64_t h = c.node().attr_int(attr, 0);
  if (h <= 0)
    return c.error(fmt::format("attribute '{}' must be a positive head count, got {}", attr, h));
  return h;
}

}  // namespace kiln::compiler
