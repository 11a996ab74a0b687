#include "compiler/ops/op_util.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::compiler {

std::optional<ir::DimExpr> dim_add(const ir::DimExpr& a, const ir::DimExpr& b) {
  ir::DimExpr r;
  if (__builtin_add_overflow(a.coef, b.coef, &r.coef) ||
      __builtin_add_overflow(a.offset, b.offset, &r.offset))
    return std::nullopt;
  return r;
}

std::optional<ir::DimExpr> dim_sub(const ir::DimExpr& a, const ir::DimExpr& b) {
  ir::DimExpr r;
  if (__builtin_sub_overflow(a.coef, b.coef, &r.coef) ||
      __builtin_sub_overflow(a.offset, b.offset, &r.offset))
    return std::nullopt;
  return r;
}

std::optional<ir::DimExpr> dim_div_exact(const ir::DimExpr& a, const ir::DimExpr& b) {
  if (!b.is_constant() || b.offset == 0) return std::nullopt;
  if (a.coef % b.offset != 0 || a.offset % b.offset != 0) return std::nullopt;
  return ir::DimExpr{a.coef / b.offset, a.offset / b.offset};
}

namespace {

// The range of d = c·S + o over S in [1, max_size], as [lo, hi]; nullopt on overflow.
std::optional<std::pair<int64_t, int64_t>> dim_range(const ir::DimExpr& d, int64_t max_size) {
  int64_t at1 = 0, atmax = 0;
  if (__builtin_add_overflow(d.coef, d.offset, &at1)) return std::nullopt;
  if (__builtin_mul_overflow(d.coef, max_size, &atmax) ||
      __builtin_add_overflow(atmax, d.offset, &atmax))
    return std::nullopt;
  return std::make_pair(std::min(at1, atmax), std::max(at1, atmax));
}

}  // namespace

std::optional<bool> dim_equal_always(const ir::DimExpr& a, const ir::DimExpr& b, int64_t max_size) {
  if (a == b) return true;
  auto diff = dim_sub(a, b);
  if (!diff) return std::nullopt;
  auto r = dim_range(*diff, max_size);
  if (!r) return std::nullopt;
  if (r->first > 0 || r->second < 0) return false;  // the difference never reaches 0
  if (diff->coef != 0 && (-diff->offset) % diff->coef != 0) return false;  // no integer root
  return std::nullopt;
}

std::optional<bool> dim_less_always(const ir::DimExpr& a, const ir::DimExpr& b, int64_t max_size) {
  auto diff = dim_sub(b, a);  // a < b  <=>  b - a > 0
  if (!diff) return std::nullopt;
  auto r = dim_range(*diff, max_size);
  if (!r) return std::nullopt;
  if (r->first > 0) return true;
  if (r->second <= 0) return false;
  return std::nullopt;
}

Result<ir::Shape> shape_broadcast(const InferContext& c, const ir::Shape& a, const ir::Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  ir::Shape out(r);
  const ir::DimExpr one = ir::DimExpr::constant(1);
  for (size_t i = 0; i < r; ++i) {
    const ir::DimExpr da = i < r - a.size() ? one : a[i - (r - a.size())];
    const ir::DimExpr db = i < r - b.size() ? one : b[i - (r - b.size())];
    if (da == db || db == one) {
      out[i] = da;
    } else if (da == one) {
      out[i] = db;
    } else {
      return c.error(fmt::format("shapes {} and {} do not broadcast (axis {}: {} vs {})",
                                 ir::shape_to_string(a), ir::shape_to_string(b), i, da.to_string(),
                                 db.to_string()));
    }
  }
  return out;
}

std::optional<int64_t> axis_normalize(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

Status check_dtype_as(const InferContext& c, size_t i, size_t like, std::string_view what) {
  if (c.input(i).dtype == c.input(like).dtype) return Status::ok_status();
  return c.error(fmt::format("{} '{}' is {}, expected {}", what, c.input(i).name,
                             dtype_name(c.input(i).dtype), dtype_name(c.input(like).dtype)));
}

Result<int64_t> infer_axis(const InferContext& c, int64_t axis, const ir::Shape& shape) {
  std::optional<int64_t> a = axis_normalize(axis, static_cast<int64_t>(shape.size()));
  if (!a)
    return c.error(
        fmt::format("axis {} is out of range for input {}", axis, ir::shape_to_string(shape)));
  return *a;
}

Result<int64_t> ref_axis(int64_t axis, const std::vector<int64_t>& dims) {
  std::optional<int64_t> a = axis_normalize(axis, static_cast<int64_t>(dims.size()));
  if (!a)
    return invalid_argument(fmt::format("axis {} out of range for {}", axis, dims_to_string(dims)));
  return *a;
}

std::vector<int64_t> transpose_perm_attr(const ir::Node& n, size_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm"))
    for (size_t i = rank; i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  return perm;
}

RefTensor ref_make(DType dtype, std::vector<int64_t> dims) {
  RefTensor t;
  t.dtype = dtype;
  t.dims = std::move(dims);
  t.data.assign(static_cast<size_t>(t.numel()), 0.0);
  return t;
}

std::vector<int64_t> ref_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

Result<std::vector<int64_t>> ref_broadcast_dims(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b,
                                                std::string_view what) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return invalid_argument(
          fmt::format("{} {} and {} do not broadcast", what, dims_to_string(a), dims_to_string(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> ref_broadcast_index(const std::vector<int64_t>& out,
                                         const std::vector<int64_t>& in) {
  const size_t r = out.size();
  // Strides of `in` aligned to the right of `out`, 0 on broadcast axes.
  std::vector<int64_t> in_full(r, 1);
  for (size_t i = 0; i < in.size(); ++i) in_full[r - in.size() + i] = in[i];
  std::vector<int64_t> st = ref_strides(in_full);
  for (size_t i = 0; i < r; ++i)
    if (in_full[i] == 1) st[i] = 0;
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::vector<int64_t> pos(r, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    idx[static_cast<size_t>(k)] = off;
    for (size_t a = r; a-- > 0;) {  // odometer increment
      if (++pos[a] < out[a]) {
        off += st[a];
        break;
      }
      off -= st[a] * (out[a] - 1);
      pos[a] = 0;
    }
  }
  return idx;
}

int64_t ref_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

double ref_round_to(DType dtype, double v) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<double>(static_cast<float>(v));
    case DType::kI64:
    case DType::kI32:
    case DType::kI8:
    case DType::kU8:
      return std::isfinite(v) ? std::trunc(v) : 0.0;
    case DType::kBool:
      return v != 0.0 ? 1.0 : 0.0;
    default:
      return v;  // f64; f16/bf16 keep float64 precision in the reference
  }
}

Status ref_check_inputs(const std::vector<const RefTensor*>& in, size_t required) {
  if (in.size() < required)
    return invalid_argument(
        fmt::format("got {} inputs, expected at least {}", in.size(), required));
  for (size_t i = 0; i < required; ++i)
    if (!in[i]) return invalid_argument(fmt::format("required input {} is missing", i));
  return Status::ok_status();
}

Status ref_check_data(const std::vector<const RefTensor*>& in) {
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] && static_cast<int64_t>(in[i]->data.size()) != in[i]->numel())
      return invalid_argument(fmt::format("input {} holds {} values for dims {}", i,
                                          in[i]->data.size(), dims_to_string(in[i]->dims)));
  return Status::ok_status();
}

const RefTensor* ref_opt(const std::vector<const RefTensor*>& in, size_t i) {
  return i < in.size() ? in[i] : nullptr;
}

std::vector<int64_t> ref_to_ints(const RefTensor& t) {
  std::vector<int64_t> v;
  v.reserve(t.data.size());
  for (double x : t.data) v.push_back(ref_to_int(x));
  return v;
}

bool dtype_is_int_like(DType d) { return dtype_is_integer(d) || d == DType::kBool; }

bool onnx_elementwise_op(std::string_view op) {
  static constexpr std::string_view kOps =
      " Abs Add And Cast Ceil Cos Div Equal Erf Exp Floor Greater GreaterOrEqual Identity IsInf "
      "IsNaN Less LessOrEqual Log Max Min Mod Mul Neg Not Or Pow Reciprocal Relu Sigmoid Sign Sin "
      "Sqrt Sub Tanh Where Xor ";
  return !op.empty() && kOps.find(" " + std::string(op) + " ") != std::string_view::npos;
}

bool dtype_is_float(DType d) {
  return d == DType::kF16 || d == DType::kBF16 || d == DType::kF32 || d == DType::kF64;
}

bool dtype_is_integer(DType d) {
  return d == DType::kI8 || d == DType::kU8 || d == DType::kI32 || d == DType::kI64;
}

}  // namespace kiln::compiler
