// fuse_rotary: q·cos + rotate_half(q)·sin (Slice or Split, Neg, Concat) becomes kiln.Rotary
// with a full-width table, and a rotary of x[..., :R] concatenated with x[..., R:] one with
// rotary_dim R; wrong halves, signs or tables stay unfused.
#include "compiler/passes/fuse_rotary.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kSig =
    "g (float[2, 3, N, 8] q, float[1, 1, N, 8] cos, float[1, 1, N, 8] sin) => "
    "(float[2, 3, N, 8] y) ";
const std::string kParams = R"(<int64[1] zero = {0}, int64[1] four = {4}, int64[1] three = {3},
    int64[1] big = {9223372036854775807}, int64[1] last = {-1}, int64[1] ax3 = {3},
    int64[1] one = {1}, int64[1] ax2 = {2}, float mone = {-1.0}, int64[2] halves = {4, 4},
    int64[1] two = {2}, int64[1] eight = {8}>)";

struct Passed {
  ir::Graph before, after;
};

Passed run_pass(const std::string& body, const std::string& sig = kSig) {
  Passed p;
  p.before = import_text_ok(kHead + sig + kParams + "{" + body + "}", ImportOptions{"N", {}});
  p.after = p.before;
  Status st = fuse_rotary(p.after);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

// One kiln.Rotary over q with the cos/sin tables, rotary_dim `rotary_dim` (0: the whole head).
void expect_rotary(const std::string& body, const std::string& sig = kSig, int64_t rotary_dim = 0) {
  Passed p = run_pass(body, sig);
  ASSERT_EQ(count_ops(p.after, "Rotary", "kiln"), 1) << body;
  ASSERT_EQ(p.after.nodes.size(), 1u) << body;
  const ir::Node& n = p.after.nodes[0];
  EXPECT_EQ(p.after.values[n.inputs[0]].name, "q");
  EXPECT_EQ(p.after.values[n.inputs[1]].name, "cos");
  EXPECT_EQ(p.after.values[n.inputs[2]].name, "sin");
  EXPECT_EQ(n.attr_int("interleaved", -1), 0);
  EXPECT_EQ(n.attr_int("rotary_dim", -1), rotary_dim);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

void expect_unfused(const std::string& body, const std::string& sig = kSig) {
  Passed p = run_pass(body, sig);
  EXPECT_EQ(count_ops(p.after, "Rotary", "kiln"), 0) << body;
  EXPECT_EQ(p.after.nodes.size(), p.before.nodes.size()) << body;
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

TEST(FuseRotary, SliceNegConcatHuggingFaceForm) {
  expect_rotary(R"(
    x1 = Slice(q, zero, four, last, one)
    x2 = Slice(q, four, big, last, one)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))");
}

TEST(FuseRotary, OperandOrdersPositiveAxisNoSteps) {
  expect_rotary(R"(
    x1 = Slice(q, zero, four, ax3)
    x2 = Slice(q, four, big, ax3)
    n2 = Neg(x2)
    rot = Concat<axis = 3>(n2, x1)
    a = Mul(cos, q)
    b = Mul(sin, rot)
    y = Add(b, a))");
}

TEST(FuseRotary, SplitAndMulByMinusOne) {
  expect_rotary(R"(
    x1, x2 = Split<axis = -1>(q, halves)
    n2 = Mul(x2, mone)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))");
}

TEST(FuseRotary, LowRankTableAndTwoRotaries) {
  // cos/sin [N, 8] broadcast over batch and heads; q and k share the tables.
  Passed p = run_pass(R"(
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b)
    k1 = Slice(k, zero, four, last)
    k2 = Slice(k, four, big, last)
    nk2 = Neg(k2)
    rk = Concat<axis = -1>(nk2, k1)
    ka = Mul(k, cos)
    kb = Mul(rk, sin)
    yk = Add(ka, kb))",
                      "g (float[2, 3, N, 8] q, float[2, 1, N, 8] k, float[N, 8] cos, "
                      "float[N, 8] sin) => (float[2, 3, N, 8] y, float[2, 1, N, 8] yk) ");
  EXPECT_EQ(count_ops(p.after, "Rotary", "kiln"), 2);
  EXPECT_EQ(p.after.nodes.size(), 2u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

// GPT-NeoX: the rotary covers x[..., :4] of an 8-wide head (tables 4 wide); the rest passes
// through a Concat. One kiln.Rotary with rotary_dim 4 over the whole of q.
TEST(FuseRotary, PartialRotaryConcatenatedWithThePassThrough) {
  expect_rotary(R"(
    qr = Slice(q, zero, four, last)
    qp = Slice(q, four, big, last)
    x1 = Slice(qr, zero, two, last)
    x2 = Slice(qr, two, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(qr, cos)
    b = Mul(rot, sin)
    r = Add(a, b)
    y = Concat<axis = -1>(r, qp))",
                "g (float[2, 3, N, 8] q, float[1, 1, N, 4] cos, float[1, 1, N, 4] sin) => "
                "(float[2, 3, N, 8] y) ",
                4);
}

// Phi-3's form when the rotary covers the head: the concatenation keeps an empty x[..., D:].
TEST(FuseRotary, WholeHeadRotaryConcatenatedWithAnEmptyPassThrough) {
  expect_rotary(R"(
    qp = Slice(q, eight, big, last)
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    r = Add(a, b)
    y = Concat<axis = -1>(r, qp))",
                kSig, 8);
}

TEST(FuseRotary, NearMissesStayUnfused) {
  // Halves swapped: Concat(-x1, x2) is not rotate_half.
  expect_unfused(R"(
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    n1 = Neg(x1)
    rot = Concat<axis = -1>(n1, x2)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))");
  // No negation.
  expect_unfused(R"(
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    rot = Concat<axis = -1>(x2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))");
  // Split point 3 instead of D/2.
  expect_unfused(R"(
    x1 = Slice(q, zero, three, last)
    x2 = Slice(q, three, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))");
  // The cos product reads another tensor than the rotated one.
  expect_unfused(R"(
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q2, cos)
    b = Mul(rot, sin)
    y = Add(a, b))",
                 "g (float[2, 3, N, 8] q, float[2, 3, N, 8] q2, float[1, 1, N, 8] cos, "
                 "float[1, 1, N, 8] sin) => (float[2, 3, N, 8] y) ");
  // A table that is not full width (last dim 1 broadcasts): not a rotary table.
  expect_unfused(R"(
    x1 = Slice(q, zero, four, last)
    x2 = Slice(q, four, big, last)
    n2 = Neg(x2)
    rot = Concat<axis = -1>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))",
                 "g (float[2, 3, N, 8] q, float[1, 1, N, 1] cos, float[1, 1, N, 1] sin) => "
                 "(float[2, 3, N, 8] y) ");
  // Slicing along the sequence axis, not the last axis.
  expect_unfused(R"(
    x1 = Slice(q, zero, one, ax2)
    x2 = Slice(q, one, big, ax2)
    n2 = Neg(x2)
    rot = Concat<axis = 2>(n2, x1)
    a = Mul(q, cos)
    b = Mul(rot, sin)
    y = Add(a, b))",
                 "g (float[N, 3, 2, 8] q, float[1, 1, 2, 8] cos, float[1, 1, 2, 8] sin) => "
                 "(float[N, 3, 2, 8] y) ");
}

}  // namespace
}  // namespace kiln::compiler
