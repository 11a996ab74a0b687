// fuse_gated_mlp: act(x·Wg) · (x·Wu) becomes one kiln.GatedMatMul over the interleaved weight,
// for SiLU (both factor orders), the two GELU forms and Relu, in either operand order of the
// final Mul, and the graph computes what it computed before; near misses stay. Then every
// exported Llama-family model: each layer's MLP is fused.
#include "compiler/passes/fuse_gated_mlp.h"

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

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 20]> )";
const std::string kSig = "g (float[N, 4] x) => (float[N, 3] y) ";
// Two [4, 3] weights and a third for the near misses.
const std::string kParams = R"(<float[4, 3] wg = {0.5, -1, 0.25, 2, -0.5, 1, 0.75, -0.25, 1.5,
    -2, 0.125, 1}, float[4, 3] wu = {1, 0.5, -1, -0.75, 2, 0.25, 0.5, -1.5, 1, 0.25, 1, -0.5},
    float[4, 3] w3 = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, float[3] b = {0.5, -0.5, 1}>)";

struct Passed {
  ir::Graph before, after;
};

Passed run_pass(const std::string& body, const std::string& sig = kSig) {
  Passed p;
  p.before = import_text_ok(kHead + sig + kParams + "{" + body + "}", ImportOptions{"N", {}});
  p.after = p.before;
  Status st = fuse_gated_mlp(p.after);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

void expect_fused(const std::string& body, const std::string& act) {
  Passed p = run_pass(body);
  ASSERT_EQ(p.after.nodes.size(), 1u) << body;
  const ir::Node& n = p.after.nodes[0];
  EXPECT_EQ(n.qualified_op(), "kiln.GatedMatMul");
  EXPECT_EQ(n.attr_string("activation", "?"), act);
  EXPECT_EQ(p.after.values[n.inputs[0]].name, "x");
  EXPECT_EQ(p.after.values[n.outputs[0]].name, "y");
  const ir::Value& w = p.after.values[n.inputs[1]];
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_EQ(w.constant->dims, (std::vector<int64_t>{4, 6}));
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}, 1e-12, 1e-12));
}

void expect_unfused(const std::string& body, const std::string& sig = kSig) {
  Passed p = run_pass(body, sig);
  EXPECT_EQ(count_ops(p.after, "GatedMatMul", "kiln"), 0) << body;
  EXPECT_EQ(p.after.nodes.size(), p.before.nodes.size()) << body;
}

TEST(FuseGatedMlp, SiluAsTheExportersWriteIt) {
  expect_fused(R"(
    g = MatMul(x, wg)
    s = Sigmoid(g)
    a = Mul(g, s)
    u = MatMul(x, wu)
    y = Mul(a, u))",
               "silu");
}

TEST(FuseGatedMlp, SiluOtherFactorOrders) {
  expect_fused(R"(
    u = MatMul(x, wu)
    g = MatMul(x, wg)
    s = Sigmoid(g)
    a = Mul(s, g)
    y = Mul(u, a))",
               "silu");
}

TEST(FuseGatedMlp, GeluBothFormsAndRelu) {
  expect_fused(R"(
    g = MatMul(x, wg)
    a = Gelu(g)
    u = MatMul(x, wu)
    y = Mul(a, u))",
               "gelu");
  expect_fused(R"(
    g = MatMul(x, wg)
    a = Gelu <approximate: string = "tanh"> (g)
    u = MatMul(x, wu)
    y = Mul(a, u))",
               "gelu_tanh");
  expect_fused(R"(
    g = MatMul(x, wg)
    a = Relu(g)
    u = MatMul(x, wu)
    y = Mul(u, a))",
               "relu");
}

// The weight interleaves the two: column 2j is Wg's column j, 2j + 1 Wu's.
TEST(FuseGatedMlp, WeightColumnsComeInPairs) {
  Passed p = run_pass(R"(
    g = MatMul(x, wg)
    a = Relu(g)
    u = MatMul(x, wu)
    y = Mul(a, u))");
  ASSERT_EQ(p.after.nodes.size(), 1u);
  const ir::Value& w = p.after.values[p.after.nodes[0].inputs[1]];
  const float* f = reinterpret_cast<const float*>(w.constant->bytes.data());
  // Row 1 of wg is {2, -0.5, 1}, of wu {-0.75, 2, 0.25}.
  const std::vector<float> row1(f + 6, f + 12);
  EXPECT_EQ(row1, (std::vector<float>{2, -0.75, -0.5, 2, 1, 0.25}));
}

// One projection cut in halves (Phi-3): Split or two Slices; the weight's first half is the gate.
TEST(FuseGatedMlp, OneProjectionCutInHalves) {
  const std::string sig = "g (float[N, 4] x) => (float[N, 2] y) ";
  for (const std::string& cut : {std::string("g, u = Split <axis: int = -1> (h)"),
                                 std::string(R"(g = Slice(h, zero, two, minus1)
                                            u = Slice(h, two, big, minus1))")}) {
    const std::string body = R"(
      h = MatMul(x, w4)
      )" + cut + R"(
      s = Sigmoid(g)
      a = Mul(g, s)
      y = Mul(u, a))";
    Passed p;
    p.before = import_text_ok(kHead + sig + R"(<float[4, 4] w4 = {0.5, -1, 0.25, 2, -0.5, 1,
        0.75, -0.25, 1.5, -2, 0.125, 1, 1, 0.5, -1, -0.75}, int64[1] zero = {0},
        int64[1] two = {2}, int64[1] big = {1000}, int64[1] minus1 = {-1}>{)" +
                                  body + "}",
                              ImportOptions{"N", {}});
    p.after = p.before;
    ASSERT_TRUE(fuse_gated_mlp(p.after).ok());
    ASSERT_EQ(p.after.nodes.size(), 1u) << body;
    const ir::Value& w = p.after.values[p.after.nodes[0].inputs[1]];
    const float* f = reinterpret_cast<const float*>(w.constant->bytes.data());
    // Row 0 of w4 is {0.5, -1 | 0.25, 2}: gate columns 0.5, -1; up columns 0.25, 2.
    EXPECT_EQ(std::vector<float>(f, f + 4), (std::vector<float>{0.5, 0.25, -1, 2}));
    EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}, 1e-12, 1e-12)) << body;
  }
}

TEST(FuseGatedMlp, NearMissesStay) {
  // The gate product has another reader.
  expect_unfused(R"(
    g = MatMul(x, wg)
    s = Sigmoid(g)
    a = Mul(g, s)
    u = MatMul(x, wu)
    m = Mul(a, u)
    y = Add(m, g))");
  // The projections read different inputs.
  expect_unfused(R"(
    x2 = Neg(x)
    g = MatMul(x, wg)
    a = Relu(g)
    u = MatMul(x2, wu)
    y = Mul(a, u))");
  // A bias on the up projection.
  expect_unfused(R"(
    g = MatMul(x, wg)
    a = Relu(g)
    u0 = MatMul(x, wu)
    u = Add(u0, b)
    y = Mul(a, u))");
  // Sigmoid of something else: not SiLU.
  expect_unfused(R"(
    g = MatMul(x, wg)
    g2 = MatMul(x, w3)
    s = Sigmoid(g2)
    a = Mul(g, s)
    u = MatMul(x, wu)
    y = Mul(a, u))");
  // One weight read by both: not a weight the fused node may take for itself.
  expect_unfused(R"(
    g = MatMul(x, w3)
    a = Relu(g)
    u = MatMul(x, w3)
    y = Mul(a, u))");
}

// Every exported Llama, Mistral, Qwen2 and Phi-3: one GatedMatMul a layer, two MatMuls fewer
// (one for Phi-3, which projects gate and up in one MatMul and cuts it in halves: Slices in the
// TorchScript exports, a Split in the dynamo ones), and the graph computes what it did. The
// other families have no gated MLP.
TEST(FuseGatedMlp, EveryExportedLlamaFamilyModel) {
  int fused_models = 0;
  for (const std::string& name : kiln::testing::model_names(kiln::testing::exported_models_dir())) {
    SCOPED_TRACE(name);
    const auto dir = kiln::testing::exported_models_dir() / name;
    Result<ImportOptions> opts = kiln::testing::exported_import_options(dir);
    ASSERT_TRUE(opts.ok()) << opts.status().to_string();
    Result<ir::Graph> before = onnx_import_file(dir / "model.onnx", *opts);
    ASSERT_TRUE(before.ok()) << before.status().to_string();
    ASSERT_TRUE(front_end_passes(*before, opts->max_size).ok());
    ir::Graph after = *before;
    ASSERT_TRUE(fuse_gated_mlp(after).ok());
    const int gated = count_ops(after, "GatedMatMul", "kiln");
    const bool phi3 = name.starts_with("phi3");
    const bool family = phi3 || name.starts_with("llama") || name.starts_with("mistral") ||
                        name.starts_with("qwen2");
    if (!family) {
      EXPECT_EQ(gated, 0);
      continue;
    }
    const int layers = count_ops(*before, "Attention", "kiln");
    EXPECT_GT(layers, 0);
    EXPECT_EQ(gated, layers);
    EXPECT_EQ(count_ops(*before, "MatMul") - count_ops(after, "MatMul"), (phi3 ? 1 : 2) * layers);
    EXPECT_TRUE(kiln::testing::graphs_equivalent(*before, after, {1, 5}, 1e-9, 1e-9));
    ++fused_models;
  }
  EXPECT_EQ(fused_models, 28);  // seven exports each
}

}  // namespace
}  // namespace kiln::compiler
