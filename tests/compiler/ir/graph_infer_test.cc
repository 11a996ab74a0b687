// Shape folding across whole subgraphs (compiler/ir/graph_infer.cc with the shape, gather and
// layout families): the Shape → Gather → Unsqueeze → Concat → Reshape chains that torch
// exporters write become symbolic constants, folded graphs compute what unfolded ones do, and no
// shape computation is left in the exported models under tests/models/exported.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "tests/support/ir_harness.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using ir::DimExpr;
using kiln::testing::C;
using kiln::testing::count_ops;
using kiln::testing::expect_error;
using kiln::testing::graphs_equivalent;
using kiln::testing::imp;
using kiln::testing::import_loose;
using kiln::testing::ints_of;
using kiln::testing::iota;
using kiln::testing::kOpset17Head;
using kiln::testing::opts_for;
using kiln::testing::run;
using kiln::testing::S;
using kiln::testing::shape_of;
using kiln::testing::T;
using kiln::testing::tensors_close;

// The nodes of `g` that compute shapes (none should survive folding).
int shape_nodes(const ir::Graph& g) {
  int n = 0;
  for (const char* op : {"Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice",
                         "ConstantOfShape", "Range", "Equal", "Where", "Cast", "Mul", "Add"})
    n += count_ops(g, op);
  return n;
}

// Both imports of `text` (folded and not) must compute the same outputs at several sizes.
void expect_fold_equivalent(const std::string& text) {
  ir::Graph folded = imp(text, true);
  ImportOptions opts = opts_for(text);
  opts.fold = false;
  Result<ir::Graph> plain = import_loose(kOpset17Head + text, opts);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_LT(folded.nodes.size(), plain->nodes.size());
  EXPECT_TRUE(graphs_equivalent(*plain, folded, {1, 2, 5, 17}));
}

const std::string kTorchReshape = R"(g (float[2, N, 64] x) => (float y) {
      sh = Shape(x)
      i1 = Constant<value_int = 1>()
      n = Gather(sh, i1)
      ax = Constant<value_ints = [0]>()
      nu = Unsqueeze(n, ax)
      two = Constant<value_ints = [2]>()
      rest = Constant<value_ints = [4, 16]>()
      t = Concat<axis = 0>(two, nu, rest)
      y = Reshape(x, t) })";

TEST(ShapeFolding, TorchStyleReshapeTarget) {
  ir::Graph g = imp(kTorchReshape);
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{C(2), S, C(4), C(16)}));
  EXPECT_EQ(ints_of(g, "t"), "[2, S, 4, 16]");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "Reshape");
  EXPECT_EQ(shape_nodes(g), 0);
  // The target is now a symbolic constant: no producer, evaluated at each size.
  const ir::Value& t = g.values[g.find_value("t")];
  EXPECT_EQ(t.producer, -1);
  EXPECT_FALSE(t.constant.has_value());
  for (int64_t s : {1, 3}) {
    const RefTensor x = iota({2, s, 64});
    auto out = run(g, s, {{"x", x}});
    EXPECT_TRUE(tensors_close(out["y"], iota({2, s, 4, 16}), 0, 0, fmt::format("S={}", s)));
  }
}

TEST(ShapeFolding, FoldedEqualsUnfolded) {
  expect_fold_equivalent(kTorchReshape);
  // Heads split and merged back: [S, 8] → [S, 2, 4] → transpose → [S, 8] with -1.
  expect_fold_equivalent(R"(g (float[N, 8] x) => (float y) {
      sh = Shape(x)
      z = Constant<value_ints = [0]>()
      o = Constant<value_ints = [1]>()
      n = Slice(sh, z, o)
      hd = Constant<value_ints = [2, 4]>()
      t = Concat<axis = 0>(n, hd)
      r = Reshape(x, t)
      p = Transpose<perm = [0, 2, 1]>(r)
      m1 = Constant<value_ints = [-1]>()
      t2 = Concat<axis = 0>(n, m1)
      y = Reshape(p, t2) })");
}

TEST(ShapeFolding, RangeOverTheSizeStaysANode) {
  ir::Graph g = imp(R"(g (float[2, N] x) => (int64 y) {
      sh = Shape(x)
      i1 = Constant<value_int = 1>()
      n = Gather(sh, i1)
      z = Constant<value_int = 0>()
      o = Constant<value_int = 1>()
      y = Range(z, n, o) })");
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S}));
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "Range");
  auto out = run(g, 5, {{"x", iota({2, 5})}});
  EXPECT_TRUE(tensors_close(out["y"], T({5}, {0, 1, 2, 3, 4}, DType::kI64), 0, 0, "y"));
}

TEST(ShapeFolding, AllConstantChainBecomesData) {
  // Everything below depends only on the weight w: it folds to one constant tensor, and the
  // only node left is the one that reads the input.
  ir::Graph g = imp(R"(g (float[N, 6] x) => (float y) <float[2, 3] w = {1, 2, 3, 4, 5, 6}> {
      sh = Shape(w)
      two = Constant<value_int = 0>()
      rows = Gather(sh, two)
      ax = Constant<value_ints = [0]>()
      r1 = Unsqueeze(rows, ax)
      m1 = Constant<value_ints = [-1]>()
      t = Concat<axis = 0>(r1, m1)
      w2 = Reshape(w, t)
      wt = Transpose(w2)
      flat = Constant<value_ints = [6]>()
      wf = Reshape(wt, flat)
      y = Add(x, wf) })");
  EXPECT_EQ(g.nodes.size(), 1u);
  const ir::Value& wf = g.values[g.find_value("wf")];
  ASSERT_TRUE(wf.constant.has_value());
  EXPECT_EQ(wf.constant->dims, (std::vector<int64_t>{6}));
  auto out = run(g, 1, {{"x", iota({1, 6})}});
  // wf = w transposed and flattened: [1, 4, 2, 5, 3, 6].
  EXPECT_TRUE(tensors_close(out["y"], T({1, 6}, {1, 5, 4, 8, 7, 11}), 0, 0, "y"));
}

TEST(ShapeFolding, WhereEqualMinusOneExpandTarget) {
  // torch's expand(-1, ...) export: -1 entries of the target are replaced by ones before Expand.
  const std::string text = R"(g (float[N, 1] x) => (float y) {
      sh = Shape(x)
      z = Constant<value_ints = [0]>()
      o = Constant<value_ints = [1]>()
      n = Slice(sh, z, o)
      four = Constant<value_ints = [4]>()
      t = Concat<axis = 0>(n, four)
      m1 = Constant<value_int = -1>()
      eq = Equal(t, m1)
      tsh = Shape(t)
      ones = ConstantOfShape<value = int64[1] {1}>(tsh)
      w = Where(eq, ones, t)
      y = Expand(x, w) })";
  ir::Graph g = imp(text);
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S, C(4)}));
  EXPECT_EQ(ints_of(g, "w"), "[S, 4]");
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, "Expand");
  expect_fold_equivalent(text);
}

TEST(ShapeFolding, SizeArithmeticThroughCastAndMul) {
  // Exporters cast sizes (int64 ↔ int32) and multiply them (heads · head_dim); all of it folds.
  const std::string text = R"(g (float[N, 2, 4] x) => (float y) {
      sh = Shape(x)
      i0 = Constant<value_int = 0>()
      n = Gather(sh, i0)
      i1 = Constant<value_int = 1>()
      h = Gather(sh, i1)
      i2 = Constant<value_int = 2>()
      d = Gather(sh, i2)
      hd = Mul(h, d)
      n32 = Cast<to = 6>(n)
      ni = Cast<to = 7>(n32)
      ax = Constant<value_ints = [0]>()
      a = Unsqueeze(ni, ax)
      b = Unsqueeze(hd, ax)
      t = Concat<axis = 0>(a, b)
      y = Reshape(x, t) })";
  ir::Graph g = imp(text);
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S, C(8)}));
  EXPECT_EQ(g.nodes.size(), 1u);
  expect_fold_equivalent(text);
}

TEST(ShapeFolding, TargetsThatDependOnDataAreRefused) {
  // Half of the target comes from an input tensor's values, so it is not known at compile time.
  expect_error(R"(g (float[N, 4] x, int64[1] k) => (float y) {
      sh = Shape(x)
      z = Constant<value_ints = [0]>()
      o = Constant<value_ints = [1]>()
      n = Slice(sh, z, o)
      t = Concat<axis = 0>(n, k)
      y = Reshape(x, t) })",
               {"node 'Reshape", "target shape 't' is computed from run-time data"});
}

// ---- the exported models ----------------------------------------------------------------------

// The folders under tests/models/exported (model.onnx + kiln.yaml).
std::vector<fs::path> exported_models() {
  std::vector<fs::path> dirs;
  for (const std::string& name : kiln::testing::model_names(kiln::testing::exported_models_dir()))
    dirs.push_back(kiln::testing::exported_models_dir() / name);
  return dirs;
}

// Imports an exported model with the options its kiln.yaml gives.
Result<ir::Graph> import_exported(const fs::path& dir, bool fold) {
  KILN_ASSIGN_OR_RETURN(ImportOptions opts, kiln::testing::exported_import_options(dir));
  opts.fold = fold;
  return onnx_import_file(dir / "model.onnx", opts);
}

TEST(ExportedModels, NoShapeComputationSurvivesImport) {
  const std::vector<fs::path> dirs = exported_models();
  EXPECT_GE(dirs.size(), 11u);
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    Result<ir::Graph> g = import_exported(dir, true);
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().to_string();
    if (!g.ok()) continue;
    EXPECT_EQ(count_ops(*g, "Shape"), 0) << name;
    EXPECT_EQ(count_ops(*g, "Size"), 0) << name;
    // A ConstantOfShape may only remain as a real fill of an S-dependent shape (e.g. the default
    // attention mask ones([batch, S])); one of constant shape must have been folded.
    for (const ir::Node& n : g->nodes) {
      if (n.op != "ConstantOfShape") continue;
      const ir::Shape& s = g->values[n.outputs[0]].shape;
      EXPECT_FALSE(
          std::all_of(s.begin(), s.end(), [](const DimExpr& d) { return d.is_constant(); }))
          << name << ": " << n.name << " " << ir::shape_to_string(s);
    }
  }
}

TEST(ExportedModels, FoldedEqualsUnfolded) {
  for (const fs::path& dir : exported_models()) {
    const std::string name = dir.filename().string();
    Result<ir::Graph> folded = import_exported(dir, true);
    Result<ir::Graph> plain = import_exported(dir, false);
    EXPECT_TRUE(folded.ok()) << name << ": " << folded.status().to_string();
    EXPECT_TRUE(plain.ok()) << name << " (fold = false): " << plain.status().to_string();
    if (!folded.ok() || !plain.ok()) continue;
    EXPECT_TRUE(graphs_equivalent(*plain, *folded, {1, 3, 8}, 1e-9, 1e-9)) << name;
  }
}

}  // namespace
}  // namespace kiln::compiler
