// Op family: contrib, part 2 — onnxruntime's norm and GELU ops: SkipLayerNormalization,
// SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization (registered in both the ONNX
// domain, where onnxruntime puts it, and com.microsoft), FastGelu and BiasGelu.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/attention_ref.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// onnxruntime's default epsilon for the Skip*LayerNormalization ops.
constexpr double kSkipEpsilon = 1e-12;

// A [hidden] vector input matching x's last dim.
Status check_vector(const InferContext& c, size_t i, const ir::DimExpr& hidden,
                    std::string_view what) {
  if (!c.has_input(i)) return Status::ok_status();
  KILN_RETURN_IF_ERROR(check_dtype_as(c, i, 0, what));
  if (c.input(i).shape == ir::Shape{hidden}) return Status::ok_status();
  return c.error(fmt::format("{} '{}' is {}, expected [{}]", what, c.input(i).name,
                             ir::shape_to_string(c.input(i).shape), hidden.to_string()));
}

// x + broadcast(y), y broadcasting to x's dims (numpy rules).
Result<RefTensor> ref_add_to(const RefTensor& x, const RefTensor& y, std::string_view what) {
  bool ok = y.dims.size() <= x.dims.size();
  for (size_t i = 0; ok && i < y.dims.size(); ++i) {
    const int64_t want = x.dims[x.dims.size() - y.dims.size() + i];
    ok = y.dims[i] == want || y.dims[i] == 1;
  }
  if (!ok)
    return invalid_argument(fmt::format("{} {} does not broadcast to {}", what,
                                        dims_to_string(y.dims), dims_to_string(x.dims)));
  const std::vector<int64_t> idx = ref_broadcast_index(x.dims, y.dims);
  RefTensor out = x;
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] += y.data[idx[i]];
  return out;
}

// Normalises each run of `inner` elements; `simplified`: RMS (no mean subtraction).
// Returns {y, mean, inv_std} with mean/inv_std holding one value per run.
struct NormOut {
  RefTensor y, mean, inv_std;
};
Result<NormOut> ref_norm(const RefTensor& x, int64_t axis, bool simplified, double eps,
                         const RefTensor& scale, const RefTensor* beta) {
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(axis); i < x.dims.size(); ++i) inner *= x.dims[i];
  if (inner <= 0) inner = 1;
  if (scale.numel() != inner || (beta && beta->numel() != inner))
    return invalid_argument(fmt::format("scale {} / bias must have {} elements (X {}, axis {})",
                                        dims_to_string(scale.dims), inner, dims_to_string(x.dims),
                                        axis));
  std::vector<int64_t> stat_dims = x.dims;
  for (size_t i = static_cast<size_t>(axis); i < stat_dims.size(); ++i) stat_dims[i] = 1;
  NormOut out{ref_make(x.dtype, x.dims), ref_make(DType::kF32, stat_dims),
              ref_make(DType::kF32, stat_dims)};
  const int64_t runs = x.numel() / inner;
  for (int64_t r = 0; r < runs; ++r) {
    const double* xr = &x.data[r * inner];
    double mean = 0, sq = 0;
    for (int64_t i = 0; i < inner; ++i) mean += xr[i];
    mean /= static_cast<double>(inner);
    const double center = simplified ? 0.0 : mean;
    for (int64_t i = 0; i < inner; ++i) sq += (xr[i] - center) * (xr[i] - center);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      out.y.data[r * inner + i] =
          (xr[i] - center) * inv * scale.data[i] + (beta ? beta->data[i] : 0.0);
    out.mean.data[r] = mean;
    out.inv_std.data[r] = inv;
  }
  return out;
}

// --- SkipLayerNormalization / SkipSimplifiedLayerNormalization -----------------------------------
// Skip: input, skip, gamma, beta, bias.  SkipSimplified: input, skip, gamma, bias.
// Outputs: output, mean, inv_std_var ([..., 1], float32), input_skip_bias_sum.

template <bool kSimplified>
Status infer_skip_norm(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, kSimplified ? 4 : 5, 1, 4));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "input"));
  KILN_RETURN_IF_ERROR(check_dtype_as(c, 1, 0, "skip"));
  const ir::Shape& x = c.input(0).shape;
  if (x.size() < 2)
    return c.error(
        fmt::format("input is {}, expected [batch, sequence, hidden] or "
                    "[tokens, hidden]",
                    ir::shape_to_string(x)));
  KILN_RETURN_IF_ERROR(infer_check_broadcast(c, c.input(1).shape, x, "skip"));
  const ir::DimExpr hidden = x.back();
  KILN_RETURN_IF_ERROR(check_vector(c, 2, hidden, "gamma"));
  KILN_RETURN_IF_ERROR(check_vector(c, 3, hidden, kSimplified ? "bias" : "beta"));
  if (!kSimplified) KILN_RETURN_IF_ERROR(check_vector(c, 4, hidden, "bias"));
  ir::Shape stat = x;
  stat.back() = ir::DimExpr::constant(1);
  c.set_output(0, c.input(0).dtype, x);
  if (c.num_outputs() > 1) c.set_output(1, DType::kF32, stat);
  if (c.num_outputs() > 2) c.set_output(2, DType::kF32, stat);
  if (c.num_outputs() > 3) c.set_output(3, c.input(0).dtype, x);
  return Status::ok_status();
}

template <bool kSimplified>
Result<std::vector<RefTensor>> ref_skip_norm(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  auto arg = [&](size_t i) { return i < in.size() ? in[i] : nullptr; };
  if (!arg(0) || !arg(1) || !arg(2)) return invalid_argument("needs input, skip and gamma");
  if (in[0]->dims.empty()) return invalid_argument("input must have a hidden axis");
  KILN_ASSIGN_OR_RETURN(RefTensor sum, ref_add_to(*in[0], *in[1], "skip"));
  const RefTensor* bias = arg(kSimplified ? 3 : 4);
  const RefTensor* beta = kSimplified ? nullptr : arg(3);
  if (bias) {
    KILN_ASSIGN_OR_RETURN(sum, ref_add_bias(sum, *bias, 0, "bias"));
  }
  const auto axis = static_cast<int64_t>(sum.dims.size()) - 1;
  KILN_ASSIGN_OR_RETURN(NormOut r, ref_norm(sum, axis, kSimplified,
                                            n.attr_float("epsilon", kSkipEpsilon), *in[2], beta));
  std::vector<RefTensor> out;
  out.push_back(std::move(r.y));
  out.push_back(std::move(r.mean));
  out.push_back(std::move(r.inv_std));
  out.push_back(std::move(sum));
  return out;
}

// --- SimplifiedLayerNormalization: X, scale; outputs Y, inv_std_var ------------------------------

Status infer_simplified_norm(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 2));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "X"));
  KILN_RETURN_IF_ERROR(check_dtype_as(c, 1, 0, "scale"));
  const ir::Shape& x = c.input(0).shape;
  std::optional<int64_t> axis =
      axis_normalize(c.node().attr_int("axis", -1), static_cast<int64_t>(x.size()));
  if (!axis)
    return c.error(fmt::format("axis {} is out of range for X {}", c.node().attr_int("axis", -1),
                               ir::shape_to_string(x)));
  const ir::Shape tail(x.begin() + *axis, x.end());
  std::optional<ir::DimExpr> inner = ir::shape_numel(tail);
  std::optional<ir::DimExpr> scale_n = ir::shape_numel(c.input(1).shape);
  if (!inner || !scale_n || *inner != *scale_n)
    return c.error(fmt::format("scale {} must have as many elements as X{} = {}",
                               ir::shape_to_string(c.input(1).shape), ir::shape_to_string(x),
                               ir::shape_to_string(tail)));
  ir::Shape stat = x;
  for (size_t i = static_cast<size_t>(*axis); i < stat.size(); ++i)
    stat[i] = ir::DimExpr::constant(1);
  c.set_output(0, c.input(0).dtype, x);
  if (c.num_outputs() > 1) c.set_output(1, DType::kF32, stat);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_simplified_norm(const ir::Node& n,
                                                   const std::vector<const RefTensor*>& in) {
  if (in.size() < 2 || !in[0] || !in[1]) return invalid_argument("needs X and scale");
  std::optional<int64_t> axis =
      axis_normalize(n.attr_int("axis", -1), static_cast<int64_t>(in[0]->dims.size()));
  if (!axis)
    return invalid_argument(fmt::format("axis out of range for X {}", dims_to_string(in[0]->dims)));
  KILN_ASSIGN_OR_RETURN(
      NormOut r, ref_norm(*in[0], *axis, true, n.attr_float("epsilon", 1e-5), *in[1], nullptr));
  std::vector<RefTensor> out;
  out.push_back(std::move(r.y));
  out.push_back(std::move(r.inv_std));
  return out;
}

// --- FastGelu (X, bias: tanh approximation) and BiasGelu (A, B: exact erf) -----------------------

Status infer_bias_gelu(InferContext& c, size_t min_in) {
  KILN_RETURN_IF_ERROR(c.require(min_in, 2, 1, 1));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "X"));
  if (c.has_input(1)) {
    KILN_RETURN_IF_ERROR(check_dtype_as(c, 1, 0, "bias"));
    KILN_RETURN_IF_ERROR(infer_check_broadcast(c, c.input(1).shape, c.input(0).shape, "bias"));
  }
  c.set_output(0, c.input(0).dtype, c.input(0).shape);
  return Status::ok_status();
}
Status infer_fast_gelu(InferContext& c) { return infer_bias_gelu(c, 1); }
Status infer_bias_gelu_2(InferContext& c) { return infer_bias_gelu(c, 2); }

template <bool kTanh>
Result<std::vector<RefTensor>> ref_gelu(const ir::Node&, const std::vector<const RefTensor*>& in) {
  if (in.empty() || !in[0]) return invalid_argument("needs an input");
  RefTensor x = *in[0];
  if (in.size() > 1 && in[1]) {
    KILN_ASSIGN_OR_RETURN(x, ref_add_to(x, *in[1], "bias"));
  }
  const double k = std::sqrt(2.0 / std::numbers::pi);
  for (double& v : x.data)
    v = kTanh ? 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)))
              : 0.5 * v * (1.0 + std::erf(v / std::numbers::sqrt2));
  return std::vector<RefTensor>{std::move(x)};
}

}  // namespace

void ops_register_contrib_norm(std::vector<OpDef>& defs) {
  defs.push_back(
      {kDomainMs, "SkipLayerNormalization", infer_skip_norm<false>, ref_skip_norm<false>});
  defs.push_back(
      {kDomainMs, "SkipSimplifiedLayerNormalization", infer_skip_norm<true>, ref_skip_norm<true>});
  defs.push_back(
      {kDomainOnnx, "SimplifiedLayerNormalization", infer_simplified_norm, ref_simplified_norm});
  defs.push_back(
      {kDomainMs, "SimplifiedLayerNormalization", infer_simplified_norm, ref_simplified_norm});
  defs.push_back({kDomainMs, "FastGelu", infer_fast_gelu, ref_gelu<true>});
  defs.push_back({kDomainMs, "BiasGelu", infer_bias_gelu_2, ref_gelu<false>});
}

}  // namespace kiln::compiler
