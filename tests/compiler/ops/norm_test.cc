// The norm family (compiler/ops/norm.cc): LayerNormalization and RMSNormalization on
// hand-checked cases, parameter broadcasting, errors, and ONNX's own node tests.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/ir_harness.h"
#include "tests/support/onnx_node_test.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using kiln::testing::C;
using kiln::testing::expect_import_error;
using kiln::testing::import_text_ok;
using kiln::testing::kOpset17Head;
using kiln::testing::ref_error;
using kiln::testing::run;
using kiln::testing::S;
using kiln::testing::T;
using kiln::testing::tensors_close;

const std::string kHead23 = R"(<ir_version: 11, opset_import: ["" : 23]> )";

// ---- LayerNormalization -----------------------------------------------------------------------

TEST(LayerNorm, TrailingAxesWithBroadcastParameters) {
  ir::Graph g = import_text_ok(kOpset17Head + R"(
    g (float[N, 2, 2] x, float[2] scale, float[1] bias) =>
      (float[N, 2, 2] y, float[N, 1, 1] mean, float[N, 1, 1] inv) {
      y, mean, inv = LayerNormalization<axis = 1>(x, scale, bias)
    })",
                               ImportOptions{"N", {}});
  const ir::Value& mean = g.values[g.find_value("mean")];
  EXPECT_EQ(mean.shape, (ir::Shape{S, C(1), C(1)}));
  EXPECT_EQ(mean.dtype, DType::kF32);
  auto out = run(g, 2,
                 {{"x", T({2, 2, 2}, {1, 2, 3, 4, 2, 4, 6, 8})},
                  {"scale", T({2}, {1, -1})},
                  {"bias", T({1}, {0.5})}});
  // Row 1: mean 2.5, variance 1.25; row 2: mean 5, variance 5 (Python, float64).
  const double inv1 = 0.894423613312618, inv2 = 1 / std::sqrt(5 + 1e-5);
  EXPECT_TRUE(tensors_close(
      out["y"],
      T({2, 2, 2}, {-1.5 * inv1 + 0.5, 0.5 * inv1 + 0.5, 0.5 * inv1 + 0.5, -1.5 * inv1 + 0.5,
                    -3 * inv2 + 0.5, 1 * inv2 + 0.5, 1 * inv2 + 0.5, -3 * inv2 + 0.5}),
      1e-14, 1e-15, "y"));
  EXPECT_TRUE(tensors_close(out["mean"], T({2, 1, 1}, {2.5, 5}), 0, 0, "mean"));
  EXPECT_TRUE(tensors_close(out["inv"], T({2, 1, 1}, {inv1, inv2}), 1e-15, 0, "inv std dev"));
}

TEST(LayerNorm, DefaultAxisEpsilonNoBiasAndF64) {
  ir::Graph g = import_text_ok(kOpset17Head + R"(
    g (double[N, 2] x, double[2] scale) => (double[N, 2] y) {
      y = LayerNormalization<epsilon = 0.25>(x, scale)
    })",
                               ImportOptions{"N", {}});
  RefTensor x = T({1, 2}, {1, 3}), scale = T({2}, {1, 3});
  x.dtype = scale.dtype = DType::kF64;
  auto out = run(g, 1, {{"x", x}, {"scale", scale}});
  EXPECT_EQ(out["y"].dtype, DType::kF64);
  // mean 2, variance 1, 1/sqrt(1.25) = 0.8944271909999159; epsilon is stored as a float.
  const double inv = 1 / std::sqrt(1 + static_cast<double>(0.25f));
  RefTensor want = T({1, 2}, {-inv, 3 * inv});
  want.dtype = DType::kF64;
  EXPECT_TRUE(tensors_close(out["y"], want, 1e-15, 0, "y"));
  EXPECT_NEAR(inv, 0.8944271909999159, 1e-16);
}

TEST(LayerNorm, Errors) {
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = LayerNormalization<axis = 2>(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"(LayerNormalization)", "axis 2 is out of range"});
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x, float[3] s) => (float[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"'s' [3] does not broadcast to the normalized shape [4]"});
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x, float[2] s) => (float[N, 4] y) {
      y = LayerNormalization<axis = 0>(x, s) })",
                      StatusCode::kInvalidArgument,
                      {"'s' [2] does not broadcast to the normalized shape [S, 4]"});
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x, double[4] s) => (float[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument, {"'s' is f64; expected f32"});
  expect_import_error(kOpset17Head + R"(g (int64[N, 4] x, int64[4] s) => (int64[N, 4] y) {
      y = LayerNormalization(x, s) })",
                      StatusCode::kInvalidArgument, {"input 'x' is i64"});
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x, float[4] s) => (float[N, 4] y) {
      y = LayerNormalization<stash_type = 7>(x, s) })",
                      StatusCode::kInvalidArgument, {"stash_type 7"});
  expect_import_error(kOpset17Head + R"(g (float[N, 4] x) => (float[N, 4] y) {
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
                 {{"x", T({1, 2, 2}, {1, 2, 3, 4})},
                  {"scale", T({2}, {1, 0.5})},
                  {"z", T({1, 4}, {1, 2, 3, 4})},
                  {"s4", T({4}, {1, 1, 1, 2})}});
  // mean(x²) = 7.5; 1/sqrt(7.5 + 1e-5) = 0.3651481282381064 (Python).
  const double r = 0.3651481282381064;
  EXPECT_TRUE(
      tensors_close(out["y"], T({1, 2, 2}, {r, 2 * r * 0.5, 3 * r, 4 * r * 0.5}), 1e-15, 0, "y"));
  const double r2 = 1 / std::sqrt(7.5 + 0.5);
  EXPECT_TRUE(tensors_close(out["eps"], T({1, 4}, {r2, 2 * r2, 3 * r2, 8 * r2}), 1e-15, 0, "eps"));
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
    return ref_error(op, in, {{"axis", axis}});
  };
  const RefTensor x = T({2, 3}, {1, 2, 3, 4, 5, 6}), s3 = T({3}, {1, 1, 1}), s2 = T({2}, {1, 1});
  EXPECT_NE(err("LayerNormalization", {&x, &s2}, -1).find("[2] does not broadcast"),
            std::string::npos);
  EXPECT_NE(err("LayerNormalization", {&x, &s3}, 2).find("axis 2 out of range"), std::string::npos);
  EXPECT_NE(err("LayerNormalization", {&x}, -1).find("expected X, Scale"), std::string::npos);
  EXPECT_NE(err("RMSNormalization", {&x, &s2}, 1).find("does not broadcast"), std::string::npos);
  EXPECT_EQ(err("RMSNormalization", {&x, &s3}, 1), "ok");
}

// ---- ONNX node tests --------------------------------------------------------------------------

class NormNodeTest : public ::testing::TestWithParam<const char*> {};

// Every output within rtol 1e-5, atol 1e-6: the expected data are float64 numpy results stored
// as float32.
TEST_P(NormNodeTest, MatchesOnnxData) {
  kiln::testing::check_onnx_node_test(GetParam(), {.rtol = 1e-5, .atol = 1e-6});
}

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
    kiln::testing::NodeTestName());

}  // namespace
}  // namespace kiln::compiler
