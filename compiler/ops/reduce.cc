// Op family: reductions. Softmax and LogSoftmax over one axis (opset-13 semantics), ReduceSum /
// ReduceMean / ReduceMax over a set of axes (attribute in older opsets, constant input in newer
// ones), and CumSum along one axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

Status check_dtype(const InferContext& c, size_t i, bool ints_ok) {
  const ir::Value& v = c.input(i);
  if (dtype_is_float(v.dtype) || (ints_ok && dtype_is_integer(v.dtype))) return Status::ok_status();
  return c.error(fmt::format("input '{}' is {}; expected {}", v.name, dtype_name(v.dtype),
                             ints_ok ? "a float or integer dtype" : "a float dtype"));
}

Status check_data(const std::vector<const RefTensor*>& in, size_t min_in, size_t max_in) {
  if (in.size() < min_in || in.size() > max_in)
    return invalid_argument(fmt::format("{} inputs, expected {} to {}", in.size(), min_in, max_in));
  KILN_RETURN_IF_ERROR(ref_check_data(in));
  if (!in[0]) return invalid_argument("input 0 is missing");
  return Status::ok_status();
}

// The tensor seen as [outer, len, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView axis_view(const std::vector<int64_t>& dims, size_t axis) {
  AxisView v;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i < axis) v.outer *= dims[i];
    if (i > axis) v.inner *= dims[i];
  }
  v.len = dims[axis];
  return v;
}

// --- Softmax, LogSoftmax -----------------------------------------------------------------------

Status infer_softmax(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  KILN_RETURN_IF_ERROR(check_dtype(c, 0, false));
  const ir::Value& x = c.input(0);
  KILN_RETURN_IF_ERROR(infer_axis(c, c.node().attr_int("axis", -1), x.shape).status());
  c.set_output(0, x.dtype, x.shape);
  return Status::ok_status();
}

// Max-subtracted, so large logits do not overflow.
Result<std::vector<RefTensor>> ref_softmax(const ir::Node& n,
                                           const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(check_data(in, 1, 1));
  const RefTensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(const int64_t axis, ref_axis(n.attr_int("axis", -1), x.dims));
  const bool log = n.op == "LogSoftmax";
  const AxisView v = axis_view(x.dims, static_cast<size_t>(axis));
  RefTensor out = x;
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t in_i = 0; in_i < v.inner; ++in_i) {
      const int64_t base = o * v.len * v.inner + in_i;
      auto at = [&](int64_t i) { return static_cast<size_t>(base + i * v.inner); };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < v.len; ++i) mx = std::max(mx, x.data[at(i)]);
      double sum = 0.0;
      for (int64_t i = 0; i < v.len; ++i) sum += std::exp(x.data[at(i)] - mx);
      for (int64_t i = 0; i < v.len; ++i) {
        const double shifted = x.data[at(i)] - mx;
        out.data[at(i)] = log ? shifted - std::log(sum) : std::exp(shifted) / sum;
      }
    }
  return std::vector<RefTensor>{std::move(out)};
}

// --- ReduceSum, ReduceMean, ReduceMax ----------------------------------------------------------

// Which axes of a rank-`rank` input are reduced: the `axes` attribute (older opsets), else the
// axes input (`input_axes`, null when omitted); no axes reduce everything unless
// noop_with_empty_axes.
Result<std::vector<bool>> reduce_mask(const ir::Node& n, int64_t rank,
                                      const std::vector<int64_t>* input_axes) {
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (!n.has_attr("axes") && input_axes) axes = *input_axes;
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0) != 0) mask.assign(mask.size(), false);
  for (int64_t a : axes) {
    std::optional<int64_t> k = axis_normalize(a, rank);
    if (!k) return invalid_argument(fmt::format("axis {} is out of range for rank {}", a, rank));
    if (mask[static_cast<size_t>(*k)])
      return invalid_argument(
          fmt::format("axis {} is listed twice in axes [{}]", a, fmt::join(axes, ", ")));
    mask[static_cast<size_t>(*k)] = true;
  }
  return mask;
}

Status infer_reduce(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_dtype(c, 0, true));
  const ir::Node& n = c.node();
  const ir::Value& x = c.input(0);
  std::vector<int64_t> input_axes;
  const bool from_input = !n.has_attr("axes") && c.has_input(1);
  if (from_input) {
    const ir::Value& a = c.input(1);
    if (a.dtype != DType::kI64 || a.shape.size() != 1)
      return c.error(fmt::format("axes '{}' is {} {}; expected a 1-D i64 tensor", a.name,
                                 dtype_name(a.dtype), ir::shape_to_string(a.shape)));
    std::optional<std::vector<ir::DimExpr>> ints = c.input_ints(1);
    if (!ints)
      return c.unsupported(fmt::format(
          "axes '{}' is computed at run time; kiln needs constant axes (they decide the "
          "output shape)",
          a.name));
    for (const ir::DimExpr& d : *ints) {
      if (!d.is_constant())
        return c.unsupported(fmt::format("axes '{}' depends on the size S", a.name));
      input_axes.push_back(d.offset);
    }
  }
  Result<std::vector<bool>> mask =
      reduce_mask(n, static_cast<int64_t>(x.shape.size()), from_input ? &input_axes : nullptr);
  if (!mask.ok()) return c.error(mask.status().message());
  const bool keep = n.attr_int("keepdims", 1) != 0;
  ir::Shape out;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!(*mask)[i])
      out.push_back(x.shape[i]);
    else if (keep)
      out.push_back(ir::DimExpr::constant(1));
  }
  c.set_output(0, x.dtype, std::move(out));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_reduce(const ir::Node& n,
                                          const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(check_data(in, 1, 2));
  const RefTensor& x = *in[0];
  std::vector<int64_t> input_axes;
  const bool from_input = in.size() > 1 && in[1];
  if (from_input)
    for (double v : in[1]->data) input_axes.push_back(ref_to_int(v));
  KILN_ASSIGN_OR_RETURN(std::vector<bool> mask, reduce_mask(n, static_cast<int64_t>(x.dims.size()),
                                                            from_input ? &input_axes : nullptr));
  // Output element of each input element: strides of the kept dims, 0 on reduced axes.
  std::vector<int64_t> kept_dims = x.dims, out_dims;
  for (size_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) kept_dims[i] = 1;
    if (!mask[i] || n.attr_int("keepdims", 1) != 0) out_dims.push_back(kept_dims[i]);
  }
  const std::vector<int64_t> index = ref_broadcast_index(x.dims, kept_dims);
  const bool is_max = n.op == "ReduceMax";
  RefTensor out = ref_make(x.dtype, out_dims);
  std::vector<int64_t> count(out.data.size(), 0);
  if (is_max) out.data.assign(out.data.size(), -std::numeric_limits<double>::infinity());
  for (size_t k = 0; k < x.data.size(); ++k) {
    double& acc = out.data[static_cast<size_t>(index[k])];
    const double v = x.data[k];
    if (is_max)
      acc = std::isnan(v) || std::isnan(acc) ? std::numeric_limits<double>::quiet_NaN()
                                             : std::max(acc, v);
    else
      acc += v;
    ++count[static_cast<size_t>(index[k])];
  }
  if (n.op == "ReduceMean")
    for (size_t k = 0; k < out.data.size(); ++k) {
      out.data[k] /= static_cast<double>(count[k]);  // 0/0 = NaN for an empty reduction
      if (dtype_is_integer(x.dtype)) out.data[k] = ref_round_to(x.dtype, out.data[k]);
    }
  return std::vector<RefTensor>{std::move(out)};
}

// --- CumSum ------------------------------------------------------------------------------------

Status infer_cumsum(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_dtype(c, 0, true));
  const ir::Value& x = c.input(0);
  const ir::Value& a = c.input(1);
  const bool scalar_like =
      a.shape.empty() || (a.shape.size() == 1 && a.shape[0] == ir::DimExpr::constant(1));
  if ((a.dtype != DType::kI64 && a.dtype != DType::kI32) || !scalar_like)
    return c.error(fmt::format("axis '{}' is {} {}; expected an i32 or i64 scalar", a.name,
                               dtype_name(a.dtype), ir::shape_to_string(a.shape)));
  if (std::optional<std::vector<ir::DimExpr>> ints = c.input_ints(1);
      ints && (*ints)[0].is_constant()) {
    KILN_RETURN_IF_ERROR(infer_axis(c, (*ints)[0].offset, x.shape).status());
  }
  c.set_output(0, x.dtype, x.shape);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_cumsum(const ir::Node& n,
                                          const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(check_data(in, 2, 2));
  if (!in[1] || in[1]->data.size() != 1) return invalid_argument("axis must hold one value");
  const RefTensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(const int64_t axis, ref_axis(ref_to_int(in[1]->data[0]), x.dims));
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  const AxisView v = axis_view(x.dims, static_cast<size_t>(axis));
  RefTensor out = x;
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t in_i = 0; in_i < v.inner; ++in_i) {
      double sum = 0.0;
      for (int64_t step = 0; step < v.len; ++step) {
        const int64_t i = reverse ? v.len - 1 - step : step;
        const auto at = static_cast<size_t>((o * v.len + i) * v.inner + in_i);
        if (exclusive) out.data[at] = sum;
        sum += x.data[at];
        if (!exclusive) out.data[at] = sum;
      }
    }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_reduce(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Softmax", infer_softmax, ref_softmax});
  defs.push_back({kDomainOnnx, "LogSoftmax", infer_softmax, ref_softmax});
  defs.push_back({kDomainOnnx, "ReduceSum", infer_reduce, ref_reduce});
  defs.push_back({kDomainOnnx, "ReduceMean", infer_reduce, ref_reduce});
  defs.push_back({kDomainOnnx, "ReduceMax", infer_reduce, ref_reduce});
  defs.push_back({kDomainOnnx, "CumSum", infer_cumsum, ref_cumsum});
}

}  // namespace kiln::compiler
