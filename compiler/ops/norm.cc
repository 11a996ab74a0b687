// Op family: normalizations over the trailing axes [axis, rank). LayerNormalization (opset 17:
// Y and the optional Mean / InvStdDev statistics) and RMSNormalization (opset 23). The reference
// computes in float64 whatever stash_type asks for.
#include <fmt/format.h>

#include <cmath>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// Scale and B broadcast one way to the normalized shape X[axis:] (numpy rules, right-aligned).
bool broadcasts_to(const ir::Shape& s, const ir::Shape& target) {
  if (s.size() > target.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const ir::DimExpr& t = target[target.size() - s.size() + i];
    if (s[i] != t && s[i] != ir::DimExpr::constant(1)) return false;
  }
  return true;
}

bool broadcasts_to(const std::vector<int64_t>& s, const std::vector<int64_t>& target) {
  if (s.size() > target.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != target[target.size() - s.size() + i]) return false;
  return true;
}

// Checks X (float), the axis, and inputs [1, num_inputs) as scale/bias; returns the axis.
Result<size_t> infer_norm_common(InferContext& c) {
  const ir::Value& x = c.input(0);
  if (!dtype_is_float(x.dtype))
    return c.error(
        fmt::format("input '{}' is {}; expected a float dtype", x.name, dtype_name(x.dtype)));
  KILN_ASSIGN_OR_RETURN(const int64_t axis, infer_axis(c, c.node().attr_int("axis", -1), x.shape));
  const ir::Shape normalized(x.shape.begin() + axis, x.shape.end());
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const ir::Value& p = c.input(i);
    if (p.dtype != x.dtype)
      return c.error(fmt::format("'{}' is {}; expected {} like the input", p.name,
                                 dtype_name(p.dtype), dtype_name(x.dtype)));
    if (!broadcasts_to(p.shape, normalized))
      return c.error(fmt::format("'{}' {} does not broadcast to the normalized shape {}", p.name,
                                 ir::shape_to_string(p.shape), ir::shape_to_string(normalized)));
  }
  return static_cast<size_t>(axis);
}

// The statistics' dtype, from stash_type (ONNX TensorProto.DataType).
std::optional<DType> stash_dtype(int64_t stash_type) {
  if (stash_type == 1) return DType::kF32;
  if (stash_type == 11) return DType::kF64;
  if (stash_type == 16) return DType::kBF16;
  return std::nullopt;
}

Status infer_layer_norm(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 3, 1, 3));
  KILN_ASSIGN_OR_RETURN(size_t axis, infer_norm_common(c));
  const ir::Value& x = c.input(0);
  const int64_t stash = c.node().attr_int("stash_type", 1);
  std::optional<DType> u = stash_dtype(stash);
  if (!u) return c.error(fmt::format("stash_type {} is not 1 (float), 11 or 16", stash));
  ir::Shape stat = x.shape;  // the normalized axes kept as 1
  for (size_t i = axis; i < stat.size(); ++i) stat[i] = ir::DimExpr::constant(1);
  c.set_output(0, x.dtype, x.shape);
  for (size_t k = 1; k < c.num_outputs(); ++k) c.set_output(k, *u, stat);
  return Status::ok_status();
}

Status infer_rms_norm(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  if (Result<size_t> axis = infer_norm_common(c); !axis.ok()) return axis.status();
  c.set_output(0, c.input(0).dtype, c.input(0).shape);
  return Status::ok_status();
}

// Checks the data and returns [rows, width] for normalizing over [axis, rank) plus, per
// parameter input, the index of its element for each position of a row.
struct NormView {
  int64_t rows = 1, width = 1;
  std::vector<int64_t> row_dims;                  // X[:axis]
  std::vector<std::vector<int64_t>> param_index;  // per input from 1 (empty when omitted)
};

Result<NormView> norm_view(const ir::Node& n, const std::vector<const RefTensor*>& in) {
  if (in.empty() || !in[0]) return invalid_argument("input X is missing");
  KILN_RETURN_IF_ERROR(ref_check_data(in));
  const RefTensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(const int64_t axis, ref_axis(n.attr_int("axis", -1), x.dims));
  NormView v;
  const std::vector<int64_t> normalized(x.dims.begin() + axis, x.dims.end());
  v.row_dims.assign(x.dims.begin(), x.dims.begin() + axis);
  for (int64_t d : v.row_dims) v.rows *= d;
  for (int64_t d : normalized) v.width *= d;
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i]) {
      v.param_index.emplace_back();
      continue;
    }
    if (!broadcasts_to(in[i]->dims, normalized))
      return invalid_argument(
          fmt::format("input {} {} does not broadcast to the normalized shape {}", i,
                      dims_to_string(in[i]->dims), dims_to_string(normalized)));
    v.param_index.push_back(ref_broadcast_index(normalized, in[i]->dims));
  }
  return v;
}

Result<std::vector<RefTensor>> ref_layer_norm(const ir::Node& n,
                                              const std::vector<const RefTensor*>& in) {
  if (in.size() < 2 || in.size() > 3 || !in[1])
    return invalid_argument("expected X, Scale and optional B");
  KILN_ASSIGN_OR_RETURN(NormView v, norm_view(n, in));
  const RefTensor& x = *in[0];
  const double eps = n.attr_float("epsilon", 1e-5);
  const DType u = stash_dtype(n.attr_int("stash_type", 1)).value_or(DType::kF32);
  std::vector<int64_t> stat_dims = v.row_dims;
  stat_dims.resize(x.dims.size(), 1);
  RefTensor y = ref_make(x.dtype, x.dims), mean = ref_make(u, stat_dims),
            inv = ref_make(u, stat_dims);
  const RefTensor* bias = in.size() > 2 ? in[2] : nullptr;
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = x.data.data() + r * v.width;
    double m = 0.0, var = 0.0;
    for (int64_t j = 0; j < v.width; ++j) m += row[j];
    m /= static_cast<double>(v.width);
    for (int64_t j = 0; j < v.width; ++j) var += (row[j] - m) * (row[j] - m);
    const double is = 1.0 / std::sqrt(var / static_cast<double>(v.width) + eps);
    mean.data[static_cast<size_t>(r)] = m;
    inv.data[static_cast<size_t>(r)] = is;
    for (int64_t j = 0; j < v.width; ++j) {
      double out = (row[j] - m) * is * in[1]->data[static_cast<size_t>(v.param_index[0][j])];
      if (bias) out += bias->data[static_cast<size_t>(v.param_index[1][j])];
      y.data[static_cast<size_t>(r * v.width + j)] = out;
    }
  }
  return std::vector<RefTensor>{std::move(y), std::move(mean), std::move(inv)};
}

Result<std::vector<RefTensor>> ref_rms_norm(const ir::Node& n,
                                            const std::vector<const RefTensor*>& in) {
  if (in.size() != 2 || !in[1]) return invalid_argument("expected X and scale");
  KILN_ASSIGN_OR_RETURN(NormView v, norm_view(n, in));
  const RefTensor& x = *in[0];
  const double eps = n.attr_float("epsilon", 1e-5);
  RefTensor y = ref_make(x.dtype, x.dims);
  for (int64_t r = 0; r < v.rows; ++r) {
    const double* row = x.data.data() + r * v.width;
    double sq = 0.0;
    for (int64_t j = 0; j < v.width; ++j) sq += row[j] * row[j];
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(v.width) + eps);
    for (int64_t j = 0; j < v.width; ++j)
      y.data[static_cast<size_t>(r * v.width + j)] =
          row[j] * inv * in[1]->data[static_cast<size_t>(v.param_index[0][j])];
  }
  return std::vector<RefTensor>{std::move(y)};
}

}  // namespace

void ops_register_norm(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "LayerNormalization", infer_layer_norm, ref_layer_norm});
  defs.push_back({kDomainOnnx, "RMSNormalization", infer_rms_norm, ref_rms_norm});
}

}  // namespace kiln::compiler
