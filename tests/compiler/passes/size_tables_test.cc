// size_tables: values that depend on S alone become Slice(table, 0, S) of a constant computed at
// max_size, and everything behind them goes; values that are not the first rows of their
// max-size form (S as data, a slice counted from the end), graph outputs and run-time data stay.
// Every rewritten graph computes what it did. Over the exported corpus, the position and rotary
// subgraphs of GPT-2, Llama and BERT exports fold.
#include "compiler/passes/size_tables.h"

#include <gtest/gtest.h>

#include <string>

#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;

struct Folded {
  ir::Graph before, after;
  int tables = -1;
};

// The exporters' positions: n = [S] (x's axis 1), ns its scalar, pos = Range(0, S).
constexpr const char* kPositions = R"(  shape = Shape(x)
  one = Constant<value = int64[1] {1}>()
  n = Gather<axis = 0>(shape, one)
  zero = Constant<value = int64 {0}>()
  step = Constant<value = int64 {1}>()
  ns = Squeeze(n)
  pos = Range(zero, ns, step))";

// The graph `text`, its line "POSITIONS" (if any) replaced by kPositions, folded at max_size.
Folded fold(std::string text, int64_t max_size = 16) {
  if (const size_t at = text.find("POSITIONS"); at != std::string::npos)
    text.replace(at, 9, kPositions);
  Folded f;
  ImportOptions opts{"N", {}};
  opts.max_size = max_size;
  f.before = import_text_ok(text, opts);
  f.after = f.before;
  Result<int> made = fold_size_tables(f.after, max_size);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (made.ok()) f.tables = *made;
  return f;
}

// The number of Slices of a constant (the tables' views).
int table_views(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes)
    n += node.op == "Slice" && g.values[node.inputs[0]].constant.has_value();
  return n;
}

// A Llama-style rotary table: positions Range(0, S), angles by a MatMul with the inverse
// frequencies, the two halves concatenated, Cos and Sin; x is rotated with them (elementwise
// here, for the reference).
constexpr const char* kRotary = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, N, 4] x) => (float[1, N, 4] y) {
POSITIONS
  posf = Cast<to = 1>(pos)
  ax = Constant<value = int64[2] {0, 1}>()
  p3 = Unsqueeze(posf, ax)
  inv = Constant<value = float[1, 2, 1] {1.0, 0.01}>()
  freqs = MatMul(inv, p3)
  ft = Transpose<perm = [0, 2, 1]>(freqs)
  emb = Concat<axis = -1>(ft, ft)
  c = Cos(emb)
  s = Sin(emb)
  xc = Mul(x, c)
  xs = Mul(x, s)
  y = Add(xc, xs)
})";

TEST(SizeTables, RotaryTablesFoldIntoViewsOfConstants) {
  const Folded f = fold(kRotary);
  EXPECT_EQ(f.tables, 2);  // cos and sin
  EXPECT_EQ(count_ops(f.after, "Range"), 0);
  EXPECT_EQ(count_ops(f.after, "MatMul"), 0);
  EXPECT_EQ(count_ops(f.after, "Cos"), 0);
  EXPECT_EQ(count_ops(f.after, "Sin"), 0);
  EXPECT_EQ(table_views(f.after), 2);
  // The tables hold f32 values; the reference computes the unfolded graph in float64 (f32
  // rounding of cos and sin: about 1e-7 relative).
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 2, 7, 16}, 1e-6, 1e-7));
}

TEST(SizeTables, PositionEmbeddingsAndBroadcastRowsFold) {
  // GPT-2: wpe rows of Range(0, S), added to a run-time [2, S, 3]; BERT: a constant row of
  // token types sliced to S, expanded over the batch, then looked up.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, N, 3] x) => (float[2, N, 3] y) {
POSITIONS
  wpe = Constant<value = float[20, 3] {0,1,2, 3,4,5, 6,7,8, 9,10,11, 12,13,14, 15,16,17, 18,19,20,
    21,22,23, 24,25,26, 27,28,29, 30,31,32, 33,34,35, 36,37,38, 39,40,41, 42,43,44, 45,46,47,
    48,49,50, 51,52,53, 54,55,56, 57,58,59}>()
  pe = Gather<axis = 0>(wpe, pos)
  buf = Constant<value = int64[1, 20] {0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1}>()
  s0 = Constant<value = int64[1] {0}>()
  ax = Constant<value = int64[1] {1}>()
  tt = Slice(buf, s0, n, ax)
  two = Constant<value = int64[1] {2}>()
  bshape = Concat<axis = 0>(two, n)
  tte = Expand(tt, bshape)
  temb = Constant<value = float[2, 3] {0.5, -1, 2, 7, 8, 9}>()
  te = Gather<axis = 0>(temb, tte)
  a = Add(x, pe)
  y = Add(a, te)
})");
  EXPECT_EQ(f.tables, 2);  // pe, and te as one [1, S, 3] block of its two equal ones
  EXPECT_EQ(count_ops(f.after, "Gather"), 0);
  EXPECT_EQ(count_ops(f.after, "Expand"), 0);
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 3, 16}));
}

TEST(SizeTables, BroadcastBlocksOnlyWhereARunTimeValueKeepsTheShape) {
  // a and b repeat one [1, S, 3] block over the batch; their sum (read by a MatMul) is not a
  // table, and replacing a and b by one block each would shrink it to [1, S, 3]: they stay
  // [2, S, 3], and their [1, S, 3] sources become the tables.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2, N, 3] x, float[3, 2] w) => (float[2, N, 2] y) {
POSITIONS
  posf = Cast<to = 1>(pos)
  ax = Constant<value = int64[2] {0, 2}>()
  p3 = Unsqueeze(posf, ax)
  k = Constant<value = float[1, 1, 3] {1, 2, 3}>()
  row = Mul(p3, k)
  cs = Cos(row)
  two = Constant<value = int64[1] {2}>()
  three = Constant<value = int64[1] {3}>()
  bshape = Concat<axis = 0>(two, n, three)
  a = Expand(row, bshape)
  b = Expand(cs, bshape)
  ab = Add(a, b)
  m = MatMul(ab, w)
  xw = MatMul(x, w)
  y = Add(m, xw)
})");
  EXPECT_EQ(f.tables, 2);  // row and cs
  EXPECT_EQ(count_ops(f.after, "Expand"), 2);
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 4, 16}, 1e-6, 1e-6));
}

TEST(SizeTables, ValuesThatAreNotPrefixesStay) {
  // Positions divided by S (S as data), the last row (a slice from the end), and a table that
  // is a graph output: none is the first rows of its max-size form, or may be replaced.
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[1, N, 1] x) => (float[1, N, 1] y, float[1, 1, 1] z, float[N] w) {
POSITIONS
  posf = Cast<to = 1>(pos)
  nf = Cast<to = 1>(ns)
  rel = Div(posf, nf)
  ax = Constant<value = int64[2] {0, 2}>()
  rel3 = Unsqueeze(rel, ax)
  y = Mul(x, rel3)
  p3 = Unsqueeze(posf, ax)
  last_s = Constant<value = int64[1] {-1}>()
  big = Constant<value = int64[1] {1000}>()
  ax1 = Constant<value = int64[1] {1}>()
  lastrow = Slice(p3, last_s, big, ax1)
  z = Add(lastrow, lastrow)
  w = Identity(posf)
})");
  // posf (read by the Div and the output's Identity) and p3 (read by the slice) are tables; the
  // Div, the slice from the end and the output stay computed at run time.
  EXPECT_EQ(f.tables, 2);
  EXPECT_EQ(count_ops(f.after, "Range"), 0);
  EXPECT_EQ(count_ops(f.after, "Identity"), 1);
  EXPECT_EQ(count_ops(f.after, "Div"), 1);
  EXPECT_TRUE(graphs_equivalent(f.before, f.after, {1, 2, 9, 16}));
}

TEST(SizeTables, RunTimeDataAndConstantShapesStay) {
  const Folded f = fold(R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64[1, N] ids) => (float[1, N, 2] y) {
  emb = Constant<value = float[4, 2] {1, 2, 3, 4, 5, 6, 7, 8}>()
  y = Gather<axis = 0>(emb, ids)
})");
  EXPECT_EQ(f.tables, 0);
  EXPECT_EQ(count_ops(f.after, "Gather"), 1);
}

TEST(SizeTables, ExportedPositionSubgraphsFold) {
  // Through the whole front end, as `kiln compile` runs it.
  struct Case {
    const char* model;
    const char* gone;  // an op of the position subgraph that must not remain
  };
  for (const Case& c : {Case{"gpt2_ts17_sdpa", "Range"}, Case{"llama_ts17_sdpa", "Cos"},
                        Case{"llama_dynamo23", "Sin"}, Case{"bert_ts17_sdpa", "Expand"}}) {
    SCOPED_TRACE(c.model);
    const auto dir = kiln::testing::exported_models_dir() / c.model;
    Result<ImportOptions> opts = kiln::testing::exported_import_options(dir);
    ASSERT_TRUE(opts.ok()) << opts.status().to_string();
    Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", *opts);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(front_end_passes(*g, opts->max_size, nullptr, FrontEndFusion::kAll).ok());
    const ir::Graph before = *g;
    ASSERT_GT(count_ops(before, c.gone), 0);
    Result<int> made = fold_size_tables(*g, opts->max_size);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    EXPECT_GT(*made, 0);
    EXPECT_EQ(count_ops(*g, c.gone), 0);
    EXPECT_TRUE(graphs_equivalent(before, *g, {1, 5, opts->max_size}, 1e-9, 1e-9));
  }
}

}  // namespace
}  // namespace kiln::compiler
