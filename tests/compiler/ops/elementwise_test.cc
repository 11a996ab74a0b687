// The elementwise family (compiler/ops/elementwise.cc, elementwise_select.cc): values on small
// hand-checked cases, dtype and broadcast errors, symbolic folding of shape arithmetic, and
// ONNX's own node tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compiler/ir/graph_infer.h"
#include "compiler/ir/op_registry.h"
#include "tests/support/ir_harness.h"
#include "tests/support/onnx_node_test.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using kiln::testing::C;
using kiln::testing::expect_import_error;
using kiln::testing::import_text;
using kiln::testing::import_text_ok;
using kiln::testing::import_unfolded;
using kiln::testing::kOpset17Head;
using kiln::testing::ref_error;
using kiln::testing::S;
using kiln::testing::T;
using kiln::testing::tensors_close;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Runs a graph in ONNX text at size s (not folded); every output by name.
std::map<std::string, RefTensor> run(const std::string& text, int64_t s,
                                     const std::map<std::string, RefTensor>& in,
                                     const std::string& size_dim = "N") {
  return kiln::testing::run(import_unfolded(text, size_dim), s, in);
}

// ---- arithmetic -------------------------------------------------------------------------------

TEST(Elementwise, ArithmeticBroadcastsOverS) {
  const std::string text = kOpset17Head + R"(
    g (float[N, 1] a, float[3] b) => (float[N, 3] add, float[N, 3] sub, float[N, 3] mul,
                                      float[N, 3] div, float[N, 3] pow) {
      add = Add(a, b)
      sub = Sub(a, b)
      mul = Mul(a, b)
      div = Div(a, b)
      pow = Pow(a, b)
    })";
  auto out = run(text, 2, {{"a", T({2, 1}, {1, 2})}, {"b", T({3}, {10, 20, 0.5})}});
  EXPECT_TRUE(tensors_close(out["add"], T({2, 3}, {11, 21, 1.5, 12, 22, 2.5}), 0, 0, "add"));
  EXPECT_TRUE(tensors_close(out["sub"], T({2, 3}, {-9, -19, 0.5, -8, -18, 1.5}), 0, 0, "sub"));
  EXPECT_TRUE(tensors_close(out["mul"], T({2, 3}, {10, 20, 0.5, 20, 40, 1}), 0, 0, "mul"));
  EXPECT_TRUE(tensors_close(out["div"], T({2, 3}, {0.1, 0.05, 2, 0.2, 0.1, 4}), 1e-15, 0, "div"));
  EXPECT_TRUE(tensors_close(out["pow"], T({2, 3}, {1, 1, 1, 1024, 1048576, std::sqrt(2.0)}), 1e-15,
                            0, "pow"));
  EXPECT_EQ(out["add"].dtype, DType::kF32);
}

TEST(Elementwise, IntegerArithmeticIsExact) {
  const std::string text = kOpset17Head + R"(
    g (int64[4] a, int64[4] b, int8[2] c, uint8[2] d) =>
      (int64[4] div, int64[4] mul, int64[4] neg, int64[4] abs, int8[2] wrap, uint8[2] under,
       int64[4] pw) {
      div = Div(a, b)
      mul = Mul(a, b)
      neg = Neg(a)
      abs = Abs(a)
      wrap = Add(c, c)
      dd = Mul(d, d)
      under = Sub(d, dd)
      pw = Pow(b, b)
    })";
  auto out = run(text, 1,
                 {{"a", T({4}, {-7, 7, -7, 9}, DType::kI64)},
                  {"b", T({4}, {2, -2, -2, 3}, DType::kI64)},
                  {"c", T({2}, {100, -100}, DType::kI8)},
                  {"d", T({2}, {3, 2}, DType::kU8)}},
                 "");
  // Integer Div truncates toward zero, as onnxruntime does.
  EXPECT_TRUE(tensors_close(out["div"], T({4}, {-3, -3, 3, 3}, DType::kI64), 0, 0, "div"));
  EXPECT_TRUE(tensors_close(out["mul"], T({4}, {-14, -14, 14, 27}, DType::kI64), 0, 0, "mul"));
  EXPECT_TRUE(tensors_close(out["neg"], T({4}, {7, -7, 7, -9}, DType::kI64), 0, 0, "neg"));
  EXPECT_TRUE(tensors_close(out["abs"], T({4}, {7, 7, 7, 9}, DType::kI64), 0, 0, "abs"));
  EXPECT_TRUE(tensors_close(out["wrap"], T({2}, {-56, 56}, DType::kI8), 0, 0, "int8 wraps"));
  EXPECT_TRUE(tensors_close(out["under"], T({2}, {250, 254}, DType::kU8), 0, 0, "uint8 wraps"));
  // 2^2, (-2)^-2 = 0.25 → 0, 27.
  EXPECT_TRUE(tensors_close(out["pw"], T({4}, {4, 0, 0, 27}, DType::kI64), 0, 0, "pow"));
  EXPECT_EQ(out["div"].dtype, DType::kI64);
}

TEST(Elementwise, IntegerDivisionByZeroIsAnError) {
  ImportOptions opts{"", {}};
  ir::Graph g = import_text_ok(kOpset17Head + R"(
    g (int32[2] a, int32[2] b) => (int32[2] y) { y = Div(a, b) })",
                               opts);
  auto r =
      reference_run(g, 1, {{"a", T({2}, {1, 2}, DType::kI32)}, {"b", T({2}, {1, 0}, DType::kI32)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("division by zero"), std::string::npos)
      << r.status().message();
}

// ---- unary math -------------------------------------------------------------------------------

TEST(Elementwise, UnaryMath) {
  const std::string text = kOpset17Head + R"(
    g (float[N] x) => (float[N] sqrt, float[N] rec, float[N] exp, float[N] log, float[N] tanh,
                       float[N] erf, float[N] sig, float[N] relu, float[N] sin, float[N] cos,
                       float[N] neg, float[N] abs) {
      sqrt = Sqrt(x)
      rec = Reciprocal(x)
      exp = Exp(x)
      log = Log(x)
      tanh = Tanh(x)
      erf = Erf(x)
      sig = Sigmoid(x)
      relu = Relu(x)
      sin = Sin(x)
      cos = Cos(x)
      neg = Neg(x)
      abs = Abs(x)
    })";
  auto out = run(text, 3, {{"x", T({3}, {0.25, 1, -0.5})}});
  auto close = [&](const char* name, std::vector<double> want) {
    EXPECT_TRUE(tensors_close(out[name], T({3}, std::move(want)), 1e-15, 1e-16, name));
  };
  close("sqrt", {0.5, 1, kNaN});
  close("rec", {4, 1, -2});
  close("exp", {std::exp(0.25), std::exp(1.0), std::exp(-0.5)});
  close("log", {std::log(0.25), 0, kNaN});
  close("tanh", {std::tanh(0.25), std::tanh(1.0), -0.46211715726000974});
  close("erf", {std::erf(0.25), std::erf(1.0), -0.5204998778130465});
  close("sig", {1 / (1 + std::exp(-0.25)), 0.7310585786300049, 1 / (1 + std::exp(0.5))});
  close("relu", {0.25, 1, 0});
  close("sin", {std::sin(0.25), std::sin(1.0), std::sin(-0.5)});
  close("cos", {std::cos(0.25), std::cos(1.0), std::cos(-0.5)});
  close("neg", {-0.25, -1, 0.5});
  close("abs", {0.25, 1, 0.5});
}

TEST(Elementwise, SigmoidAndReluAtTheExtremes) {
  const std::string text = kOpset17Head + R"(
    g (float[4] x) => (float[4] sig, float[4] relu) {
      sig = Sigmoid(x)
      relu = Relu(x)
    })";
  auto out = run(text, 1, {{"x", T({4}, {-800, 0, 800, kNaN})}}, "");
  EXPECT_TRUE(tensors_close(out["sig"], T({4}, {0, 0.5, 1, kNaN}), 0, 1e-300, "sigmoid"));
  EXPECT_TRUE(tensors_close(out["relu"], T({4}, {0, 0, 800, kNaN}), 0, 0, "NaN through Relu"));
}

TEST(Elementwise, LeakyReluDefaultAndAlpha) {
  const std::string text = kOpset17Head + R"(
    g (float[3] x) => (float[3] d, float[3] a) {
      d = LeakyRelu(x)
      a = LeakyRelu<alpha = 0.5>(x)
    })";
  auto out = run(text, 1, {{"x", T({3}, {-2, 0, 3})}}, "");
  EXPECT_TRUE(tensors_close(out["d"], T({3}, {-0.02, 0, 3}), 1e-15, 0, "default alpha 0.01"));
  EXPECT_TRUE(tensors_close(out["a"], T({3}, {-1, 0, 3}), 0, 0, "alpha 0.5"));
}

TEST(Elementwise, GeluExactAndTanh) {
  const std::string text = R"(<ir_version: 9, opset_import: ["" : 20]>
    g (float[N] x) => (float[N] exact, float[N] approx) {
      exact = Gelu(x)
      approx = Gelu<approximate = "tanh">(x)
    })";
  auto out = run(text, 3, {{"x", T({3}, {1, -0.5, 0})}});
  // math.erf / math.tanh in Python: 0.5·x·(1 + erf(x/√2)) and the tanh form.
  EXPECT_TRUE(tensors_close(out["exact"], T({3}, {0.8413447460685429, -0.15426876936299344, 0}),
                            1e-15, 0, "gelu"));
  EXPECT_TRUE(tensors_close(out["approx"], T({3}, {0.8411919906082768, -0.15428599017485606, 0}),
                            1e-15, 0, "gelu tanh"));
  expect_import_error(R"(<ir_version: 9, opset_import: ["" : 20]>
    g (float[N] x) => (float[N] y) { y = Gelu<approximate = "fast">(x) })",
                      StatusCode::kInvalidArgument, {"(Gelu)", "approximate is 'fast'"});
}

// ---- comparisons and logic --------------------------------------------------------------------

TEST(Elementwise, ComparisonsGiveBool) {
  const std::string text = kOpset17Head + R"(
    g (int64[N, 1] a, int64[3] b, float[3] x, float[3] y) =>
      (bool[N, 3] eq, bool[N, 3] lt, bool[N, 3] le, bool[N, 3] gt, bool[N, 3] ge, bool[3] feq) {
      eq = Equal(a, b)
      lt = Less(a, b)
      le = LessOrEqual(a, b)
      gt = Greater(a, b)
      ge = GreaterOrEqual(a, b)
      feq = Equal(x, y)
    })";
  auto out = run(text, 2,
                 {{"a", T({2, 1}, {1, 3}, DType::kI64)},
                  {"b", T({3}, {1, 2, 3}, DType::kI64)},
                  {"x", T({3}, {0.5, kNaN, 2})},
                  {"y", T({3}, {0.5, kNaN, 3})}});
  auto b = [](std::vector<double> v) { return T({2, 3}, std::move(v), DType::kBool); };
  EXPECT_TRUE(tensors_close(out["eq"], b({1, 0, 0, 0, 0, 1}), 0, 0, "eq"));
  EXPECT_TRUE(tensors_close(out["lt"], b({0, 1, 1, 0, 0, 0}), 0, 0, "lt"));
  EXPECT_TRUE(tensors_close(out["le"], b({1, 1, 1, 0, 0, 1}), 0, 0, "le"));
  EXPECT_TRUE(tensors_close(out["gt"], b({0, 0, 0, 1, 1, 0}), 0, 0, "gt"));
  EXPECT_TRUE(tensors_close(out["ge"], b({1, 0, 0, 1, 1, 1}), 0, 0, "ge"));
  // NaN equals nothing, itself included.
  EXPECT_TRUE(tensors_close(out["feq"], T({3}, {1, 0, 0}, DType::kBool), 0, 0, "float eq"));
  EXPECT_EQ(out["eq"].dtype, DType::kBool);
}

TEST(Elementwise, LogicOnBool) {
  const std::string text = kOpset17Head + R"(
    g (bool[2, 2] a, bool[2] b) => (bool[2, 2] and, bool[2, 2] or, bool[2, 2] xor, bool[2, 2] not,
                                    bool[2, 2] same) {
      and = And(a, b)
      or = Or(a, b)
      xor = Xor(a, b)
      not = Not(a)
      same = Equal(a, b)
    })";
  auto out =
      run(text, 1,
          {{"a", T({2, 2}, {0, 1, 0, 1}, DType::kBool)}, {"b", T({2}, {0, 1}, DType::kBool)}}, "");
  auto b = [](std::vector<double> v) { return T({2, 2}, std::move(v), DType::kBool); };
  EXPECT_TRUE(tensors_close(out["and"], b({0, 1, 0, 1}), 0, 0, "and"));
  EXPECT_TRUE(tensors_close(out["or"], b({0, 1, 0, 1}), 0, 0, "or"));
  EXPECT_TRUE(tensors_close(out["xor"], b({0, 0, 0, 0}), 0, 0, "xor"));
  EXPECT_TRUE(tensors_close(out["not"], b({1, 0, 1, 0}), 0, 0, "not"));
  EXPECT_TRUE(tensors_close(out["same"], b({1, 1, 1, 1}), 0, 0, "bool equal"));
}

TEST(Elementwise, IsNaNAndIsInf) {
  const std::string text = kOpset17Head + R"(
    g (float[4] x) => (bool[4] nan, bool[4] inf, bool[4] pos, bool[4] neg) {
      nan = IsNaN(x)
      inf = IsInf(x)
      pos = IsInf<detect_negative = 0>(x)
      neg = IsInf<detect_positive = 0>(x)
    })";
  auto out = run(text, 1, {{"x", T({4}, {kInf, -kInf, kNaN, 1})}}, "");
  auto b = [](std::vector<double> v) { return T({4}, std::move(v), DType::kBool); };
  EXPECT_TRUE(tensors_close(out["nan"], b({0, 0, 1, 0}), 0, 0, "isnan"));
  EXPECT_TRUE(tensors_close(out["inf"], b({1, 1, 0, 0}), 0, 0, "isinf"));
  EXPECT_TRUE(tensors_close(out["pos"], b({1, 0, 0, 0}), 0, 0, "+inf only"));
  EXPECT_TRUE(tensors_close(out["neg"], b({0, 1, 0, 0}), 0, 0, "-inf only"));
}

TEST(Elementwise, VariadicMaxMin) {
  const std::string text = kOpset17Head + R"(
    g (float[N, 1] a, float[3] b, float[1] c, int32[3] i, int32[3] j) =>
      (float[N, 3] max, float[N, 3] min, float[N, 1] one, int32[3] imax) {
      max = Max(a, b, c)
      min = Min(a, b, c)
      one = Max(a)
      imax = Max(i, j)
    })";
  auto out = run(text, 2,
                 {{"a", T({2, 1}, {1, kNaN})},
                  {"b", T({3}, {0, 2, 5})},
                  {"c", T({1}, {3})},
                  {"i", T({3}, {-5, 7, 0}, DType::kI32)},
                  {"j", T({3}, {-6, 8, 0}, DType::kI32)}});
  // NaN propagates, as numpy.maximum does.
  EXPECT_TRUE(
      tensors_close(out["max"], T({2, 3}, {3, 3, 5, kNaN, kNaN, kNaN}), 0, 0, "max of three"));
  EXPECT_TRUE(
      tensors_close(out["min"], T({2, 3}, {0, 1, 1, kNaN, kNaN, kNaN}), 0, 0, "min of three"));
  EXPECT_TRUE(tensors_close(out["one"], T({2, 1}, {1, kNaN}), 0, 0, "max of one"));
  EXPECT_TRUE(tensors_close(out["imax"], T({3}, {-5, 8, 0}, DType::kI32), 0, 0, "int max"));
}

// ---- Where, Cast, Clip ------------------------------------------------------------------------

TEST(Elementwise, WhereBroadcasts) {
  const std::string text = kOpset17Head + R"(
    g (bool[N, 1] c, float[3] x, float[N, 3] y, int64[2] i) => (float[N, 3] w, int64[2] wi) {
      minus1 = Constant<value_ints = [-1]>()
      one = Constant<value_ints = [1]>()
      is_neg = Equal(i, minus1)
      wi = Where(is_neg, one, i)
      w = Where(c, x, y)
    })";
  auto out = run(text, 2,
                 {{"c", T({2, 1}, {1, 0}, DType::kBool)},
                  {"x", T({3}, {1, 2, 3})},
                  {"y", T({2, 3}, {-1, -2, -3, -4, -5, -6})},
                  {"i", T({2}, {-1, 7}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["w"], T({2, 3}, {1, 2, 3, -4, -5, -6}), 0, 0, "where"));
  EXPECT_TRUE(tensors_close(out["wi"], T({2}, {1, 7}, DType::kI64), 0, 0, "where int64"));
}

TEST(Elementwise, Cast) {
  const std::string text = R"(<ir_version: 8, opset_import: ["" : 19]>
    g (float[5] x, double[1] d, int64[3] i, bool[2] b) =>
      (int64[5] to_i64, bool[5] to_bool, uint8[5] to_u8, float[1] to_f32, int32[3] to_i32,
       float[3] i_to_f, float[2] b_to_f, double[5] to_f64) {
      to_i64 = Cast<to = 7>(x)
      to_bool = Cast<to = 9>(x)
      to_u8 = Cast<to = 2>(x)
      to_f32 = Cast<to = 1, saturate = 0>(d)
      to_i32 = Cast<to = 6>(i)
      i_to_f = Cast<to = 1>(i)
      b_to_f = Cast<to = 1>(b)
      to_f64 = Cast<to = 11>(x)
    })";
  auto out = run(text, 1,
                 {{"x", T({5}, {-2.75, 2.75, 0, 300, 0.5})},
                  {"d", T({1}, {0.1}, DType::kF64)},
                  {"i", T({3}, {4294967297.0, -1, 5}, DType::kI64)},
                  {"b", T({2}, {1, 0}, DType::kBool)}},
                 "");
  EXPECT_TRUE(
      tensors_close(out["to_i64"], T({5}, {-2, 2, 0, 300, 0}, DType::kI64), 0, 0, "truncates"));
  EXPECT_TRUE(tensors_close(out["to_bool"], T({5}, {1, 1, 0, 1, 1}, DType::kBool), 0, 0, "!= 0"));
  EXPECT_TRUE(tensors_close(out["to_u8"], T({5}, {254, 2, 0, 44, 0}, DType::kU8), 0, 0, "wraps"));
  // Cast(double → float) rounds like float: 0.1 becomes 0.100000001490116...
  EXPECT_EQ(out["to_f32"].data[0], 0.10000000149011612);
  EXPECT_TRUE(tensors_close(out["to_i32"], T({3}, {1, -1, 5}, DType::kI32), 0, 0, "int32 wrap"));
  EXPECT_TRUE(tensors_close(out["i_to_f"], T({3}, {4294967296.0, -1, 5}), 0, 0, "to float"));
  EXPECT_TRUE(tensors_close(out["b_to_f"], T({2}, {1, 0}), 0, 0, "bool to float"));
  EXPECT_TRUE(tensors_close(out["to_f64"], T({5}, {-2.75, 2.75, 0, 300, 0.5}, DType::kF64), 0, 0,
                            "to double"));
  EXPECT_EQ(out["to_i64"].dtype, DType::kI64);
  EXPECT_EQ(out["to_f32"].dtype, DType::kF32);
}

TEST(Elementwise, Clip) {
  const std::string text = kOpset17Head + R"(
    g (float[N] x, float lo, float hi, int8[3] i, int8 ilo) =>
      (float[N] both, float[N] upper, float[N] lower, float[N] crossed, int8[3] ints) {
      both = Clip(x, lo, hi)
      upper = Clip(x, , hi)
      lower = Clip(x, lo)
      crossed = Clip(x, hi, lo)
      ints = Clip(i, ilo)
    })";
  auto out = run(text, 4,
                 {{"x", T({4}, {-5, 0.5, 5, kNaN})},
                  {"lo", T({}, {-1})},
                  {"hi", T({}, {1})},
                  {"i", T({3}, {-128, 0, 127}, DType::kI8)},
                  {"ilo", T({}, {-3}, DType::kI8)}});
  EXPECT_TRUE(tensors_close(out["both"], T({4}, {-1, 0.5, 1, kNaN}), 0, 0, "clip"));
  EXPECT_TRUE(tensors_close(out["upper"], T({4}, {-5, 0.5, 1, kNaN}), 0, 0, "max only"));
  EXPECT_TRUE(tensors_close(out["lower"], T({4}, {-1, 0.5, 5, kNaN}), 0, 0, "min only"));
  // min > max: every element becomes max (the spec's rule).
  EXPECT_TRUE(tensors_close(out["crossed"], T({4}, {-1, -1, -1, kNaN}), 0, 0, "min > max"));
  EXPECT_TRUE(tensors_close(out["ints"], T({3}, {-3, 0, 127}, DType::kI8), 0, 0, "int8"));
}

// ---- errors -----------------------------------------------------------------------------------

TEST(Elementwise, Errors) {
  const std::string h = kOpset17Head;
  expect_import_error(h + "g (float[N] a, float[N, 2] b) => (float[N, 2] y) { y = Add(b, a) }",
                      StatusCode::kInvalidArgument,
                      {"(Add)", "[S, 2] and [S] do not broadcast", "2 vs S"});
  expect_import_error(h + "g (float[N, 3] a, float[4] b) => (float[N, 3] y) { y = Mul(a, b) }",
                      StatusCode::kInvalidArgument, {"(Mul)", "3 vs 4"});
  expect_import_error(h + "g (float[N] a, int64[N] b) => (float[N] y) { y = Sub(a, b) }",
                      StatusCode::kInvalidArgument,
                      {"(Sub)", "inputs 'a' (f32) and 'b' (i64) differ in dtype"});
  expect_import_error(h + "g (int64[N] a) => (int64[N] y) { y = Sqrt(a) }",
                      StatusCode::kInvalidArgument, {"(Sqrt)", "input 'a' is i64", "f32"});
  expect_import_error(h + "g (float[N] a, float[N] b) => (bool[N] y) { y = And(a, b) }",
                      StatusCode::kInvalidArgument, {"(And)", "input 'a' is f32", "bool"});
  expect_import_error(h + "g (bool[N] a, bool[N] b) => (bool[N] y) { y = Less(a, b) }",
                      StatusCode::kInvalidArgument, {"(Less)", "input 'a' is bool"});
  expect_import_error(
      h + "g (float[N] a) => (float[N] y) { e = Constant<value = bool[1] {1}>()  y = Pow(a, e) }",
      StatusCode::kInvalidArgument, {"(Pow)", "exponent", "bool"});
  expect_import_error(h + "g (float[N] c, float[N] a) => (float[N] y) { y = Where(c, a, a) }",
                      StatusCode::kInvalidArgument,
                      {"(Where)", "condition 'c' is f32; expected bool"});
  expect_import_error(
      h + "g (bool[N] c, float[N] a, int64[N] b) => (float[N] y) { y = Where(c, a, b) }",
      StatusCode::kInvalidArgument, {"(Where)", "differ in dtype"});
  expect_import_error(h + "g (float[N] a) => (float[N] y) { y = Cast<to = 8>(a) }",
                      StatusCode::kUnimplemented, {"(Cast)", "cast to ONNX type 8"});
  expect_import_error(h + "g (float[N] a) => (float[N] y) { y = Cast(a) }",
                      StatusCode::kInvalidArgument, {"(Cast)", "attribute 'to' is missing"});
  expect_import_error(h + "g (float[N] a, float[2] m) => (float[N] y) { y = Clip(a, m) }",
                      StatusCode::kInvalidArgument, {"(Clip)", "min 'm' has shape [2]"});
  expect_import_error(h + "g (float[N] a, double m) => (float[N] y) { y = Clip(a, m) }",
                      StatusCode::kInvalidArgument, {"(Clip)", "min 'm' is f64"});
  expect_import_error(h + "g (float[N] a, float[N] b) => (float[N] y) { y = Add(a, a, b) }",
                      StatusCode::kInvalidArgument, {"(Add)", "has 3 inputs, expected 2"});
  expect_import_error(h + "g (float[N] a) => (float[N] y) { y = Max() }",
                      StatusCode::kInvalidArgument, {"(Max)", "required input 0 is missing"});
}

TEST(Elementwise, AllFloatDtypesAreAccepted) {
  for (const char* t : {"float", "float16", "bfloat16", "double"}) {
    Result<ir::Graph> g = import_text(kOpset17Head + "g (" + t + "[N] a, " + t + "[N] b) => (" + t +
                                          "[N] y) { z = Add(a, b)  y = Tanh(z) }",
                                      ImportOptions{"N", {}});
    EXPECT_TRUE(g.ok()) << t << ": " << g.status().to_string();
  }
}

// The kernels re-check what they rely on: they may be called with any tensors.
TEST(Elementwise, ReferenceRechecksItsInputs) {
  const RefTensor a = T({2}, {1, 2}), b = T({3}, {1, 2, 3}), bad = T({2}, {1});
  EXPECT_NE(ref_error("Add", {&a, &b}).find("dims [2] and [3] do not broadcast"),
            std::string::npos);
  EXPECT_NE(ref_error("Mul", {&a, &bad}).find("input 1 holds 1 values"), std::string::npos);
  EXPECT_NE(ref_error("Sub", {&a}).find("Sub takes 2 inputs, not 1"), std::string::npos);
  EXPECT_NE(ref_error("Max", {}).find("Max takes 1+ inputs, not 0"), std::string::npos);
  EXPECT_NE(ref_error("Where", {&a, &a, nullptr}).find("input 2 is missing"), std::string::npos);
  EXPECT_NE(ref_error("Clip", {&a, &a}).find("min holds 2 values"), std::string::npos);
  EXPECT_NE(ref_error("Cast", {&a}, {{"to", int64_t{8}}}).find("cannot cast to ONNX type 8"),
            std::string::npos);
  EXPECT_EQ(ref_error("Add", {&a, &a}), "ok");
}

// ---- symbolic folding -------------------------------------------------------------------------

// A graph holding symbolic or constant int64 values, for driving infer functions directly.
struct IntsGraph {
  ir::Graph g;
  // A symbolic constant (what folding Shape(x) leaves behind).
  int symbolic(const std::string& name, std::vector<DimExpr> ints, bool scalar = false,
               DType dt = DType::kI64) {
    ir::Value v;
    v.name = name;
    v.dtype = dt;
    if (!scalar) v.shape = {C(static_cast<int64_t>(ints.size()))};
    v.ints = std::move(ints);
    return g.add_value(std::move(v));
  }
  // Runs op's infer on inputs; returns the output value.
  const ir::Value& infer(const std::string& op, std::vector<int> inputs,
                         std::map<std::string, ir::AttrValue> attrs = {}) {
    ir::Node n;
    n.name = op + std::to_string(g.nodes.size());
    n.op = op;
    n.inputs = std::move(inputs);
    n.attrs = std::move(attrs);
    ir::Value out;
    out.name = n.name + "_out";
    out.producer = static_cast<int>(g.nodes.size());
    n.outputs = {g.add_value(std::move(out))};
    g.nodes.push_back(n);
    InferContext c(g, g.nodes.back(), 17, 1 << 16);
    Status s = op_find("", op)->infer(c);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return g.values[g.nodes.back().outputs[0]];
  }
};

using Ints = std::optional<std::vector<DimExpr>>;

TEST(ElementwiseFolding, IntegerArithmeticOnSymbolicShapes) {
  IntsGraph t;
  const int shape = t.symbolic("shape", {C(2), S, C(64)});
  const int four = t.symbolic("four", {C(4)}, true);
  const int two = t.symbolic("two", {C(2)}, true);
  const int s2 = t.symbolic("s2", {DimExpr::size(2, 4)}, true);
  EXPECT_EQ(t.infer("Mul", {shape, four}).ints, (Ints{{C(8), DimExpr::size(4), C(256)}}));
  EXPECT_EQ(t.infer("Add", {shape, four}).ints, (Ints{{C(6), DimExpr::size(1, 4), C(68)}}));
  EXPECT_EQ(t.infer("Sub", {four, shape}).ints, (Ints{{C(2), DimExpr::size(-1, 4), C(-60)}}));
  EXPECT_EQ(t.infer("Neg", {shape}).ints, (Ints{{C(-2), DimExpr::size(-1), C(-64)}}));
  EXPECT_EQ(t.infer("Div", {s2, two}).ints, (Ints{{DimExpr::size(1, 2)}}));
  // S / 2 is not a linear expression for every S: left to run time.
  EXPECT_EQ(t.infer("Div", {shape, two}).ints, std::nullopt);
  // Two S-dependent factors would give S², not linear.
  EXPECT_EQ(t.infer("Mul", {shape, shape}).ints, std::nullopt);
  // max(S, 4) depends on S: nothing is set; max(S, 1) is S for every S >= 1.
  EXPECT_EQ(t.infer("Max", {shape, four}).ints, std::nullopt);
  const int one = t.symbolic("one", {C(1)}, true);
  EXPECT_EQ(t.infer("Max", {shape, one}).ints, (Ints{{C(2), S, C(64)}}));
  EXPECT_EQ(t.infer("Min", {shape, one, four}).ints, (Ints{{C(1), C(1), C(1)}}));
  EXPECT_EQ(t.infer("Abs", {t.symbolic("neg", {DimExpr::size(-1), C(-3)})}).ints,
            (Ints{{S, C(3)}}));
  // Float results never carry contents.
  const int f = t.symbolic("f", {C(1)}, false, DType::kF32);
  EXPECT_EQ(t.infer("Add", {f, f}).ints, std::nullopt);
}

TEST(ElementwiseFolding, ComparisonsWhereCastAndNot) {
  IntsGraph t;
  const int shape = t.symbolic("shape", {C(2), S, C(-1), DimExpr::size(1, 1)});
  const int minus1 = t.symbolic("minus1", {C(-1)}, true);
  const int one = t.symbolic("one", {C(1)}, true);
  t.infer("Equal", {shape, minus1});
  const int eq = t.g.nodes.back().outputs[0];
  EXPECT_EQ(t.g.values[eq].dtype, DType::kBool);
  EXPECT_EQ(t.g.values[eq].ints, (Ints{{C(0), C(0), C(1), C(0)}}));
  // The exporters' Reshape target: Where(Equal(shape, -1), 1, shape).
  EXPECT_EQ(t.infer("Where", {eq, one, shape}).ints, (Ints{{C(2), S, C(1), DimExpr::size(1, 1)}}));
  // S < 1 is false for every S >= 1.
  EXPECT_EQ(t.infer("Less", {shape, one}).ints, (Ints{{C(0), C(0), C(1), C(0)}}));
  const int two = t.symbolic("two", {C(2)}, true);
  // S > 2 depends on S; the others are decided for every S in [1, 65536].
  EXPECT_EQ(t.infer("Greater", {shape, two}).ints, std::nullopt);
  const int pair = t.symbolic("pair", {DimExpr::size(1, 1), C(-1)});
  EXPECT_EQ(t.infer("Greater", {pair, minus1}).ints, (Ints{{C(1), C(0)}}));
  EXPECT_EQ(t.infer("GreaterOrEqual", {pair, minus1}).ints, (Ints{{C(1), C(1)}}));
  EXPECT_EQ(t.infer("LessOrEqual", {pair, minus1}).ints, (Ints{{C(0), C(1)}}));
  EXPECT_EQ(t.infer("Less", {pair, minus1}).ints, (Ints{{C(0), C(0)}}));
  const int mask = t.g.nodes.back().outputs[0];
  EXPECT_EQ(t.infer("Not", {mask}).ints, (Ints{{C(1), C(1)}}));
  EXPECT_EQ(t.infer("Cast", {pair}, {{"to", int64_t{9}}}).ints, (Ints{{C(1), C(1)}}));
  EXPECT_EQ(t.infer("Cast", {pair}, {{"to", int64_t{6}}}).ints,
            (Ints{{DimExpr::size(1, 1), C(-1)}}));
  EXPECT_EQ(t.infer("Cast", {pair}, {{"to", int64_t{1}}}).ints, std::nullopt);
  EXPECT_EQ(t.infer("Equal", {shape, shape}).ints, (Ints{{C(1), C(1), C(1), C(1)}}));
}

// Folding inside graph_infer: the shape arithmetic disappears, the graph output is computed at
// run time from the symbolic constants.
TEST(ElementwiseFolding, GraphInferDropsFoldedShapeArithmetic) {
  IntsGraph t;
  const int shape = t.symbolic("shape", {C(2), S, C(64)});
  const int four = t.symbolic("four", {C(4)}, true);
  const int minus1 = t.symbolic("minus1", {C(-1)}, true);
  auto add_node = [&](const std::string& op, std::vector<int> in, const std::string& out) {
    ir::Node n;
    n.name = out + "_node";
    n.op = op;
    n.inputs = std::move(in);
    ir::Value v;
    v.name = out;
    v.producer = static_cast<int>(t.g.nodes.size());
    n.outputs = {t.g.add_value(std::move(v))};
    t.g.nodes.push_back(n);
    return n.outputs[0];
  };
  const int m = add_node("Mul", {shape, four}, "m");
  const int e = add_node("Equal", {m, minus1}, "e");
  const int w = add_node("Where", {e, four, m}, "w");
  t.g.outputs = {w};
  t.g.opsets[""] = 17;
  ASSERT_TRUE(graph_infer(t.g, InferOptions{}).ok());
  EXPECT_EQ(kiln::testing::count_ops(t.g, "Mul"), 0);
  EXPECT_EQ(kiln::testing::count_ops(t.g, "Equal"), 0);
  EXPECT_EQ(t.g.values[m].ints, (Ints{{C(8), DimExpr::size(4), C(256)}}));
  auto r = reference_run(t.g, 5, {});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(tensors_close(r->at("w"), T({3}, {8, 20, 256}, DType::kI64), 0, 0, "w at S=5"));
}

// Exporters' Reshape(x, Concat(Mul(Gather(Shape(x), 0), 4), -1)) folds to [4·S, 4]. Needs
// Shape, Gather, Concat and Reshape from the other families.
TEST(ElementwiseFolding, ShapeGatherMulConcatReshape) {
  for (const char* op : {"Shape", "Gather", "Concat", "Reshape"})
    if (!op_find("", op)) GTEST_SKIP() << op << " is not registered yet";
  const std::string text = kOpset17Head + R"(
    g (float[N, 4, 4] x) => (float[M, 4] y) {
      s = Shape(x)
      zero = Constant<value_ints = [0]>()
      four = Constant<value_ints = [4]>()
      minus1 = Constant<value_ints = [-1]>()
      n = Gather(s, zero)
      n4 = Mul(n, four)
      target = Concat<axis = 0>(n4, minus1)
      is_neg = Equal(target, minus1)
      fixed = Where(is_neg, four, target)
      y = Reshape(x, fixed)
    })";
  ir::Graph g = import_text_ok(text, ImportOptions{"N", {}});
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.values[g.outputs[0]].shape, (ir::Shape{DimExpr::size(4), C(4)}));
  EXPECT_EQ(kiln::testing::count_ops(g, "Mul"), 0);
  EXPECT_EQ(kiln::testing::count_ops(g, "Where"), 0);
  EXPECT_EQ(kiln::testing::count_ops(g, "Reshape"), 1);
  auto in = kiln::testing::random_inputs(g, 3, 7);
  auto r = reference_run(g, 3, in);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->at("y").dims, (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(r->at("y").data, in.at("x").data);
}

// ---- ONNX node tests --------------------------------------------------------------------------

// ONNX's node test `name` on test_data_set_0, every output compared in value and dtype (rtol
// 1e-5, atol 1e-6: the expected data are float64 numpy results stored as float32). `min_opset`
// raises an older opset_import to what kiln reads (13); only for ops whose definition has not
// changed since.
void check_node_test(const std::string& name, int64_t min_opset = 0) {
  kiln::testing::check_onnx_node_test(
      name, {.rtol = 1e-5, .atol = 1e-6, .min_opset = min_opset, .check_dtype = true});
}

class ElementwiseNodeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ElementwiseNodeTest, MatchesOnnxData) { check_node_test(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Onnx, ElementwiseNodeTest,
    ::testing::Values("test_add_bcast", "test_add_uint8", "test_sub_uint8", "test_mul_bcast",
                      "test_div_bcast", "test_div_uint8", "test_pow_bcast_array",
                      "test_pow_types_int64_float32", "test_pow_types_float32_int64",
                      "test_pow_types_int32_int32", "test_equal_bcast", "test_less_bcast",
                      "test_less_equal_bcast", "test_greater_bcast", "test_greater_equal_bcast",
                      "test_max_example", "test_min_example", "test_max_int8", "test_max_one_input",
                      "test_min_float64", "test_sqrt", "test_reciprocal", "test_neg", "test_abs",
                      "test_exp", "test_log", "test_tanh", "test_erf", "test_sigmoid", "test_relu",
                      "test_isnan", "test_where_example", "test_where_long_example", "test_clip",
                      "test_clip_splitbounds", "test_clip_default_min",
                      "test_clip_default_int8_max", "test_clip_default_inbounds",
                      "test_cast_DOUBLE_to_FLOAT", "test_cast_FLOAT_to_DOUBLE",
                      "test_cast_FLOAT16_to_FLOAT"),
    kiln::testing::NodeTestName());

class ElementwiseOldOpsetNodeTest : public ::testing::TestWithParam<const char*> {};

// These ops have not changed since their (older than 13) version: Not-1, And/Or/Xor-7,
// Sin/Cos-7, IsInf-10.
TEST_P(ElementwiseOldOpsetNodeTest, MatchesOnnxData) { check_node_test(GetParam(), 13); }

INSTANTIATE_TEST_SUITE_P(Onnx, ElementwiseOldOpsetNodeTest,
                         ::testing::Values("test_not_3d", "test_and_bcast4v3d", "test_or_bcast3v1d",
                                           "test_xor_bcast4v2d", "test_sin", "test_cos",
                                           "test_isinf", "test_isinf_negative",
                                           "test_isinf_positive"),
                         kiln::testing::NodeTestName());

}  // namespace
}  // namespace kiln::compiler
