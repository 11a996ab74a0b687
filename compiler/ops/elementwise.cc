// Op family: elementwise math, comparisons and logic with numpy broadcasting (Add ... Min), one
// table-driven infer and one reference kernel. Where, Cast and Clip live in
// elementwise_select.cc.
//
// Integer results that describe shapes (rank 0/1, contents known at compile time) get symbolic
// contents, so exporters' shape arithmetic such as Mul(Gather(Shape(x), 0), 4) or
// Equal(shape, -1) folds into constants of S.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "compiler/ops/elementwise_util.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// clang-format off
enum class Code {
  kAdd, kSub, kMul, kDiv, kPow,                             // arithmetic
  kEqual, kLess, kLessEq, kGreater, kGreaterEq,             // comparisons (bool out)
  kAnd, kOr, kXor,                                          // logic on bool
  kMax, kMin,                                               // variadic
  kSqrt, kReciprocal, kNeg, kAbs, kExp, kLog, kTanh, kErf,  // unary
  kSigmoid, kRelu, kLeakyRelu, kGelu, kSin, kCos, kNot, kIsNaN, kIsInf,
};
// clang-format on

constexpr size_t kVariadic = std::numeric_limits<size_t>::max();

struct ElemOp {
  std::string_view op;
  Code code;
  size_t min_in, max_in;
  unsigned kinds;  // accepted input dtypes (elementwise_util.h)
  bool bool_out;   // comparisons and tests produce bool
};

constexpr ElemOp kOps[] = {
    {"Add", Code::kAdd, 2, 2, kNumeric, false},
    {"Sub", Code::kSub, 2, 2, kNumeric, false},
    {"Mul", Code::kMul, 2, 2, kNumeric, false},
    {"Div", Code::kDiv, 2, 2, kNumeric, false},
    {"Pow", Code::kPow, 2, 2, kNumeric, false},
    {"Equal", Code::kEqual, 2, 2, kNumeric | kBoolean, true},
    {"Less", Code::kLess, 2, 2, kNumeric, true},
    {"LessOrEqual", Code::kLessEq, 2, 2, kNumeric, true},
    {"Greater", Code::kGreater, 2, 2, kNumeric, true},
    {"GreaterOrEqual", Code::kGreaterEq, 2, 2, kNumeric, true},
    {"And", Code::kAnd, 2, 2, kBoolean, false},
    {"Or", Code::kOr, 2, 2, kBoolean, false},
    {"Xor", Code::kXor, 2, 2, kBoolean, false},
    {"Max", Code::kMax, 1, kVariadic, kNumeric, false},
    {"Min", Code::kMin, 1, kVariadic, kNumeric, false},
    {"Sqrt", Code::kSqrt, 1, 1, kFloating, false},
    {"Reciprocal", Code::kReciprocal, 1, 1, kFloating, false},
    {"Neg", Code::kNeg, 1, 1, kNumeric, false},
    {"Abs", Code::kAbs, 1, 1, kNumeric, false},
    {"Exp", Code::kExp, 1, 1, kFloating, false},
    {"Log", Code::kLog, 1, 1, kFloating, false},
    {"Tanh", Code::kTanh, 1, 1, kFloating, false},
    {"Erf", Code::kErf, 1, 1, kFloating, false},
    {"Sigmoid", Code::kSigmoid, 1, 1, kFloating, false},
    {"Relu", Code::kRelu, 1, 1, kNumeric, false},  // opset 14 added signed integers
    {"LeakyRelu", Code::kLeakyRelu, 1, 1, kFloating, false},
    {"Gelu", Code::kGelu, 1, 1, kFloating, false},
    {"Sin", Code::kSin, 1, 1, kFloating, false},
    {"Cos", Code::kCos, 1, 1, kFloating, false},
    {"Not", Code::kNot, 1, 1, kBoolean, false},
    {"IsNaN", Code::kIsNaN, 1, 1, kFloating, true},
    {"IsInf", Code::kIsInf, 1, 1, kFloating, true},
};

const ElemOp* find_op(std::string_view op) {
  for (const ElemOp& e : kOps)
    if (e.op == op) return &e;
  return nullptr;
}

// Attributes a few unary ops read, parsed once per node.
struct Params {
  bool gelu_tanh = false;
  bool inf_pos = true, inf_neg = true;
  double alpha = 0.01;  // LeakyRelu
};

Params params_of(const ir::Node& n) {
  Params p;
  p.gelu_tanh = n.attr_string("approximate", "none") == "tanh";
  p.inf_pos = n.attr_int("detect_positive", 1) != 0;
  p.inf_neg = n.attr_int("detect_negative", 1) != 0;
  p.alpha = n.attr_float("alpha", 0.01);
  return p;
}

double sigmoid(double v) {
  if (v >= 0.0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);  // no overflow for very negative v
  return e / (1.0 + e);
}

double gelu(double x, bool approx_tanh) {
  if (!approx_tanh) return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double unary_apply(Code k, DType dt, double x, const Params& p) {
  const bool is_int = dtype_is_integer(dt);
  switch (k) {
    case Code::kNeg:
      return is_int ? int_wrap(dt, wrapping_sub(0, ref_to_int(x))) : -x;
    case Code::kAbs:
      return is_int ? int_wrap(dt, x < 0 ? wrapping_sub(0, ref_to_int(x)) : ref_to_int(x))
                    : std::abs(x);
    case Code::kRelu:
      return x < 0.0 ? 0.0 : x;  // NaN passes through
    case Code::kLeakyRelu:
      return x < 0.0 ? p.alpha * x : x;
    case Code::kSqrt:
      return std::sqrt(x);
    case Code::kReciprocal:
      return 1.0 / x;
    case Code::kExp:
      return std::exp(x);
    case Code::kLog:
      return std::log(x);
    case Code::kTanh:
      return std::tanh(x);
    case Code::kErf:
      return std::erf(x);
    case Code::kSigmoid:
      return sigmoid(x);
    case Code::kGelu:
      return gelu(x, p.gelu_tanh);
    case Code::kSin:
      return std::sin(x);
    case Code::kCos:
      return std::cos(x);
    case Code::kNot:
      return x == 0.0 ? 1.0 : 0.0;
    case Code::kIsNaN:
      return std::isnan(x) ? 1.0 : 0.0;
    case Code::kIsInf:
      return std::isinf(x) && ((x > 0 && p.inf_pos) || (x < 0 && p.inf_neg)) ? 1.0 : 0.0;
    default:
      return x;
  }
}

// Integer Div truncates toward zero (as onnxruntime does); the caller rejects b == 0.
int64_t int_div(int64_t a, int64_t b) {
  if (b == -1) return wrapping_sub(0, a);  // INT64_MIN / -1 would trap
  return a / b;
}

double int_binary(Code k, DType dt, int64_t a, int64_t b) {
  switch (k) {
    case Code::kAdd:
      return int_wrap(dt, wrapping_add(a, b));
    case Code::kSub:
      return int_wrap(dt, wrapping_sub(a, b));
    case Code::kMul:
      return int_wrap(dt, wrapping_mul(a, b));
    case Code::kDiv:
      return b == 0 ? 0.0 : int_wrap(dt, int_div(a, b));
    case Code::kMax:
      return static_cast<double>(std::max(a, b));
    case Code::kMin:
      return static_cast<double>(std::min(a, b));
    default:
      return 0.0;
  }
}

// One element of a binary op; `dt` is the dtype of the first operand.
double binary_apply(Code k, DType dt, double a, double b) {
  switch (k) {
    case Code::kAdd:
    case Code::kSub:
    case Code::kMul:
    case Code::kDiv:
    case Code::kMax:
    case Code::kMin:
      if (dtype_is_integer(dt)) return int_binary(k, dt, ref_to_int(a), ref_to_int(b));
      break;
    default:
      break;
  }
  switch (k) {
    case Code::kAdd:
      return a + b;
    case Code::kSub:
      return a - b;
    case Code::kMul:
      return a * b;
    case Code::kDiv:
      return a / b;
    case Code::kPow: {
      const double r = std::pow(a, b);
      return dtype_is_integer(dt) ? int_wrap(dt, ref_to_int(r)) : r;
    }
    case Code::kEqual:
      return a == b ? 1.0 : 0.0;
    case Code::kLess:
      return a < b ? 1.0 : 0.0;
    case Code::kLessEq:
      return a <= b ? 1.0 : 0.0;
    case Code::kGreater:
      return a > b ? 1.0 : 0.0;
    case Code::kGreaterEq:
      return a >= b ? 1.0 : 0.0;
    case Code::kAnd:
      return (a != 0.0) && (b != 0.0) ? 1.0 : 0.0;
    case Code::kOr:
      return (a != 0.0) || (b != 0.0) ? 1.0 : 0.0;
    case Code::kXor:
      return (a != 0.0) != (b != 0.0) ? 1.0 : 0.0;
    case Code::kMax:  // NaN propagates, as in numpy.maximum
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                            : std::max(a, b);
    case Code::kMin:
      return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                            : std::min(a, b);
    default:
      return 0.0;
  }
}

// --- symbolic contents -------------------------------------------------------------------------

std::optional<bool> dim_less(const InferContext& c, const ir::DimExpr& a, const ir::DimExpr& b) {
  return dim_less_always(a, b, c.max_size());
}

ir::DimExpr bool_dim(bool v) { return ir::DimExpr::constant(v ? 1 : 0); }

std::optional<ir::DimExpr> fold_mul(const ir::DimExpr& a, const ir::DimExpr& b) {
  if (a.is_constant() && b.is_constant()) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a.offset, b.offset, &r)) return std::nullopt;
    return ir::DimExpr::constant(r);
  }
  return ir::dim_mul(a, b);
}

std::optional<ir::DimExpr> fold_div(const ir::DimExpr& a, const ir::DimExpr& b) {
  if (a.is_constant() && b.is_constant()) {
    if (b.offset == 0) return std::nullopt;
    return ir::DimExpr::constant(int_div(a.offset, b.offset));
  }
  return dim_div_exact(a, b);
}

// max(a, b) when the order of a and b is the same for every S.
std::optional<ir::DimExpr> fold_max(const InferContext& c, const ir::DimExpr& a,
                                    const ir::DimExpr& b, bool want_max) {
  if (a == b) return a;
  std::optional<bool> lt = dim_less(c, a, b);
  if (!lt) return std::nullopt;
  return *lt == want_max ? b : a;
}

std::optional<ir::DimExpr> fold_compare(const InferContext& c, Code k, const ir::DimExpr& a,
                                        const ir::DimExpr& b) {
  std::optional<bool> r;
  if (k == Code::kEqual) r = dim_equal_always(a, b, c.max_size());
  if (k == Code::kLess) r = dim_less(c, a, b);
  if (k == Code::kGreater) r = dim_less(c, b, a);
  if (k == Code::kLessEq || k == Code::kGreaterEq) {
    r = k == Code::kLessEq ? dim_less(c, b, a) : dim_less(c, a, b);
    if (r) r = !*r;
  }
  if (!r) return std::nullopt;
  return bool_dim(*r);
}

std::optional<ir::DimExpr> fold_logic(Code k, const ir::DimExpr& a, const ir::DimExpr& b) {
  if (!a.is_constant() || !b.is_constant()) return std::nullopt;
  return ir::DimExpr::constant(static_cast<int64_t>(
      binary_apply(k, DType::kBool, static_cast<double>(a.offset), static_cast<double>(b.offset))));
}

std::optional<ir::DimExpr> fold_abs(const InferContext& c, const ir::DimExpr& a) {
  std::optional<bool> neg = dim_less(c, a, ir::DimExpr::constant(0));
  if (!neg) return std::nullopt;
  return *neg ? dim_sub(ir::DimExpr::constant(0), a) : a;
}

// One element of the symbolic result of `k` over `args` (one per input).
std::optional<ir::DimExpr> fold_element(const InferContext& c, Code k,
                                        const std::vector<ir::DimExpr>& args) {
  const ir::DimExpr& a = args[0];
  switch (k) {
    case Code::kAdd:
      return dim_add(a, args[1]);
    case Code::kSub:
      return dim_sub(a, args[1]);
    case Code::kMul:
      return fold_mul(a, args[1]);
    case Code::kDiv:
      return fold_div(a, args[1]);
    case Code::kNeg:
      return dim_sub(ir::DimExpr::constant(0), a);
    case Code::kAbs:
      return fold_abs(c, a);
    case Code::kNot:
      if (!a.is_constant()) return std::nullopt;
      return bool_dim(a.offset == 0);
    case Code::kMax:
    case Code::kMin: {
      std::optional<ir::DimExpr> acc = a;
      for (size_t i = 1; acc && i < args.size(); ++i)
        acc = fold_max(c, *acc, args[i], k == Code::kMax);
      return acc;
    }
    case Code::kEqual:
    case Code::kLess:
    case Code::kLessEq:
    case Code::kGreater:
    case Code::kGreaterEq:
      return fold_compare(c, k, a, args[1]);
    case Code::kAnd:
    case Code::kOr:
    case Code::kXor:
      return fold_logic(k, a, args[1]);
    default:
      return std::nullopt;
  }
}

// --- infer and reference -----------------------------------------------------------------------

Status infer_elementwise(InferContext& c) {
  const ir::Node& n = c.node();
  const ElemOp* e = find_op(n.op);
  if (!e) return c.unsupported("not an elementwise op");
  KILN_RETURN_IF_ERROR(c.require(e->min_in, e->max_in, 1, 1));
  // Pow's exponent may have its own numeric dtype; every other input matches input 0.
  const size_t same = e->code == Code::kPow ? 1 : c.num_inputs();
  KILN_RETURN_IF_ERROR(check_same_dtypes(c, same, e->kinds));
  if (e->code == Code::kPow && !dtype_in(c.input(1).dtype, kNumeric))
    return c.error(fmt::format("exponent '{}' is {}; expected {}", c.input(1).name,
                               dtype_name(c.input(1).dtype), kinds_name(kNumeric)));
  if (e->code == Code::kGelu) {
    const std::string approx = n.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh")
      return c.error(fmt::format("approximate is '{}'; expected 'none' or 'tanh'", approx));
  }
  KILN_ASSIGN_OR_RETURN(ir::Shape shape, broadcast_inputs(c, 0));
  const DType out = e->bool_out ? DType::kBool : c.input(0).dtype;
  std::optional<std::vector<ir::DimExpr>> ints;
  if (!dtype_is_float(out))
    ints = fold_ints(c, shape, [&](const std::vector<ir::DimExpr>& args) {
      return fold_element(c, e->code, args);
    });
  c.set_output(0, out, std::move(shape), std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_elementwise(const ir::Node& n,
                                               const std::vector<const RefTensor*>& in) {
  const ElemOp* e = find_op(n.op);
  if (!e) return unimplemented(fmt::format("{} is not an elementwise op", n.op));
  if (in.size() < e->min_in || in.size() > e->max_in)
    return invalid_argument(fmt::format(
        "{} takes {} inputs, not {}", n.op,
        e->min_in == e->max_in ? fmt::format("{}", e->min_in) : fmt::format("{}+", e->min_in),
        in.size()));
  KILN_ASSIGN_OR_RETURN(Broadcast b, ref_broadcast(in));
  const DType dt = in[0]->dtype;
  RefTensor out = ref_make(e->bool_out ? DType::kBool : dt, b.dims);
  const auto count = static_cast<size_t>(out.numel());
  if (in.size() == 1) {
    const Params p = params_of(n);
    for (size_t k = 0; k < count; ++k)
      out.data[k] = unary_apply(e->code, dt, in[0]->data[b.index[0][k]], p);
    return std::vector<RefTensor>{std::move(out)};
  }
  if (e->code == Code::kDiv && dtype_is_integer(dt))
    for (double v : in[1]->data)
      if (v == 0.0) return invalid_argument("integer division by zero");
  for (size_t k = 0; k < count; ++k) {
    double acc = in[0]->data[b.index[0][k]];
    for (size_t i = 1; i < in.size(); ++i)
      acc = binary_apply(e->code, dt, acc, in[i]->data[b.index[i][k]]);
    out.data[k] = acc;
  }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_elementwise(std::vector<OpDef>& defs) {
  for (const ElemOp& e : kOps)
    defs.push_back({kDomainOnnx, e.op, infer_elementwise, ref_elementwise});
  ops_register_elementwise_select(defs);
}

}  // namespace kiln::compiler
