// Op family: shape — ops that read or make shapes and pass data through: Shape, Size, Range,
// ConstantOfShape, Identity, Dropout (inference: identity), Constant.
//
// This is where shape folding starts: Shape(x) of a value with dims [2, S, 64] has the symbolic
// contents [2, S, 64], and every later shape op keeps such contents (InferContext::set_output's
// `ints`) so that graph_infer can drop the whole subgraph. Range and ConstantOfShape accept
// lengths that depend on S and then stay nodes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

using ir::DimExpr;

int64_t ceil_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

// --- Shape / Size -----------------------------------------------------------------------------

// [start, end) of Shape's attributes for rank r: negative counts from the end, then clamped.
std::pair<int64_t, int64_t> shape_range(const ir::Node& n, int64_t r) {
  auto clamp = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", r));
  return {start, std::max(start, end)};
}

Status shape_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  const ir::Shape& s = c.input(0).shape;
  auto [start, end] = shape_range(c.node(), static_cast<int64_t>(s.size()));
  std::vector<DimExpr> ints(s.begin() + start, s.begin() + end);
  c.set_output(0, DType::kI64, {DimExpr::constant(end - start)}, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> shape_ref(const ir::Node& n,
                                         const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  const std::vector<int64_t>& d = in[0]->dims;
  auto [start, end] = shape_range(n, static_cast<int64_t>(d.size()));
  RefTensor out = ref_make(DType::kI64, {end - start});
  for (int64_t i = start; i < end; ++i)
    out.data[static_cast<size_t>(i - start)] = static_cast<double>(d[static_cast<size_t>(i)]);
  return std::vector<RefTensor>{std::move(out)};
}

Status size_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  std::optional<std::vector<DimExpr>> ints;
  if (auto n = ir::shape_numel(c.input(0).shape)) ints = std::vector<DimExpr>{*n};
  c.set_output(0, DType::kI64, {}, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> size_ref(const ir::Node&, const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  RefTensor out = ref_make(DType::kI64, {});
  out.data[0] = static_cast<double>(in[0]->numel());
  return std::vector<RefTensor>{std::move(out)};
}

// --- Range ------------------------------------------------------------------------------------

// max(ceil((limit - start) / delta), 0) for integer ranges whose start and limit may depend on
// S; the result must be linear in S for every S in [1, max_size].
Result<DimExpr> range_length(const DimExpr& start, const DimExpr& limit, int64_t delta,
                             int64_t max_size) {
  if (delta == 0) return invalid_argument("delta is 0");
  auto diff = delta > 0 ? dim_sub(limit, start) : dim_sub(start, limit);
  if (!diff || delta == std::numeric_limits<int64_t>::min())
    return invalid_argument("the range overflows int64");
  const int64_t k = delta > 0 ? delta : -delta;
  auto empty = dim_less_always(*diff, DimExpr::constant(0), max_size);
  if (!empty)
    return invalid_argument(fmt::format(
        "the length max(ceil(({}) / {}), 0) is not linear in S (it is 0 for some S only)",
        diff->to_string(), k));
  if (*empty) return DimExpr::constant(0);
  if (diff->coef % k != 0)
    return invalid_argument(
        fmt::format("the length ceil(({}) / {}) is not linear in S", diff->to_string(), k));
  return DimExpr{diff->coef / k, ceil_div(diff->offset, k)};
}

// Float ranges: all three scalars must be constants.
Result<int64_t> range_length_float(double start, double limit, double delta) {
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return invalid_argument(
        fmt::format("Range({}, {}, {}) has no finite length", start, limit, delta));
  const double n = std::ceil((limit - start) / delta);
  if (n > static_cast<double>(kRefMaxElements))
    return invalid_argument(fmt::format("Range({}, {}, {}) is too long", start, limit, delta));
  return n > 0 ? static_cast<int64_t>(n) : 0;
}

Status range_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 3, 1, 1));
  const DType dt = c.input(0).dtype;
  for (size_t i = 0; i < 3; ++i) {
    const ir::Value& v = c.input(i);
    if (v.dtype != dt)
      return c.error(
          fmt::format("input {} is {}, input 0 is {}", i, dtype_name(v.dtype), dtype_name(dt)));
    if (!v.shape.empty() && v.shape != ir::Shape{DimExpr::constant(1)})
      return c.error(fmt::format("input '{}' has shape {}; Range needs scalars", v.name,
                                 ir::shape_to_string(v.shape)));
  }
  if (!dtype_is_integer(dt) && !dtype_is_float(dt))
    return c.error(fmt::format("Range of {} is not supported", dtype_name(dt)));
  if (dtype_is_float(dt)) {
    auto s = c.input_constant(0), l = c.input_constant(1), d = c.input_constant(2);
    if (!s || !l || !d) return c.error("a float Range needs constant start, limit and delta");
    Result<int64_t> n = range_length_float(s->data[0], l->data[0], d->data[0]);
    if (!n.ok()) return c.error(n.status().message());
    c.set_output(0, dt, {DimExpr::constant(*n)});
    return Status::ok_status();
  }
  std::vector<DimExpr> v;
  for (size_t i = 0; i < 3; ++i) {
    auto x = c.input_ints(i);
    if (!x || x->size() != 1)
      return c.error(fmt::format(
          "{} '{}' is run-time data; kiln needs Range's start, limit and delta known at compile "
          "time (constants or functions of the size S)",
          i == 0   ? "start"
          : i == 1 ? "limit"
                   : "delta",
          c.input(i).name));
    v.push_back(x->front());
  }
  if (!v[2].is_constant()) return c.error("delta must be a constant");
  Result<DimExpr> n = range_length(v[0], v[1], v[2].offset, c.max_size());
  if (!n.ok()) return c.error(n.status().message());
  std::optional<std::vector<DimExpr>> ints;
  if (n->is_constant() && n->offset <= static_cast<int64_t>(kMaxSymbolicInts)) {
    ints.emplace();
    for (int64_t i = 0; i < n->offset; ++i)
      ints->push_back(DimExpr{v[0].coef, v[0].offset + i * v[2].offset});
  }
  c.set_output(0, dt, {*n}, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> range_ref(const ir::Node&, const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 3));
  for (size_t i = 0; i < 3; ++i)
    if (in[i]->data.size() != 1)
      return invalid_argument(fmt::format("input {} is not a scalar", i));
  const DType dt = in[0]->dtype;
  const double start = in[0]->data[0], delta = in[2]->data[0];
  int64_t n = 0;
  if (dtype_is_float(dt)) {
    KILN_ASSIGN_OR_RETURN(n, range_length_float(start, in[1]->data[0], delta));
  } else {
    KILN_ASSIGN_OR_RETURN(DimExpr len, range_length(DimExpr::constant(ref_to_int(start)),
                                                    DimExpr::constant(ref_to_int(in[1]->data[0])),
                                                    ref_to_int(delta), 1));
    n = len.offset;
  }
  if (n > kRefMaxElements) return invalid_argument(fmt::format("length {} is too long", n));
  RefTensor out = ref_make(dt, {n});
  for (int64_t i = 0; i < n; ++i)
    out.data[static_cast<size_t>(i)] = ref_round_to(dt, start + static_cast<double>(i) * delta);
  return std::vector<RefTensor>{std::move(out)};
}

// --- ConstantOfShape --------------------------------------------------------------------------

// The fill value and its dtype: the importer turns the `value` tensor attribute into
// attrs["value"] (one double) and attrs["value_dtype"] (a DType); absent means float 0.
Result<std::pair<DType, double>> fill_value(const ir::Node& n) {
  auto it = n.attrs.find("value");
  if (it == n.attrs.end()) return std::make_pair(DType::kF32, 0.0);
  const auto* v = std::get_if<std::vector<double>>(&it->second);
  if (!v || v->size() != 1)
    return invalid_argument("the attribute 'value' must be a one-element tensor");
  const int64_t raw = n.attr_int("value_dtype", static_cast<int64_t>(DType::kF32));
  if (raw < 0 || raw > 1000 || !dtype_valid(static_cast<int>(raw)))
    return invalid_argument(fmt::format("value_dtype {} is not a dtype", raw));
  return std::make_pair(static_cast<DType>(raw), v->front());
}

Status constant_of_shape_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  const ir::Value& s = c.input(0);
  if (s.dtype != DType::kI64 || s.shape.size() != 1)
    return c.error(fmt::format("the shape input '{}' must be a 1-D int64 tensor, got {} {}", s.name,
                               dtype_name(s.dtype), ir::shape_to_string(s.shape)));
  Result<std::pair<DType, double>> fill = fill_value(c.node());
  if (!fill.ok()) return c.error(fill.status().message());
  auto dims = c.input_ints(0);
  if (!dims)
    return c.error(fmt::format(
        "the shape '{}' is run-time data; kiln needs it known at compile time (constants or "
        "functions of the size S)",
        s.name));
  for (const DimExpr& d : *dims)
    if (d.is_constant() && d.offset < 0)
      return c.error(fmt::format("the shape has the negative dim {}", d.offset));
  const auto [dt, value] = *fill;
  std::optional<std::vector<DimExpr>> ints;
  const bool small = dims->empty() || (dims->size() == 1 && (*dims)[0].is_constant() &&
                                       (*dims)[0].offset <= static_cast<int64_t>(kMaxSymbolicInts));
  if (small && dtype_is_int_like(dt)) {
    const size_t len = dims->empty() ? 1 : static_cast<size_t>((*dims)[0].offset);
    ints.emplace(len, DimExpr::constant(static_cast<int64_t>(ref_round_to(dt, value))));
  }
  c.set_output(0, dt, *dims, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> constant_of_shape_ref(const ir::Node& n,
                                                     const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  KILN_ASSIGN_OR_RETURN(auto fill, fill_value(n));
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (double x : in[0]->data) {
    const int64_t d = ref_to_int(x);
    if (d < 0 || __builtin_mul_overflow(count, d, &count) || count > kRefMaxElements)
      return invalid_argument(
          fmt::format("the shape [{}] is negative or too large", fmt::join(in[0]->data, ", ")));
    dims.push_back(d);
  }
  RefTensor out = ref_make(fill.first, dims);
  std::fill(out.data.begin(), out.data.end(), ref_round_to(fill.first, fill.second));
  return std::vector<RefTensor>{std::move(out)};
}

// --- Identity / Dropout / Constant ------------------------------------------------------------

Status identity_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  const ir::Value& x = c.input(0);
  std::optional<std::vector<DimExpr>> ints;
  if (x.shape.size() <= 1 && dtype_is_int_like(x.dtype)) ints = c.input_ints(0);
  c.set_output(0, x.dtype, x.shape, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> identity_ref(const ir::Node&,
                                            const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  return std::vector<RefTensor>{*in[0]};
}

// Dropout at inference is the identity (mask all true). Training mode draws random numbers,
// which kiln does not model, unless the ratio is 0.
Status dropout_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 3, 1, 2));
  const ir::Value& x = c.input(0);
  if (c.has_input(2)) {
    auto train = c.input_ints(2);
    if (!train || train->size() != 1 || !train->front().is_constant())
      return c.unsupported("training_mode is run-time data; kiln runs Dropout in inference mode");
    if (train->front().offset != 0) {
      auto ratio = c.input_constant(1);
      if (!c.has_input(1) || !ratio || ratio->data.size() != 1 || ratio->data[0] != 0.0)
        return c.unsupported(
            "training-mode Dropout with a nonzero ratio is random; kiln "
            "supports inference only");
    }
  }
  c.set_output(0, x.dtype, x.shape);
  if (c.num_outputs() > 1) c.set_output(1, DType::kBool, x.shape);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> dropout_ref(const ir::Node& n,
                                           const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  const RefTensor* train = ref_opt(in, 2);
  const RefTensor* ratio = ref_opt(in, 1);
  if (train && !train->data.empty() && train->data[0] != 0.0 &&
      (!ratio || ratio->data.empty() || ratio->data[0] != 0.0))
    return unimplemented("training-mode Dropout with a nonzero ratio is random");
  std::vector<RefTensor> out{*in[0]};
  if (n.outputs.size() > 1) {
    out.push_back(ref_make(DType::kBool, in[0]->dims));
    std::fill(out.back().data.begin(), out.back().data.end(), 1.0);
  }
  return out;
}

Status constant_infer(InferContext& c) {
  return c.error("Constant nodes are imported as constant values, not run as ops");
}

Result<std::vector<RefTensor>> constant_ref(const ir::Node&, const std::vector<const RefTensor*>&) {
  return internal_error("Constant nodes are imported as constant values, not run as ops");
}

}  // namespace

void ops_register_shape(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Shape", shape_infer, shape_ref});
  defs.push_back({kDomainOnnx, "Size", size_infer, size_ref});
  defs.push_back({kDomainOnnx, "Range", range_infer, range_ref});
  defs.push_back({kDomainOnnx, "ConstantOfShape", constant_of_shape_infer, constant_of_shape_ref});
  defs.push_back({kDomainOnnx, "Identity", identity_infer, identity_ref});
  defs.push_back({kDomainOnnx, "Dropout", dropout_infer, dropout_ref});
  defs.push_back({kDomainOnnx, "Constant", constant_infer, constant_ref});
}

}  // namespace kiln::compiler
