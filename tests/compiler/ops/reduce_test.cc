// The reduce family (compiler/ops/reduce.cc): Softmax, LogSoftmax, ReduceSum/Mean/Max and
// CumSum on hand-checked cases, S in reduced axes, errors, and ONNX's own node tests.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "tests/support/ir_harness.h"
#include "tests/support/onnx_node_test.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using kiln::testing::C;
using kiln::testing::expect_import_error;
using kiln::testing::import_unfolded;
using kiln::testing::kOpset17Head;
using kiln::testing::ref_error;
using kiln::testing::run;
using kiln::testing::S;
using kiln::testing::shape_of;
using kiln::testing::T;
using kiln::testing::tensors_close;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::string kHead18 = R"(<ir_version: 8, opset_import: ["" : 18]> )";

// ---- Softmax, LogSoftmax ----------------------------------------------------------------------

TEST(Softmax, IsStableAndTakesAnyAxis) {
  ir::Graph g = import_unfolded(kOpset17Head + R"(
    g (float[N, 2] x, float[1, N, 1] z) => (float[N, 2] last, float[N, 2] first, float[1, N, 1] mid,
                                           float[N, 2] log) {
      last = Softmax(x)
      first = Softmax<axis = 0>(x)
      mid = Softmax<axis = -2>(z)
      log = LogSoftmax(x)
    })");
  const double e = 1 / (1 + std::exp(1.0));  // softmax([0, 1])[0]
  auto out = run(g, 2, {{"x", T({2, 2}, {1000, 1001, -1000, -999})}, {"z", T({1, 2, 1}, {0, 0})}});
  EXPECT_TRUE(
      tensors_close(out["last"], T({2, 2}, {e, 1 - e, e, 1 - e}), 1e-14, 0, "large logits"));
  EXPECT_TRUE(tensors_close(out["first"], T({2, 2}, {1, 1, 0, 0}), 0, 1e-300, "axis 0"));
  EXPECT_TRUE(tensors_close(out["mid"], T({1, 2, 1}, {0.5, 0.5}), 1e-15, 0, "middle axis"));
  EXPECT_TRUE(tensors_close(out["log"],
                            T({2, 2}, {std::log(e), std::log(1 - e), std::log(e), std::log(1 - e)}),
                            1e-14, 0, "log softmax"));
  auto small = run(g, 1, {{"x", T({1, 2}, {0, 5})}, {"z", T({1, 1, 1}, {3})}});
  EXPECT_TRUE(tensors_close(small["first"], T({1, 2}, {1, 1}), 0, 0, "a single row"));
  EXPECT_TRUE(tensors_close(small["mid"], T({1, 1, 1}, {1}), 0, 0, "one element"));
}

TEST(Softmax, Errors) {
  expect_import_error(
      kOpset17Head + "g (float[N, 32] x) => (float[N, 32] y) { y = Softmax<axis = 2>(x) }",
      StatusCode::kInvalidArgument, {"(Softmax)", "axis 2 is out of range", "[S, 32]"});
  expect_import_error(
      kOpset17Head + "g (float[N, 32] x) => (float[N, 32] y) { y = LogSoftmax<axis = -3>(x) }",
      StatusCode::kInvalidArgument, {"(LogSoftmax)", "axis -3 is out of range"});
  expect_import_error(kOpset17Head + "g (int64[N, 32] x) => (int64[N, 32] y) { y = Softmax(x) }",
                      StatusCode::kInvalidArgument, {"(Softmax)", "input 'x' is i64"});
}

// ---- ReduceSum, ReduceMean, ReduceMax ---------------------------------------------------------

TEST(Reduce, AxesAttributeAndInputForms) {
  // ReduceMean/ReduceMax take `axes` as an attribute before opset 18, ReduceSum before 13.
  ir::Graph g = import_unfolded(kOpset17Head + R"(
    g (float[2, N, 3] x) => (float[2, 1, 1] mean, float[N] max, float[1, 1, 1] all,
                             float[2, N] sum) {
      mean = ReduceMean<axes = [1, -1]>(x)
      max = ReduceMax<axes = [0, 2], keepdims = 0>(x)
      all = ReduceMax(x)
      axes = Constant<value_ints = [2]>()
      sum = ReduceSum<keepdims = 0>(x, axes)
    })");
  EXPECT_EQ(shape_of(g, "mean"), (ir::Shape{C(2), C(1), C(1)}));
  EXPECT_EQ(shape_of(g, "max"), (ir::Shape{S}));
  EXPECT_EQ(shape_of(g, "sum"), (ir::Shape{C(2), S}));
  // x[b, s, c] = 100b + 10s + c.
  std::vector<double> x;
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 2; ++s)
      for (int c = 0; c < 3; ++c) x.push_back(100 * b + 10 * s + c);
  auto out = run(g, 2, {{"x", T({2, 2, 3}, x)}});
  EXPECT_TRUE(tensors_close(out["mean"], T({2, 1, 1}, {6, 106}), 1e-15, 0, "mean"));
  EXPECT_TRUE(tensors_close(out["max"], T({2}, {102, 112}), 0, 0, "max"));
  EXPECT_TRUE(tensors_close(out["all"], T({1, 1, 1}, {112}), 0, 0, "max of all"));
  EXPECT_TRUE(tensors_close(out["sum"], T({2, 2}, {3, 33, 303, 333}), 0, 0, "sum"));

  ir::Graph g18 = import_unfolded(kHead18 + R"(
    g (float[N, 3] x, int32[N, 2] i) => (float[N, 1] mean, float[3] max, int32[N] isum,
                                         float[N, 3] same, int32[1, 1] imean) {
      a1 = Constant<value_ints = [1]>()
      a0 = Constant<value_ints = [0]>()
      none = Constant<value = int64[0] {}>()
      mean = ReduceMean(x, a1)
      max = ReduceMax<keepdims = 0>(x, a0)
      isum = ReduceSum<keepdims = 0>(i, a1)
      same = ReduceSum<noop_with_empty_axes = 1>(x, none)
      imean = ReduceMean(i)
    })");
  EXPECT_EQ(shape_of(g18, "max"), (ir::Shape{C(3)}));
  auto o18 =
      run(g18, 2,
          {{"x", T({2, 3}, {1, 2, 6, -1, kNaN, 0})}, {"i", T({2, 2}, {1, 2, 3, 5}, DType::kI32)}});
  EXPECT_TRUE(tensors_close(o18["mean"], T({2, 1}, {3, kNaN}), 0, 0, "mean opset 18"));
  EXPECT_TRUE(tensors_close(o18["max"], T({3}, {1, kNaN, 6}), 0, 0, "NaN propagates in max"));
  EXPECT_TRUE(tensors_close(o18["isum"], T({2}, {3, 8}, DType::kI32), 0, 0, "int sum"));
  EXPECT_TRUE(tensors_close(o18["same"], T({2, 3}, {1, 2, 6, -1, kNaN, 0}), 0, 0, "noop"));
  // Integer mean truncates: 11 / 4.
  EXPECT_TRUE(tensors_close(o18["imean"], T({1, 1}, {2}, DType::kI32), 0, 0, "int mean"));
}

TEST(Reduce, Errors) {
  expect_import_error(
      kOpset17Head + "g (float[N, 3] x) => (float[N] y) { y = ReduceSum<axes = [2]>(x) }",
      StatusCode::kInvalidArgument, {"(ReduceSum)", "axis 2 is out of range"});
  expect_import_error(
      kOpset17Head + "g (float[N, 3] x) => (float[N] y) { y = ReduceMean<axes = [1, -1]>(x) }",
      StatusCode::kInvalidArgument, {"(ReduceMean)", "axis -1 is listed twice"});
  expect_import_error(
      kHead18 + "g (float[N, 3] x, int64[1] a) => (float[N] y) { y = ReduceMax(x, a) }",
      StatusCode::kUnimplemented, {"(ReduceMax)", "axes 'a' is computed at run time"});
  expect_import_error(kHead18 + R"(g (float[N, 3] x) => (float[N] y) {
      a = Constant<value = int32[1] {1}>()
      y = ReduceMax(x, a)
    })",
                      StatusCode::kInvalidArgument, {"(ReduceMax)", "axes 'a' is i32"});
  expect_import_error(kOpset17Head + "g (bool[N, 3] x) => (bool[N] y) { y = ReduceMax(x) }",
                      StatusCode::kInvalidArgument, {"(ReduceMax)", "input 'x' is bool"});
}

// ---- CumSum -----------------------------------------------------------------------------------

TEST(CumSum, AllModes) {
  ir::Graph g = import_unfolded(kOpset17Head + R"(
    g (float[N, 3] x, int64[N, 2] i, int32 ax) =>
      (float[N, 3] plain, float[N, 3] excl, float[N, 3] rev, float[N, 3] both, int64[N, 2] down) {
      plain = CumSum(x, ax)
      excl = CumSum<exclusive = 1>(x, ax)
      rev = CumSum<reverse = 1>(x, ax)
      both = CumSum<exclusive = 1, reverse = 1>(x, ax)
      zero = Constant<value_int = 0>()
      down = CumSum(i, zero)
    })");
  auto out = run(g, 2,
                 {{"x", T({2, 3}, {1, 2, 3, 4, 5, 6})},
                  {"i", T({2, 2}, {1, 2, 3, 4}, DType::kI64)},
                  {"ax", T({}, {-1}, DType::kI32)}});
  EXPECT_TRUE(tensors_close(out["plain"], T({2, 3}, {1, 3, 6, 4, 9, 15}), 0, 0, "plain"));
  EXPECT_TRUE(tensors_close(out["excl"], T({2, 3}, {0, 1, 3, 0, 4, 9}), 0, 0, "exclusive"));
  EXPECT_TRUE(tensors_close(out["rev"], T({2, 3}, {6, 5, 3, 15, 11, 6}), 0, 0, "reverse"));
  EXPECT_TRUE(tensors_close(out["both"], T({2, 3}, {5, 3, 0, 11, 6, 0}), 0, 0, "both"));
  EXPECT_TRUE(tensors_close(out["down"], T({2, 2}, {1, 2, 4, 6}, DType::kI64), 0, 0, "axis 0"));
  // The axis is data: a bad one is caught when the reference runs.
  auto bad = reference_run(g, 2,
                           {{"x", T({2, 3}, {1, 2, 3, 4, 5, 6})},
                            {"i", T({2, 2}, {1, 2, 3, 4}, DType::kI64)},
                            {"ax", T({}, {2}, DType::kI32)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("axis 2 out of range"), std::string::npos)
      << bad.status().message();
}

TEST(CumSum, Errors) {
  expect_import_error(kOpset17Head + R"(g (float[N, 3] x) => (float[N, 3] y) {
      a = Constant<value_int = 2>()
      y = CumSum(x, a)
    })",
                      StatusCode::kInvalidArgument, {"(CumSum)", "axis 2 is out of range"});
  expect_import_error(
      kOpset17Head + "g (float[N, 3] x, float a) => (float[N, 3] y) { y = CumSum(x, a) }",
      StatusCode::kInvalidArgument, {"(CumSum)", "axis 'a' is f32"});
  expect_import_error(
      kOpset17Head + "g (float[N, 3] x, int64[2] a) => (float[N, 3] y) { y = CumSum(x, a) }",
      StatusCode::kInvalidArgument, {"(CumSum)", "expected an i32 or i64 scalar"});
}

// The kernels re-check what they rely on: they may be called with any tensors.
TEST(Reduce, ReferenceRechecksItsInputs) {
  const RefTensor x = T({2, 3}, {1, 2, 3, 4, 5, 6}), bad = T({2, 3}, {1});
  const RefTensor axes = T({2}, {1, 1}, DType::kI64), two = T({}, {2}, DType::kI64);
  EXPECT_NE(ref_error("ReduceSum", {&x, &axes}, {}).find("axis 1 is listed twice"),
            std::string::npos);
  EXPECT_NE(ref_error("ReduceMax", {&bad}, {}).find("input 0 holds 1 values"), std::string::npos);
  EXPECT_NE(ref_error("Softmax", {&x}, {{"axis", int64_t{2}}}).find("axis 2 out of range"),
            std::string::npos);
  EXPECT_NE(ref_error("CumSum", {&x, &two}, {}).find("axis 2 out of range"), std::string::npos);
  EXPECT_NE(ref_error("CumSum", {&x, &axes}, {}).find("axis must hold one value"),
            std::string::npos);
  EXPECT_EQ(ref_error("ReduceMean", {&x}, {{"axes", std::vector<int64_t>{0}}}), "ok");
}

// ---- ONNX node tests --------------------------------------------------------------------------

class ReduceNodeTest : public ::testing::TestWithParam<const char*> {};

// Every output within rtol 1e-5, atol 1e-6: the expected data are float64 numpy results stored
// as float32.
TEST_P(ReduceNodeTest, MatchesOnnxData) {
  const std::string name = GetParam();
  // ReduceSum-13 reads its axes from input 1, a graph input in these tests: it becomes an
  // initializer holding its test data (the axes decide the output shape).
  kiln::testing::check_onnx_node_test(
      name,
      {.rtol = 1e-5,
       .atol = 1e-6,
       .freeze_inputs = name.starts_with("test_reduce_sum") ? std::set<int>{1} : std::set<int>{}});
}

INSTANTIATE_TEST_SUITE_P(
    Onnx, ReduceNodeTest,
    ::testing::Values(
        "test_softmax_axis_0", "test_softmax_axis_1", "test_softmax_axis_2",
        "test_softmax_default_axis", "test_softmax_example", "test_softmax_large_number",
        "test_softmax_negative_axis", "test_logsoftmax_axis_0", "test_logsoftmax_axis_2",
        "test_logsoftmax_default_axis", "test_logsoftmax_large_number",
        "test_reduce_mean_default_axes_keepdims_random", "test_reduce_mean_do_not_keepdims_random",
        "test_reduce_mean_negative_axes_keepdims_random",
        "test_reduce_max_default_axes_keepdims_random", "test_reduce_max_do_not_keepdims_random",
        "test_reduce_max_negative_axes_keepdims_random",
        "test_reduce_sum_default_axes_keepdims_random", "test_reduce_sum_do_not_keepdims_random",
        "test_reduce_sum_empty_axes_input_noop_random", "test_reduce_sum_keepdims_random",
        "test_reduce_sum_negative_axes_keepdims_random", "test_cumsum_1d",
        "test_cumsum_1d_exclusive", "test_cumsum_1d_reverse", "test_cumsum_1d_reverse_exclusive",
        "test_cumsum_2d_axis_0", "test_cumsum_2d_axis_1", "test_cumsum_2d_negative_axis"),
    kiln::testing::NodeTestName());

}  // namespace
}  // namespace kiln::compiler
