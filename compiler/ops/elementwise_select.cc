// Op family elementwise, second file: Where, Cast and Clip (the ops with a condition, a target
// dtype or optional bounds), and the helpers both files share (elementwise_util.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/ops/elementwise_util.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

// --- shared with elementwise.cc (elementwise_util.h) ------------------------------------------

bool dtype_in(DType d, unsigned kinds) {
  return ((kinds & kFloating) && dtype_is_float(d)) ||
         ((kinds & kIntegral) && dtype_is_integer(d)) || ((kinds & kBoolean) && d == DType::kBool);
}

std::string kinds_name(unsigned kinds) {
  std::vector<std::string> parts;
  if (kinds & kFloating) parts.push_back("f32, f16, bf16, f64");
  if (kinds & kIntegral) parts.push_back("i64, i32, i8, u8");
  if (kinds & kBoolean) parts.push_back("bool");
  return fmt::format("one of {}", fmt::join(parts, ", "));
}

Status check_same_dtypes(const InferContext& c, size_t count, unsigned kinds) {
  for (size_t i = 0; i < count; ++i) {
    if (!c.has_input(i)) return c.error(fmt::format("input {} is missing", i));
    const ir::Value& v = c.input(i);
    if (!dtype_in(v.dtype, kinds))
      return c.error(fmt::format("input '{}' is {}; expected {}", v.name, dtype_name(v.dtype),
                                 kinds_name(kinds)));
    if (v.dtype != c.input(0).dtype)
      return c.error(fmt::format("inputs '{}' ({}) and '{}' ({}) differ in dtype", c.input(0).name,
                                 dtype_name(c.input(0).dtype), v.name, dtype_name(v.dtype)));
  }
  return Status::ok_status();
}

int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrapping_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

double int_wrap(DType dt, int64_t v) {
  switch (dt) {
    case DType::kI32:
      return static_cast<int32_t>(v);
    case DType::kI8:
      return static_cast<int8_t>(v);
    case DType::kU8:
      return static_cast<uint8_t>(v);
    case DType::kBool:
      return v != 0 ? 1.0 : 0.0;
    default:
      return static_cast<double>(v);
  }
}

Result<ir::Shape> broadcast_inputs(const InferContext& c, size_t first) {
  ir::Shape out;
  for (size_t i = first; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    KILN_ASSIGN_OR_RETURN(out, shape_broadcast(c, out, c.input(i).shape));
  }
  return out;
}

Result<Broadcast> ref_broadcast(const std::vector<const RefTensor*>& in) {
  Broadcast b;
  for (size_t i = 0; i < in.size(); ++i) {
    const RefTensor* t = in[i];
    if (!t) return invalid_argument(fmt::format("input {} is missing", i));
    if (static_cast<int64_t>(t->data.size()) != t->numel())
      return invalid_argument(fmt::format("input {} holds {} values for dims {}", i, t->data.size(),
                                          dims_to_string(t->dims)));
    KILN_ASSIGN_OR_RETURN(b.dims, ref_broadcast_dims(b.dims, t->dims));
  }
  for (const RefTensor* t : in) b.index.push_back(ref_broadcast_index(b.dims, t->dims));
  return b;
}

namespace {

// --- Where -------------------------------------------------------------------------------------

Status infer_where(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 3, 1, 1));
  if (c.input(0).dtype != DType::kBool)
    return c.error(fmt::format("condition '{}' is {}; expected bool", c.input(0).name,
                               dtype_name(c.input(0).dtype)));
  if (c.input(1).dtype != c.input(2).dtype)
    return c.error(fmt::format("X '{}' ({}) and Y '{}' ({}) differ in dtype", c.input(1).name,
                               dtype_name(c.input(1).dtype), c.input(2).name,
                               dtype_name(c.input(2).dtype)));
  KILN_ASSIGN_OR_RETURN(ir::Shape shape, broadcast_inputs(c, 0));
  const DType dt = c.input(1).dtype;
  std::optional<std::vector<ir::DimExpr>> ints;
  if (!dtype_is_float(dt))  // e.g. Where(Equal(shape, -1), 1, shape) for a Reshape target
    ints = fold_ints(c, shape, [](const std::vector<ir::DimExpr>& a) -> std::optional<ir::DimExpr> {
      if (!a[0].is_constant()) return std::nullopt;
      return a[0].offset != 0 ? a[1] : a[2];
    });
  c.set_output(0, dt, std::move(shape), std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_where(const ir::Node&, const std::vector<const RefTensor*>& in) {
  if (in.size() != 3) return invalid_argument(fmt::format("{} inputs, expected 3", in.size()));
  KILN_ASSIGN_OR_RETURN(Broadcast b, ref_broadcast(in));
  RefTensor out = ref_make(in[1]->dtype, b.dims);
  for (size_t k = 0; k < out.data.size(); ++k)
    out.data[k] =
        in[0]->data[b.index[0][k]] != 0.0 ? in[1]->data[b.index[1][k]] : in[2]->data[b.index[2][k]];
  return std::vector<RefTensor>{std::move(out)};
}

// --- Cast --------------------------------------------------------------------------------------

// ONNX TensorProto.DataType → kiln dtype, for the types kiln has.
std::optional<DType> cast_target(int64_t to) {
  switch (to) {
    case 1:
      return DType::kF32;
    case 10:
      return DType::kF16;
    case 16:
      return DType::kBF16;
    case 11:
      return DType::kF64;
    case 7:
      return DType::kI64;
    case 6:
      return DType::kI32;
    case 3:
      return DType::kI8;
    case 2:
      return DType::kU8;
    case 9:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

// Integers truncate toward zero and wrap to the width; bool is x != 0; floats keep the value
// (f32 rounds like float so that Cast(double → float) is exact; f16/bf16 keep float64 precision
// as everywhere in the reference).
double cast_value(DType to, double x) {
  if (to == DType::kBool) return x != 0.0 ? 1.0 : 0.0;
  if (dtype_is_integer(to)) return int_wrap(to, ref_to_int(x));
  return to == DType::kF32 ? ref_round_to(DType::kF32, x) : x;
}

std::optional<ir::DimExpr> cast_dim(const InferContext& c, DType to, const ir::DimExpr& a) {
  if (to == DType::kBool) {
    std::optional<bool> zero = dim_equal_always(a, ir::DimExpr::constant(0), c.max_size());
    if (!zero) return std::nullopt;
    return ir::DimExpr::constant(*zero ? 0 : 1);
  }
  if (a.is_constant()) return ir::DimExpr::constant(static_cast<int64_t>(int_wrap(to, a.offset)));
  return a;  // a dim expression: it fits any integer type a model casts shapes to
}

Status infer_cast(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  if (!c.node().has_attr("to")) return c.error("attribute 'to' is missing");
  const int64_t to_attr = c.node().attr_int("to", 0);
  std::optional<DType> to = cast_target(to_attr);
  if (!to)
    return c.unsupported(fmt::format(
        "cast to ONNX type {} is not supported (kiln casts to 1 float, 10 float16, 16 bfloat16, "
        "11 double, 7 int64, 6 int32, 3 int8, 2 uint8, 9 bool)",
        to_attr));
  std::optional<std::vector<ir::DimExpr>> ints;
  if (!dtype_is_float(*to) && !dtype_is_float(c.input(0).dtype))
    ints = fold_ints(c, c.input(0).shape,
                     [&](const std::vector<ir::DimExpr>& a) { return cast_dim(c, *to, a[0]); });
  c.set_output(0, *to, c.input(0).shape, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_cast(const ir::Node& n,
                                        const std::vector<const RefTensor*>& in) {
  if (in.size() != 1 || !in[0]) return invalid_argument("Cast takes one input");
  std::optional<DType> to = cast_target(n.attr_int("to", 0));
  if (!to) return invalid_argument(fmt::format("cannot cast to ONNX type {}", n.attr_int("to", 0)));
  RefTensor out = *in[0];
  out.dtype = *to;
  for (double& v : out.data) v = cast_value(*to, v);
  return std::vector<RefTensor>{std::move(out)};
}

// --- Clip --------------------------------------------------------------------------------------

Status infer_clip(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 3, 1, 1));
  const ir::Value& x = c.input(0);
  if (!dtype_in(x.dtype, kNumeric))
    return c.error(fmt::format("input '{}' is {}; expected {}", x.name, dtype_name(x.dtype),
                               kinds_name(kNumeric)));
  for (size_t i = 1; i < 3; ++i) {
    if (!c.has_input(i)) continue;
    const ir::Value& b = c.input(i);
    if (b.dtype != x.dtype)
      return c.error(fmt::format("{} '{}' is {}; expected {} like the input",
                                 i == 1 ? "min" : "max", b.name, dtype_name(b.dtype),
                                 dtype_name(x.dtype)));
    for (const ir::DimExpr& d : b.shape)
      if (d != ir::DimExpr::constant(1))
        return c.error(fmt::format("{} '{}' has shape {}; expected a scalar",
                                   i == 1 ? "min" : "max", b.name, ir::shape_to_string(b.shape)));
  }
  c.set_output(0, x.dtype, x.shape);
  return Status::ok_status();
}

// Bound i (1 = min, 2 = max): the input, else the attribute of opset < 11, else none.
Result<double> clip_bound(const ir::Node& n, const std::vector<const RefTensor*>& in, size_t i) {
  const double none = (i == 1 ? -1 : 1) * std::numeric_limits<double>::infinity();
  if (i < in.size() && in[i]) {
    if (in[i]->data.size() != 1)
      return invalid_argument(fmt::format("{} holds {} values; expected 1", i == 1 ? "min" : "max",
                                          in[i]->data.size()));
    return in[i]->data[0];
  }
  return n.attr_float(i == 1 ? "min" : "max", none);
}

Result<std::vector<RefTensor>> ref_clip(const ir::Node& n,
                                        const std::vector<const RefTensor*>& in) {
  if (in.empty() || in.size() > 3 || !in[0]) return invalid_argument("Clip takes 1 to 3 inputs");
  KILN_ASSIGN_OR_RETURN(double lo, clip_bound(n, in, 1));
  KILN_ASSIGN_OR_RETURN(double hi, clip_bound(n, in, 2));
  RefTensor out = *in[0];
  // min(max(x, lo), hi): when lo > hi every element becomes hi, as the spec says; NaN stays.
  for (double& v : out.data)
    if (!std::isnan(v)) v = std::min(std::max(v, lo), hi);
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_elementwise_select(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Where", infer_where, ref_where});
  defs.push_back({kDomainOnnx, "Cast", infer_cast, ref_cast});
  defs.push_back({kDomainOnnx, "Clip", infer_clip, ref_clip});
}

}  // namespace kiln::compiler
