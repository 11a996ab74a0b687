// fuse_norms: decomposed LayerNorm / RMSNorm in the forms exporters write become one
// LayerNormalization / RMSNormalization, checked against the unfused graph on the CPU
// reference; near misses stay as they are.
#include "compiler/passes/fuse_norms.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kHead18 = R"(<ir_version: 8, opset_import: ["" : 18]> )";
// Parameters every graph below may use.
const std::string kParams = R"(<float[8] gamma = {1.5, -0.5, 2, 0.25, 1, 3, -1, 0.75},
    float[8] beta = {0.1, 0.2, -0.3, 0.4, 0, -1, 2, 0.5}, float[1, 1, 8] gamma3 =
    {1.5, -0.5, 2, 0.25, 1, 3, -1, 0.75}, float two = {2.0}, float three = {3.0},
    float eps = {1e-5}, float one = {1.0}, float mhalf = {-0.5}, float half = {0.5}>)";

struct Passed {
  ir::Graph before, after;
};

Passed run_pass(const std::string& head, const std::string& sig, const std::string& body) {
  Passed p;
  p.before = import_text_ok(head + sig + kParams + "{" + body + "}", ImportOptions{"N", {}});
  p.after = p.before;
  Status st = fuse_norms(p.after);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

const ir::Node* find_op(const ir::Graph& g, const std::string& op) {
  for (const ir::Node& n : g.nodes)
    if (n.op == op) return &n;
  return nullptr;
}

const std::string kSig = "g (float[N, 3, 8] x) => (float[N, 3, 8] y) ";

// ---- LayerNorm ----------------------------------------------------------------------------------

TEST(FuseNorms, LayerNormFullForm) {
  Passed p = run_pass(kHead, kSig, R"(
    mu = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    sc = Mul(n, gamma)
    y = Add(sc, beta))");
  ASSERT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  const ir::Node* ln = find_op(p.after, "LayerNormalization");
  EXPECT_NEAR(ln->attr_float("epsilon", 0), 1e-5, 1e-12);
  EXPECT_EQ(ln->attr_int("axis", 0), -1);
  ASSERT_EQ(ln->inputs.size(), 3u);
  EXPECT_EQ(p.after.values[ln->inputs[0]].name, "x");
  EXPECT_EQ(p.after.values[ln->inputs[1]].name, "gamma");
  EXPECT_EQ(p.after.values[ln->inputs[2]].name, "beta");
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, LayerNormMulSelfReciprocalAndParamOrder) {
  // Mul(d, d) for the square, 1/sqrt via Reciprocal, gamma first, bias first, opset-18 axes.
  Passed p = run_pass(kHead18, kSig, R"(
    ax = Constant<value_ints = [2]>()
    mu = ReduceMean(x, ax)
    d = Sub(x, mu)
    sq = Mul(d, d)
    var = ReduceMean(sq, ax)
    ve = Add(eps, var)
    sd = Sqrt(ve)
    r = Reciprocal(sd)
    n = Mul(r, d)
    sc = Mul(gamma, n)
    y = Add(beta, sc))");
  EXPECT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, LayerNormWithoutAffineGetsOnesScale) {
  Passed p = run_pass(kHead, kSig, R"(
    mu = ReduceMean<axes = [2]>(x)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))");
  ASSERT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  const ir::Node* ln = find_op(p.after, "LayerNormalization");
  EXPECT_EQ(ln->inputs.size(), 2u);  // no bias
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, LayerNormBroadcastGammaConstantIsReshaped) {
  Passed p = run_pass(kHead, kSig, R"(
    mu = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    y = Mul(n, gamma3))");
  ASSERT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, LayerNormStopsAtSharedIntermediate) {
  // n is also a graph output: the LayerNorm fuses without the affine part, which stays.
  Passed p = run_pass(kHead, "g (float[N, 3, 8] x) => (float[N, 3, 8] y, float[N, 3, 8] n) ", R"(
    mu = ReduceMean<axes = [-1]>(x)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    y = Mul(n, gamma))");
  EXPECT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  EXPECT_EQ(count_ops(p.after, "Mul"), 1);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

// ---- RMSNorm ------------------------------------------------------------------------------------

TEST(FuseNorms, RmsNormSqrtDivWeight) {
  Passed p = run_pass(kHead, kSig, R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    n = Div(x, s)
    y = Mul(n, gamma))");
  ASSERT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  const ir::Node* rn = find_op(p.after, "RMSNormalization");
  EXPECT_NEAR(rn->attr_float("epsilon", 0), 1e-5, 1e-12);
  EXPECT_EQ(p.after.values[rn->inputs[1]].name, "gamma");
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, RmsNormReciprocalSqrtMulWeightFirst) {
  // The dynamo form: Reciprocal(Sqrt(...)), x·rsqrt, weight·(...).
  Passed p = run_pass(kHead18, kSig, R"(
    ax = Constant<value_ints = [-1]>()
    sq = Pow(x, two)
    ms = ReduceMean<keepdims = 1, noop_with_empty_axes = 0>(sq, ax)
    a = Add(ms, eps)
    s = Sqrt(a)
    r = Reciprocal(s)
    n = Mul(x, r)
    y = Mul(gamma, n))");
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, RmsNormTorchScriptFormWithCasts) {
  // ts17: Cast to float, Div(1, Sqrt), Cast back, weight first; the cast input is also read
  // by a residual Add, so it stays and the fused op reads it.
  Passed p = run_pass(kHead, "g (float[N, 3, 8] x) => (float[N, 3, 8] y, float[N, 3, 8] z) ", R"(
    xc = Cast<to = 1>(x)
    sq = Pow(xc, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    r = Div(one, s)
    n = Mul(xc, r)
    nc = Cast<to = 1>(n)
    y = Mul(gamma, nc)
    z = Add(xc, y))");
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_EQ(count_ops(p.after, "Sqrt"), 0);
  EXPECT_EQ(count_ops(p.after, "Mul"), 0);
  // The reference rounds a float Cast's output to float32; the fused op does not round its
  // intermediate, so the two agree to float32 precision only.
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}, 1e-6, 1e-6));
}

TEST(FuseNorms, RmsNormPowMinusHalfMulSelfNoWeight) {
  Passed p = run_pass(kHead, kSig, R"(
    sq = Mul(x, x)
    ms = ReduceMean<axes = [2]>(sq)
    a = Add(ms, eps)
    r = Pow(a, mhalf)
    y = Mul(r, x))");
  ASSERT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  const ir::Node* rn = find_op(p.after, "RMSNormalization");
  const ir::Value& w = p.after.values[rn->inputs[1]];
  ASSERT_TRUE(w.constant.has_value());  // a ones [8] scale
  EXPECT_EQ(w.shape, (ir::Shape{ir::DimExpr::constant(8)}));
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, RmsNormPowHalfDiv) {
  Passed p = run_pass(kHead, kSig, R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Pow(a, half)
    n = Div(x, s)
    y = Mul(n, gamma))");
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseNorms, TwoNormsInOneGraph) {
  Passed p = run_pass(kHead, kSig, R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    n = Div(x, s)
    h = Mul(n, gamma)
    mu = ReduceMean<axes = [-1]>(h)
    d = Sub(h, mu)
    sq2 = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq2)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))");
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_EQ(count_ops(p.after, "LayerNormalization"), 1);
  EXPECT_EQ(p.after.nodes.size(), 2u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

// ---- near misses stay unfused -------------------------------------------------------------------

void expect_unfused(const std::string& head, const std::string& sig, const std::string& body) {
  Passed p = run_pass(head, sig, body);
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 0) << body;
  EXPECT_EQ(count_ops(p.after, "LayerNormalization"), 0) << body;
  EXPECT_EQ(p.after.nodes.size(), p.before.nodes.size()) << body;
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

TEST(FuseNorms, NearMissesStayUnfused) {
  // Mean over a middle axis.
  expect_unfused(kHead, kSig, R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    y = Div(x, s))");
  // Cube instead of square.
  expect_unfused(kHead, kSig, R"(
    sq = Pow(x, three)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    y = Div(x, s))");
  // Numerator is another tensor.
  expect_unfused(kHead, "g (float[N, 3, 8] x, float[N, 3, 8] x2) => (float[N, 3, 8] y) ", R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    s = Sqrt(a)
    y = Div(x2, s))");
  // Epsilon from an input (not a constant).
  expect_unfused(kHead, "g (float[N, 3, 8] x, float[1] e) => (float[N, 3, 8] y) ", R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, e)
    s = Sqrt(a)
    y = Div(x, s))");
  // Reciprocal without the square root.
  expect_unfused(kHead, kSig, R"(
    sq = Pow(x, two)
    ms = ReduceMean<axes = [-1]>(sq)
    a = Add(ms, eps)
    r = Reciprocal(a)
    y = Mul(x, r))");
  // Sum instead of mean.
  expect_unfused(kHead, kSig, R"(
    ax = Constant<value_ints = [-1]>()
    sq = Pow(x, two)
    ms = ReduceSum(sq, ax)
    a = Add(ms, eps)
    s = Sqrt(a)
    y = Div(x, s))");
}

TEST(FuseNorms, LayerNormWithWrongCentreIsOnlyAnRmsNorm) {
  // d = x - mean(x2): the variance part is still an RMSNorm of d (fused as such, exact), but
  // it is not a LayerNorm of x.
  Passed p = run_pass(kHead, "g (float[N, 3, 8] x, float[N, 3, 8] x2) => (float[N, 3, 8] y) ",
                      R"(
    mu = ReduceMean<axes = [-1]>(x2)
    d = Sub(x, mu)
    sq = Pow(d, two)
    var = ReduceMean<axes = [-1]>(sq)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    y = Div(d, sd))");
  EXPECT_EQ(count_ops(p.after, "LayerNormalization"), 0);
  EXPECT_EQ(count_ops(p.after, "RMSNormalization"), 1);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

}  // namespace
}  // namespace kiln::compiler
