// position_tables: values computed from position_ids alone become Gather(table, positions) of a
// constant holding every position's row, and everything behind them goes; values that are not a
// function of their own token's position (the step's size as data, a sum over tokens), graph
// outputs and run-time data stay. Every rewritten graph computes what it did at positions below
// the table's length. The Llama KV exports' rotary tables fold through the whole front end
// (tests/compiler/passes/kv_paged_test.cc, DecodeLayerRunsInAtMostSevenLaunches...).
#include "compiler/passes/position_tables.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

constexpr int64_t kPositions = 24;  // the tables' rows; the checks draw positions below it

struct Folded {
  ir::Graph before, after;
  int tables = -1;
};

Folded fold(const std::string& text) {
  Folded f;
  ImportOptions opts{"N", {}};
  opts.max_size = 16;
  f.before = import_text_ok(text, opts);
  f.after = f.before;
  Result<int> made = fold_position_tables(f.after, kPositions);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (made.ok()) f.tables = *made;
  return f;
}

// Gathers whose data is a constant (the tables' lookups).
int table_lookups(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes)
    n += node.op == "Gather" && g.values[node.inputs[0]].constant.has_value();
  return n;
}

// A Llama-style rotary from the step's positions: angles by a MatMul with the inverse
// frequencies, the halves concatenated, Cos and Sin scaled; x rotated with them (elementwise
// here, for the reference).
constexpr const char* kRotary = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, N, 4] x, int64[1, N] position_ids) => (float[1, N, 4] y) {
  ax = Constant<value = int64[1] {1}>()
  p3 = Unsqueeze(position_ids, ax)
  posf = Cast<to = 1>(p3)
  inv = Constant<value = float[1, 2, 1] {1.0, 0.01}>()
  freqs = MatMul(inv, posf)
  ft = Transpose<perm = [0, 2, 1]>(freqs)
  emb = Concat<axis = -1>(ft, ft)
  c0 = Cos(emb)
  s0 = Sin(emb)
  scale = Constant<value = float {0.5}>()
  c = Mul(c0, scale)
  s = Mul(s0, scale)
  xc = Mul(x, c)
  xs = Mul(x, s)
  y = Add(xc, xs)
})";

TEST(PositionTables, RotaryTablesBecomeLookups) {
  const Folded f = fold(kRotary);
  EXPECT_EQ(f.tables, 2);  // cos and sin
  EXPECT_EQ(table_lookups(f.after), 2);
  for (const char* gone : {"MatMul", "Cos", "Sin", "Concat", "Transpose", "Cast"})
    EXPECT_EQ(count_ops(f.after, gone), 0) << gone;
  // Positions drawn in [0, kPositions), in any order, at several step sizes. The tables hold f32
  // values; the reference computes the unfolded graph in float64.
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 2, 7, 16}, 1e-6, 1e-7, 11, kPositions));
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {5}, 1e-6, 1e-7, 12, kPositions));
}

TEST(PositionTables, ValuesOfOtherTokensOrOfTheStepSizeStay) {
  // rel: positions divided by the step's size (T as data); run: a running sum over the tokens;
  // z: a graph output; the lookup of a run-time id. These stay computed; the per-token values
  // they read (posf, read by the Div and the CumSum, and near) become lookups. shf (positions
  // plus T) passes the op list but not the check at other step sizes: it stays too.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, N] x, int64[1, N] position_ids, int64[1, N] ids) => (float[1, N] y, float[1, N] z) {
  posf = Cast<to = 1>(position_ids)
  shape = Shape(x)
  one = Constant<value = int64[1] {1}>()
  n = Gather<axis = 0>(shape, one)
  nf = Cast<to = 1>(n)
  rel = Div(posf, nf)
  axis = Constant<value = int64 {1}>()
  run = CumSum(posf, axis)
  k = Constant<value = float {0.25}>()
  near = Mul(posf, k)
  emb = Constant<value = float[4] {1, 2, 3, 4}>()
  e = Gather<axis = 0>(emb, ids)
  sh = Add(position_ids, n)
  shf = Cast<to = 1>(sh)
  a0 = Add(x, shf)
  a = Add(a0, rel)
  b = Add(a, run)
  c = Add(b, near)
  y = Add(c, e)
  z = Identity(near)
})");
  EXPECT_EQ(f.tables, 2);
  EXPECT_EQ(count_ops(f.after, "Div"), 1);
  EXPECT_EQ(count_ops(f.after, "CumSum"), 1);
  EXPECT_EQ(count_ops(f.after, "Identity"), 1);
  EXPECT_EQ(count_ops(f.after, "Cast"), 2);  // nf and shf
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 3, 9}, 1e-9, 1e-9, 11, 4));
}

TEST(PositionTables, OnlyGraphsWithPositionIds) {
  // Positions under another name (or none at all) are not the runtime's: nothing folds.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, N] x, int64[1, N] positions) => (float[1, N] y) {
  posf = Cast<to = 1>(positions)
  c = Cos(posf)
  y = Mul(x, c)
})");
  EXPECT_EQ(f.tables, 0);
  EXPECT_EQ(count_ops(f.after, "Cos"), 1);
}

TEST(PositionTables, TokenAxisAnywhereAfterLeadingOnes) {
  // [T, 2] and [1, 1, T, 2] values: gathered as [T, 2] and viewed back in the value's shape.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 1, N, 2] x, int64[1, N] position_ids) => (float[1, 1, N, 2] y, float[N, 2] z) {
  sq = Constant<value = int64[1] {0}>()
  p = Squeeze(position_ids, sq)
  u = Constant<value = int64[1] {1}>()
  p2 = Unsqueeze(p, u)
  pf = Cast<to = 1>(p2)
  two = Constant<value = float[1, 2] {0.5, -1.5}>()
  w = Mul(pf, two)
  s = Sin(w)
  ax = Constant<value = int64[2] {0, 1}>()
  s4 = Unsqueeze(s, ax)
  y = Mul(x, s4)
  xr = Constant<value = int64[2] {-1, 2}>()
  x2 = Reshape(x, xr)
  z = Add(x2, w)
})");
  EXPECT_EQ(f.tables, 2);  // s4 [1, 1, T, 2] and w [T, 2]
  EXPECT_EQ(count_ops(f.after, "Sin"), 0);
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 4, 11}, 1e-6, 1e-7, 11, kPositions));
}

}  // namespace
}  // namespace kiln::compiler
