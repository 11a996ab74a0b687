// padding_taint: which ops make real rows read padding, how the taint flows to outputs, and
// which run-time indices are proved to stay within the real rows.
#include "compiler/passes/padding_taint.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/size_tables.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kParams = R"(<int64 izero = {0}, int64 ione = {1}, int64 itwo = {2},
    int64[1] ax0 = {0}, int64[1] ax1 = {1}>)";

ir::Graph import(const std::string& sig, const std::string& body) {
  ImportOptions opts{"N", {}};
  opts.max_size = 16;
  return kiln::testing::import_text_ok(kHead + "g " + sig + kParams + "{" + body + "}", opts);
}

std::string check_message(const ir::Graph& g) {
  Status st = padding_taint_check(g);
  return st.ok() ? std::string() : st.message();
}

TEST(PaddingTaint, RunTimeIndicesIntoTheSizeAxisTaintTheOutputAndTheMessageNamesThePath) {
  ir::Graph g = import("(float[N, 4] x, int64[3] i) => (float[3, 4] y)", R"(
    r = Gather(x, i)
    e = Exp(r)
    y = Add(e, e))");
  const std::string msg = check_message(g);
  EXPECT_NE(msg.find("output 'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run-time indices 'i'"), std::string::npos) << msg;
  // Source first, then each node the taint went through.
  const size_t gather = msg.find("'Gather_0' → "), exp = msg.find("'Exp_1' → "),
               add = msg.find("'Add_2' → output");
  ASSERT_NE(gather, std::string::npos) << msg;
  ASSERT_NE(exp, std::string::npos) << msg;
  ASSERT_NE(add, std::string::npos) << msg;
  EXPECT_LT(gather, exp);
  EXPECT_LT(exp, add);
}

TEST(PaddingTaint, IndicesFromRangeOfTheSizeReadOnlyRealRows) {
  // position ids = Range(0, S) broadcast to [2, S]: real element (b, j) is j < s.
  ir::Graph g = import("(float[N, 4] x) => (float[2, N, 4] y)", R"(
    itwo1 = Unsqueeze(itwo, ax0)
    n1 = Shape<start = 0, end = 1>(x)
    ns = Squeeze(n1, ax0)
    r = Range(izero, ns, ione)
    ru = Unsqueeze(r, ax0)
    sh = Concat<axis = 0>(itwo1, n1)
    rb = Expand(ru, sh)
    y = Gather(x, rb))");
  EXPECT_EQ(check_message(g), "");
  EXPECT_TRUE(indices_within_real(g, g.nodes.back().inputs[1], g.values[g.inputs[0]].shape[0]));
}

TEST(PaddingTaint, PositionTablesReadOnlyRealRows) {
  // The Range above precomputed by fold_size_tables: a Slice of the first S rows of a constant
  // table. Still proved, as the Range was (a regression: the table made the padded run fail).
  const std::string body = R"(
    itwo1 = Unsqueeze(itwo, ax0)
    n1 = Shape<start = 0, end = 1>(x)
    ns = Squeeze(n1, ax0)
    ns1 = Add(ns, ione)
    r = Range({START}, {END}, ione)
    ru = Unsqueeze(r, ax0)
    sh = Concat<axis = 0>(itwo1, n1)
    rb = Expand(ru, sh)
    y = Gather(x, rb))";
  auto with = [&](const std::string& start, const std::string& end) {
    std::string b = body;
    b.replace(b.find("{START}"), 7, start);
    b.replace(b.find("{END}"), 5, end);
    return b;
  };
  ir::Graph g = import("(float[N, 4] x) => (float[2, N, 4] y)", with("izero", "ns"));
  Result<int> made = fold_size_tables(g, 16);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_GE(*made, 1);
  bool sliced = false;
  for (const ir::Node& n : g.nodes) sliced |= n.op == "Slice";
  ASSERT_TRUE(sliced) << "expected the positions as a Slice of a table";
  EXPECT_EQ(check_message(g), "");
  // A table whose row j holds j + 1 (Range(1, S + 1)) reads past the real rows: not proved.
  ir::Graph shifted = import("(float[N, 4] x) => (float[2, N, 4] y)", with("ione", "ns1"));
  ASSERT_TRUE(fold_size_tables(shifted, 16).ok());
  EXPECT_NE(check_message(shifted).find("run-time indices"), std::string::npos)
      << check_message(shifted);
}

TEST(PaddingTaint, ARangeShiftedByOneIsNotProved) {
  // Range(1, S + 1): real row j reads row j + 1, the last real row reads padding.
  ir::Graph g = import("(float[N, 4] x) => (float[N, 4] y)", R"(
    n1 = Shape<start = 0, end = 1>(x)
    ns = Squeeze(n1, ax0)
    ns1 = Add(ns, ione)
    r = Range(ione, ns1, ione)
    y = Gather(x, r))");
  EXPECT_NE(check_message(g).find("run-time indices"), std::string::npos) << check_message(g);
}

TEST(PaddingTaint, ConstantAxesAndConstantIndicesAreClean) {
  // Gather along a constant axis with run-time indices (an embedding lookup of token ids).
  ir::Graph g = import("(float[8, 4] table, int64[N] ids) => (float[N, 4] y)", R"(
    y = Gather(table, ids))");
  EXPECT_EQ(check_message(g), "");
}

TEST(PaddingTaint, CumSumForwardIsCleanReverseIsASource) {
  ir::Graph fwd = import("(float[2, N] m) => (float[2, N] y)", R"(
    y = CumSum(m, ione))");
  EXPECT_EQ(check_message(fwd), "");
  ir::Graph rev = import("(float[2, N] m) => (float[2, N] y)", R"(
    y = CumSum<reverse = 1>(m, ione))");
  EXPECT_NE(check_message(rev).find("reverse CumSum"), std::string::npos) << check_message(rev);
}

TEST(PaddingTaint, GatherNdIntoTheSizeAxisIsASource) {
  ir::Graph g = import("(float[2, N] m, int64[3, 2] i) => (float[3] y)", R"(
    y = GatherND(m, i))");
  EXPECT_NE(check_message(g).find("GatherND"), std::string::npos) << check_message(g);
}

}  // namespace
}  // namespace kiln::compiler
