// fuse_gelu: the erf and tanh forms of GELU, in the factor orders exporters write, become one
// Gelu (approximate none / tanh); near misses (wrong constants, other operands) stay.
#include "compiler/passes/fuse_gelu.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kSig = "g (float[N, 2, 6] x) => (float[N, 2, 6] y) ";
const std::string kParams = R"(<float sqrt2 = {1.4142135}, float rsqrt2 = {0.70710678},
    float one = {1.0}, float half = {0.5}, float two = {2.0}, float three = {3.0},
    float c1 = {0.7978845608}, float c2 = {0.044715}, float bad_sqrt2 = {1.5},
    float bad_c2 = {0.04}, float[1, 1, 1] half3 = {0.5}>)";

struct Passed {
  ir::Graph before, after;
};

Passed run_pass(const std::string& body, const std::string& sig = kSig) {
  Passed p;
  p.before = import_text_ok(kHead + sig + kParams + "{" + body + "}", ImportOptions{"N", {}});
  p.after = p.before;
  Status st = fuse_gelu(p.after);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

void expect_gelu(const std::string& body, const std::string& approximate) {
  Passed p = run_pass(body);
  ASSERT_EQ(count_ops(p.after, "Gelu"), 1) << body;
  ASSERT_EQ(p.after.nodes.size(), 1u) << body;
  const ir::Node& n = p.after.nodes[0];
  EXPECT_EQ(n.attr_string("approximate", "?"), approximate);
  EXPECT_EQ(p.after.values[n.inputs[0]].name, "x");
  EXPECT_EQ(p.after.values[n.outputs[0]].name, "y");
  // The exporters' constants are float32 roundings of √2, √(2/π), 0.044715 (relative error
  // below 1e-7); Gelu uses the exact values, so results agree to that precision.
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}, 1e-6, 1e-7));
}

void expect_unfused(const std::string& body, const std::string& sig = kSig) {
  Passed p = run_pass(body, sig);
  EXPECT_EQ(count_ops(p.after, "Gelu"), 0) << body;
  EXPECT_EQ(p.after.nodes.size(), p.before.nodes.size()) << body;
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

TEST(FuseGelu, ErfTorchScriptOrder) {  // ((x · (1 + erf(x / √2))) · 0.5
  expect_gelu(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x, t)
    y = Mul(m, half))",
              "none");
}

TEST(FuseGelu, ErfDynamoOrder) {  // x · (0.5 · (1 + erf(x / √2)))
  expect_gelu(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(half, t)
    y = Mul(x, m))",
              "none");
}

TEST(FuseGelu, ErfMulByInverseSqrt2HalfXFirst) {  // (0.5 · x) · (1 + erf(x · 0.7071))
  expect_gelu(R"(
    u = Mul(rsqrt2, x)
    e = Erf(u)
    t = Add(one, e)
    hx = Mul(x, half)
    y = Mul(t, hx))",
              "none");
}

TEST(FuseGelu, ErfXOverTwo) {  // (x / 2) · (1 + erf(x / √2))
  expect_gelu(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    hx = Div(x, two)
    y = Mul(hx, t))",
              "none");
}

TEST(FuseGelu, TanhGpt2Order) {
  expect_gelu(R"(
    hx = Mul(x, half)
    p = Pow(x, three)
    pc = Mul(p, c2)
    inner = Add(x, pc)
    z = Mul(inner, c1)
    th = Tanh(z)
    t = Add(th, one)
    y = Mul(hx, t))",
              "tanh");
}

TEST(FuseGelu, TanhCubeByMulsAndOtherOrders) {
  expect_gelu(R"(
    xx = Mul(x, x)
    x3 = Mul(xx, x)
    pc = Mul(c2, x3)
    inner = Add(pc, x)
    z = Mul(c1, inner)
    th = Tanh(z)
    t = Add(one, th)
    m = Mul(t, x)
    y = Mul(half, m))",
              "tanh");
}

TEST(FuseGelu, TwoGelusAndSharedInput) {
  Passed p = run_pass(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x, t)
    g1 = Mul(m, half)
    u2 = Div(g1, sqrt2)
    e2 = Erf(u2)
    t2 = Add(e2, one)
    m2 = Mul(g1, t2)
    y = Mul(m2, half))");
  EXPECT_EQ(count_ops(p.after, "Gelu"), 2);
  EXPECT_EQ(p.after.nodes.size(), 2u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}, 1e-6, 1e-7));
}

TEST(FuseGelu, NearMissesStayUnfused) {
  // √2 wrong.
  expect_unfused(R"(
    u = Div(x, bad_sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x, t)
    y = Mul(m, half))");
  // 1 + erf replaced by 2 + erf.
  expect_unfused(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, two)
    m = Mul(x, t)
    y = Mul(m, half))");
  // The 0.5 missing: x · (1 + erf(x / √2)).
  expect_unfused(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    y = Mul(x, t))");
  // Multiplied by another tensor than the erf's argument.
  expect_unfused(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x2, t)
    y = Mul(m, half))",
                 "g (float[N, 2, 6] x, float[N, 2, 6] x2) => (float[N, 2, 6] y) ");
  // Tanh form with a wrong cubic coefficient.
  expect_unfused(R"(
    hx = Mul(x, half)
    p = Pow(x, three)
    pc = Mul(p, bad_c2)
    inner = Add(x, pc)
    z = Mul(inner, c1)
    th = Tanh(z)
    t = Add(th, one)
    y = Mul(hx, t))");
  // Tanh form with a square instead of a cube.
  expect_unfused(R"(
    hx = Mul(x, half)
    p = Pow(x, two)
    pc = Mul(p, c2)
    inner = Add(x, pc)
    z = Mul(inner, c1)
    th = Tanh(z)
    t = Add(th, one)
    y = Mul(hx, t))");
}

TEST(FuseGelu, ConstantsAreCheckedWithinRelativeTolerance) {
  const std::string tail = R"(
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x, t)
    y = Mul(m, half))";
  // 1.4142 is √2 within 1e-5 relative: fused (the result differs by that much).
  Passed close = run_pass("c = Constant<value_float = 1.4142>()\n u = Div(x, c)" + tail);
  EXPECT_EQ(count_ops(close.after, "Gelu"), 1);
  EXPECT_TRUE(graphs_equivalent(close.before, close.after, {1, 2, 5}, 1e-4, 1e-5));
  // 1.414 is off by 1.5e-4 relative: not √2.
  Passed off = run_pass("c = Constant<value_float = 1.414>()\n u = Div(x, c)" + tail);
  EXPECT_EQ(count_ops(off.after, "Gelu"), 0);
}

TEST(FuseGelu, ShapeGrowingConstantStaysUnfused) {
  // 0.5 as a [1, 1, 1] constant on x [N, 6] broadcasts the result to rank 3: not a Gelu of x.
  Passed p = run_pass(R"(
    u = Div(x, sqrt2)
    e = Erf(u)
    t = Add(e, one)
    m = Mul(x, t)
    y = Mul(m, half3))",
                      "g (float[N, 6] x) => (float[1, N, 6] y) ");
  EXPECT_EQ(count_ops(p.after, "Gelu"), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

}  // namespace
}  // namespace kiln::compiler
