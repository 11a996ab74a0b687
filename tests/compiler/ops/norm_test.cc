// The norm family (compiler/ops/norm.cc): LayerNormalization and RMSNormalization on
// hand-checked cases, parameter broadcasting, errors, and ONNX's own node tests.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "compiler/onnx_tensor.h"
#include "compiler/op_registry.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using ir::DimExpr;
using kiln::testing::import_text;
using kiln::testing::import_text_ok;
using kiln::testing::tensors_close;

RefTensor F(std::vector<int64_t> dims, std::vector<double> data) {
  RefTensor t;
  t.dims = std::move(dims);
  t.data = std::move(data);
  return t;
}

std::map<std::string, RefTensor> run(const ir::Graph& g, int64_t s,
                                     const std::map<std::string, RefTensor>& in) {
  Result<std::map<std::string, RefTensor>> r = reference_run(g, s, in);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::map<std::string, RefTensor>{};
}

void expect_import_error(const std::string& text, StatusCode code,
                         const std::vector<std::string>& needles) {
  Result<ir::Graph> g = import_text(text, ImportOptions{"N", {}});
  ASSERT_FALSE(g.ok()) << text;
  EXPECT_EQ(g.status().code(), code) << g.status().to_string();
  for (const auto& n : needles)
    EXPECT_NE(g.status().message().find(n), std::string::npos) << g.status().message();
}

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kHead23 = R"(<ir_version: 11, opset_import: ["" : 23]> )";
const DimExpr S = DimExpr::size();
DimExpr C(int64_t v) { return DimExpr::constant(v); }

// ---- LayerNormalization -----------------------------------------------------------------------

TEST(LayerNorm, TrailingAxesWithBroadcastParameters) {
  ir::Graph g = import_text_ok(kHead + R"(
    g (float[N, 2, 2] x, float[2] scale, float[1] bias) =>
      (float[N, 2, 2] y, float[N, 1, 1] mean, float[N, 1, 1] inv) {
      y, mean, inv = LayerNormalization<axis = 1>(x, scale, bias)
    })",
                               ImportOptions{"N", {}});
  const ir::Value& mean = g.values[g.find_value("mean")];
  EXPECT_EQ(mean.shape, (ir::Shape{S, C(1), C(1)}));
  EXPECT_EQ(mean.dtype, DType::kF32);
  auto out = run(g, 2,
                 {{"x", F({2, 2, 2}, {1, 2, 3, 4, 2, 4, 6, 8})},
                  {"scale", F({2}, {1, -1})},
                  {"bias", F({1}, {0.5})}});
  // Row 1: mean 2.5, variance 1.25; row 2: mean 5, variance 5 (Python, float64).
  const double inv1 = 0.894423613312618, inv2 = 1 / std::sqrt(5 + 1e-5);
  EXPECT_TRUE(tensors_close(
      out["y"],
      F({2, 2, 2}, {-1.5 * inv1 + 0.5, 0.5 * inv1 + 0.5, 0.5 * inv1 + 0.5, -1.5 * inv1 + 0.5,
                    -3 * inv2 + 0.5, 1 * inv2 + 0.5, 1 * inv2 + 0.5, -3 * inv2 + 0.5}),
      1e-14, 1e-15, "y"));
  EXPECT_TRUE(tensors_close(out["mean"], F({2, 1, 1}, {2.5, 5}), 0, 0, "mean"));
  EXPECT_TRUE(tensors_close(out["inv"], F({2, 1, 1}, {inv1, inv2}), 1e-15, 0, "inv std dev"));
}

TEST(LayerNorm, DefaultAxisEpsilonNoBiasAndF64) {
  ir::Graph g = import_text_ok(kHead + R"(
    g (double[N, 2] x, double[2] scale) => (double[N, 2] y) {
      y = LayerNormalization<epsilon = 0.25>(x, scale)
    })",
                               ImportOptions{"N", {}});
  RefTensor x = F({1, 2}, {1, 3}), scale = F({2}, {1, 3});
  x.dtype = scale.dtype = DType::kF64;
  auto out = run(g, 1, {{"x", x}, {"scale", scale}});
  EXPECT_EQ(out["y"].dtype, DType::kF64);
  // mean 2, variance 1, 1/sqrt(1.25) = 0.8944271909999159; epsilon is stored as a float.
  const double inv = 1 / std::sqrt(1 + static_cast<double>(0.25f));
  RefTensor want = F({1, 2}, {-inv, 3 * inv});
  want.dtype = DType::kF64;
  EXPECT_TRUE(tensors_close(out["y"], want, 1e-15, 0, "y"));
  EXPECT_NEAR(inv, 0.8944271909999159, 1e-16);
}

TEST(LayerNorm, Errors) {
  expect_import_error(kHead + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = LayerNormalization<axis = 2>(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"(LayerNormalization)", "axis 2 is out of range"});
  expect_import_error(kHead + R"(g (float[N, 4] x, float[3] s) => (float[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"'s' [3] does not broadcast to the normalized shape [4]"});
  expect_import_error(kHead + R"(g (float[N, 4] x, float[2] s) => (float[N, 4] y) {
      y = LayerNormalization<axis = 0>(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"'s' [2] does not broadcast to the normalized shape [S, 4]"});
  expect_import_error(kHead + R"(g (float[N, 4] x, double[4] s) => (float[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument, {"'s' is f64; expected f32"});
  expect_import_error(kHead + R"(g (int64[N, 4] x, int64[4] s) => (int64[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument, {"input 'x' is i64"});
  expect_import_error(kHead + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = LayerNormalization<stash_type = 7>(x, s) })",
                      StatusCode::kInvalidArgument, {"stash_type 7"});
  expect_import_error(kHead + R"(g (float[N, 4] x) => (float[N, 4] y) {
      y = LayerNormalization(x) })",
                      StatusCode::kInvalidArgument,
                      {"(LayerNormalization)", "required input 1 is missing"});
}

// ---- RMSNormalization -------------------------------------------------------------------------

TEST(RmsNorm, ScalesByRootMeanSquare) {
  ir::Graph g = import_text_ok(kHead23 + R"(
    g (float[N, 2, 2] x, float[2] scale, float[N, 4] z, float[4] s4) =>
      (float[N, 2, 2] y, float[N, 4] eps) {
      y = RMSNormalization<axis = 1>(x, scale)
      eps = RMSNormalization<epsilon = 0.5>(z, s4)
    })",
                               ImportOptions{"N", {}});
  auto out = run(g, 1,
                 {{"x", F({1, 2, 2}, {1, 2, 3, 4})},
                  {"scale", F({2}, {1, 0.5})},
                  {"z", F({1, 4}, {1, 2, 3, 4})},
                  {"s4", F({4}, {1, 1, 1, 2})}});
  // mean(x²) = 7.5; 1/sqrt(7.5 + 1e-5) = 0.3651481282381064 (Python).
  const double r = 0.3651481282381064;
  EXPECT_TRUE(
      tensors_close(out["y"], F({1, 2, 2}, {r, 2 * r * 0.5, 3 * r, 4 * r * 0.5}), 1e-15, 0, "y"));
  const double r2 = 1 / std::sqrt(7.5 + 0.5);
  EXPECT_TRUE(tensors_close(out["eps"], F({1, 4}, {r2, 2 * r2, 3 * r2, 8 * r2}), 1e-15, 0, "eps"));
}

TEST(RmsNorm, Errors) {
  expect_import_error(kHead23 + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = RMSNormalization<axis = -3>(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"(RMSNormalization)", "axis -3 is out of range"});
  expect_import_error(kHead23 + R"(g (float[N, 4] x, float[2] s) => (float[N, 4] y) {
      y = RMSNormalization(x, s) })",
                      StatusCode::kInvalidArgument, {"does not broadcast to the normalized shape"});
  expect_import_error(kHead23 + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = RMSNormalization(x, s, s) })",
                      StatusCode::kInvalidArgument, {"has 3 inputs, expected 2"});
}

// The kernels re-check what they rely on: they may be called with any tensors.
TEST(Norm, ReferenceRechecksItsInputs) {
  auto err = [](const std::string& op, const std::vector<const RefTensor*>& in, int64_t axis) {
    ir::Node n;
    n.op = op;
    n.attrs["axis"] = axis;
    auto r = op_find("", op)->ref(n, in);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  const RefTensor x = F({2, 3}, {1, 2, 3, 4, 5, 6}), s3 = F({3}, {1, 1, 1}), s2 = F({2}, {1, 1});
  EXPECT_NE(err("LayerNormalization", {&x, &s2}, -1).find("[2] does not broadcast"),
            std::string::npos);
  EXPECT_NE(err("LayerNormalization", {&x, &s3}, 2).find("axis 2 out of range"), std::string::npos);
  EXPECT_NE(err("LayerNormalization", {&x}, -1).find("expected X, Scale"), std::string::npos);
  EXPECT_NE(err("RMSNormalization", {&x, &s2}, 1).find("does not broadcast"), std::string::npos);
  EXPECT_EQ(err("RMSNormalization", {&x, &s3}, 1), "ok");
}

// ---- ONNX node tests --------------------------------------------------------------------------

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

RefTensor read_pb(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  onnx::TensorProto t;
  EXPECT_TRUE(t.ParseFromIstream(&f)) << p;
  Result<OnnxConstant> c = onnx_tensor_to_constant(t, p.string(), p.parent_path());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return {};
  ir::Value v;
  v.name = p.string();
  v.dtype = c->dtype;
  v.constant = c->constant;
  Result<RefTensor> r = reference_decode_constant(v);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : RefTensor{};
}

// Imports ONNX's node test `name`, runs the reference on test_data_set_0 and compares every
// output (rtol 1e-5, atol 1e-6: the expected data are float64 numpy results stored as float32).
void check_node_test(const std::string& name) {
  const fs::path dir = kNodeTests / name;
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << dir << " not installed";
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
  const fs::path data = dir / "test_data_set_0";
  std::map<std::string, RefTensor> in;
  for (size_t i = 0; i < g->inputs.size(); ++i)
    in[g->values[g->inputs[i]].name] = read_pb(data / fmt::format("input_{}.pb", i));
  auto out = reference_run(*g, 1, in);
  ASSERT_TRUE(out.ok()) << name << ": " << out.status().to_string();
  for (size_t j = 0; j < g->outputs.size(); ++j) {
    const std::string& o = g->values[g->outputs[j]].name;
    EXPECT_TRUE(tensors_close(out->at(o), read_pb(data / fmt::format("output_{}.pb", j)), 1e-5,
                              1e-6, name + " " + o));
  }
}

class NormNodeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(NormNodeTest, MatchesOnnxData) { check_node_test(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Onnx, NormNodeTest,
    ::testing::Values(
        "test_layer_normalization_2d_axis0", "test_layer_normalization_2d_axis1",
        "test_layer_normalization_2d_axis_negative_1",
        "test_layer_normalization_2d_axis_negative_2", "test_layer_normalization_3d_axis0_epsilon",
        "test_layer_normalization_3d_axis1_epsilon", "test_layer_normalization_3d_axis2_epsilon",
        "test_layer_normalization_3d_axis_negative_1_epsilon",
        "test_layer_normalization_3d_axis_negative_2_epsilon",
        "test_layer_normalization_3d_axis_negative_3_epsilon", "test_layer_normalization_4d_axis0",
        "test_layer_normalization_4d_axis1", "test_layer_normalization_4d_axis2",
        "test_layer_normalization_4d_axis3", "test_layer_normalization_4d_axis_negative_1",
        "test_layer_normalization_4d_axis_negative_2",
        "test_layer_normalization_4d_axis_negative_3",
        "test_layer_normalization_4d_axis_negative_4", "test_layer_normalization_default_axis"),
    [](const auto& info) { return std::string(info.param).substr(5); });

}  // namespace
}  // namespace kiln::compiler
