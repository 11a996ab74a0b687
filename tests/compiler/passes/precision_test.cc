// precision_lower: f32 graphs become f16/bf16 inside, with f32 inputs and outputs kept and
// computations from positions (rotary tables) kept in f32 until they meet activations.
#include "compiler/passes/precision.h"

#include <gtest/gtest.h>

#include "compiler/frontend/front_end.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using testing::count_ops;
using testing::graphs_equivalent;
using testing::import_text_ok;

ImportOptions opts() {
  ImportOptions o{"S", {}};
  o.max_size = 64;
  return o;
}

constexpr const char* kMlp = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[S, 8] x) => (float[S, 4] y) <float[8, 4] w = {0.5, -0.25, 1, 2, 0.125, 0.75, -1, 0.5,
   0.5, -0.25, 1, 2, 0.125, 0.75, -1, 0.5, 0.5, -0.25, 1, 2, 0.125, 0.75, -1, 0.5,
   0.5, -0.25, 1, 2, 0.125, 0.75, -1, 0.5}, float[4] b = {0.1, 0.2, 0.3, 0.4}> {
  h = MatMul(x, w)
  hb = Add(h, b)
  y = Relu(hb)
})";

DType dtype_of(const ir::Graph& g, const std::string& name) {
  return g.values[g.find_value(name)].dtype;
}

TEST(Precision, Fp32AndTf32ChangeNothing) {
  for (Precision p : {Precision::kF32, Precision::kTF32}) {
    ir::Graph g = import_text_ok(kMlp, opts());
    const std::string before = ir::graph_to_text(g);
    ASSERT_TRUE(precision_lower(g, p).ok());
    EXPECT_EQ(ir::graph_to_text(g), before);
  }
}

TEST(Precision, Fp16StoresWeightsAndActivationsKeepsIo) {
  const ir::Graph original = import_text_ok(kMlp, opts());
  ir::Graph g = original;
  ASSERT_TRUE(precision_lower(g, Precision::kF16).ok());
  EXPECT_EQ(dtype_of(g, "x"), DType::kF32);
  EXPECT_EQ(dtype_of(g, "y"), DType::kF32);
  EXPECT_EQ(dtype_of(g, "w"), DType::kF16);
  EXPECT_EQ(dtype_of(g, "b"), DType::kF16);
  EXPECT_EQ(dtype_of(g, "h"), DType::kF16);
  EXPECT_EQ(count_ops(g, "Cast"), 2);  // one in, one out
  EXPECT_EQ(g.values[g.find_value("w")].constant->bytes.size(), 8u * 4u * 2u);
  EXPECT_TRUE(graphs_equivalent(original, g, {1, 3, 17}, 1e-2, 1e-3));
}

TEST(Precision, Bf16IsWithinBf16Tolerance) {
  const ir::Graph original = import_text_ok(kMlp, opts());
  ir::Graph g = original;
  ASSERT_TRUE(precision_lower(g, Precision::kBF16).ok());
  EXPECT_EQ(dtype_of(g, "h"), DType::kBF16);
  EXPECT_TRUE(graphs_equivalent(original, g, {1, 5}, 3e-2, 1e-2));
}

// Positions → float → scaled → Cos stays f32; it is cast once where it meets an activation.
TEST(Precision, PositionDerivedFloatsStayF32) {
  constexpr const char* kRope = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (float[S, 4] x) => (float[S, 4] y) <float[1, 4] freq = {1, 0.5, 0.25, 0.125}, int64 zero = {0},
                                      int64 one = {1}> {
  shape = Shape(x)
  n = Gather<axis = 0>(shape, zero)
  pos = Range(zero, n, one)
  posf = Cast<to = 1>(pos)
  pos2 = Unsqueeze(posf, one)
  ang = MatMul(pos2, freq)
  c = Cos(ang)
  y = Mul(x, c)
})";
  ImportOptions o = opts();
  const ir::Graph original = import_text_ok(kRope, o);
  ir::Graph g = original;
  ASSERT_TRUE(precision_lower(g, Precision::kBF16).ok());
  EXPECT_EQ(dtype_of(g, "c"), DType::kF32);
  EXPECT_EQ(dtype_of(g, "ang"), DType::kF32);
  EXPECT_EQ(dtype_of(g, "freq"), DType::kF32);
  EXPECT_EQ(count_ops(g, "Cast"), 4);  // posf, c → bf16, x in, y out
  EXPECT_TRUE(graphs_equivalent(original, g, {1, 7, 60}, 3e-2, 1e-2));
}

// An embedding lookup (Gather from a float table) is model data: it takes the compute dtype even
// though its only run-time input is integer ids.
TEST(Precision, EmbeddingLookupsAreActivations) {
  constexpr const char* kEmbed = R"(
<ir_version: 8, opset_import: ["" : 17]>
g (int64[S] ids) => (float[S, 2] y) <float[3, 2] table = {1, 2, 3, 4, 5, 6}> {
  e = Gather<axis = 0>(table, ids)
  y = Relu(e)
})";
  const ir::Graph original = import_text_ok(kEmbed, opts());
  ir::Graph g = original;
  ASSERT_TRUE(precision_lower(g, Precision::kF16).ok());
  EXPECT_EQ(dtype_of(g, "table"), DType::kF16);
  EXPECT_EQ(dtype_of(g, "e"), DType::kF16);
  EXPECT_EQ(dtype_of(g, "y"), DType::kF32);
  EXPECT_TRUE(graphs_equivalent(original, g, {1, 4}, 1e-3, 1e-3, 11, 3));
}

// Every exported model, fused by the front end, stays valid and close to fp32 in fp16 and bf16.
TEST(Precision, ExportedModelsStayEquivalent) {
  const auto root = testing::exported_models_dir();
  for (const std::string& name : testing::model_names(root)) {
    SCOPED_TRACE(name);
    auto o = testing::exported_import_options(root / name);
    ASSERT_TRUE(o.ok()) << o.status().to_string();
    auto g = onnx_import_file(root / name / "model.onnx", *o);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(front_end_passes(*g, o->max_size).ok());
    for (auto [p, rtol, atol] : {std::tuple{Precision::kF16, 1e-2, 1e-3},
                                 std::tuple{Precision::kBF16, 3e-2, 1e-2}}) {
      ir::Graph lowered = *g;
      ASSERT_TRUE(precision_lower(lowered, p).ok()) << precision_name(p);
      // Activations really moved: most float node outputs are in the compute dtype.
      const DType cd = p == Precision::kF16 ? DType::kF16 : DType::kBF16;
      int floats = 0, compute = 0;
      for (const ir::Node& n : lowered.nodes)
        for (int o : n.outputs) {
          const DType t = lowered.values[o].dtype;
          floats += t == DType::kF32 || t == cd;
          compute += t == cd;
        }
      EXPECT_GT(compute * 3, floats * 2) << precision_name(p) << ": " << compute << " of " << floats;
      for (int v : lowered.inputs)
        EXPECT_EQ(lowered.values[v].dtype, g->values[g->find_value(lowered.values[v].name)].dtype);
      for (int v : lowered.outputs)
        EXPECT_EQ(lowered.values[v].dtype, g->values[g->find_value(lowered.values[v].name)].dtype);
      EXPECT_TRUE(graphs_equivalent(*g, lowered, {3}, rtol, atol)) << precision_name(p);
    }
  }
}

}  // namespace
}  // namespace kiln::compiler
