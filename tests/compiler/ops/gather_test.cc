// The gather family (compiler/ops/gather.cc): Gather, GatherElements, GatherND and ScatterND on
// hand-checked cases with negative indices and symbolic dims, folding of Gather on shapes, the
// errors each refuses with, and ONNX's own node tests.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/ir_harness.h"
#include "tests/support/onnx_node_test.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using kiln::testing::C;
using kiln::testing::expect_error;
using kiln::testing::imp;
using kiln::testing::ints_of;
using kiln::testing::iota;
using kiln::testing::run;
using kiln::testing::S;
using kiln::testing::shape_of;
using kiln::testing::T;
using kiln::testing::tensors_close;

// ---- Gather -----------------------------------------------------------------------------------

TEST(Gather, RunTimeIndicesWithNegatives) {
  ir::Graph g = imp(R"(g (float[5, 2] w, int64[N] ids) => (float y) { y = Gather(w, ids) })");
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S, C(2)}));
  auto out = run(g, 3, {{"w", iota({5, 2})}, {"ids", T({3}, {4, -1, 0}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["y"], T({3, 2}, {8, 9, 8, 9, 0, 1}), 0, 0, "y"));
  // An index outside [-5, 5) is a run-time error naming the index.
  Result<std::map<std::string, RefTensor>> bad =
      reference_run(g, 1, {{"w", iota({5, 2})}, {"ids", T({1}, {5}, DType::kI64)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("index 5 is out of range for an axis of 5"),
            std::string::npos)
      << bad.status().message();
}

TEST(Gather, NegativeAxisMatrixAndScalarIndices) {
  ir::Graph g = imp(R"(g (float[N, 4] x) => (float a, float b) {
      ids = Constant<value = int64[2, 2] {0, -1, 2, 1}>()
      a = Gather<axis = -1>(x, ids)
      one = Constant<value_int = 1>()
      b = Gather<axis = 1>(x, one) })");
  EXPECT_EQ(shape_of(g, "a"), (ir::Shape{S, C(2), C(2)}));
  EXPECT_EQ(shape_of(g, "b"), (ir::Shape{S}));
  auto out = run(g, 2, {{"x", iota({2, 4})}});
  EXPECT_TRUE(tensors_close(out["a"], T({2, 2, 2}, {0, 3, 2, 1, 4, 7, 6, 5}), 0, 0, "a"));
  EXPECT_TRUE(tensors_close(out["b"], T({2}, {1, 5}), 0, 0, "b"));
}

TEST(Gather, FoldsShapeElements) {
  ir::Graph g = imp(R"(g (float[N, 4, 6] x) => (float y) {
      sh = Shape(x)
      i1 = Constant<value_int = 0>()
      n = Gather(sh, i1)
      last = Constant<value_ints = [-1, 1]>()
      pair = Gather(sh, last)
      y = Identity(x) })");
  EXPECT_EQ(ints_of(g, "n"), "[S]");
  EXPECT_EQ(shape_of(g, "n"), ir::Shape{});  // a scalar
  // [6, 4] has no S left: it became ordinary constant data.
  const ir::Value& pair = g.values[g.find_value("pair")];
  ASSERT_TRUE(pair.constant.has_value());
  EXPECT_EQ(pair.constant->dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(g.nodes.size(), 1u);
  expect_error(R"(g (float[N, 4] x) => (float y) {
      sh = Shape(x)
      i = Constant<value_int = 2>()
      y = Gather(sh, i) })",
               {"index 2 is out of range for axis 0 of length 2"});
}

TEST(Gather, Errors) {
  expect_error(R"(g (float[N, 4] x, float[2] i) => (float y) { y = Gather(x, i) })",
               {"indices 'i' are f32; expected int32 or int64"});
  expect_error(R"(g (float[N, 4] x, int64[2] i) => (float y) { y = Gather<axis = 2>(x, i) })",
               {"axis 2 is out of range for rank 2"});
  expect_error(R"(g (float x, int64[2] i) => (float y) { y = Gather(x, i) })",
               {"axis 0 is out of range for rank 0"});
}

// ---- GatherElements ---------------------------------------------------------------------------

TEST(GatherElements, AxisOneWithNegativeIndices) {
  ir::Graph g = imp(R"(g (float[N, 3] x, int64[N, 2] i) => (float y) {
      y = GatherElements<axis = 1>(x, i) })");
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S, C(2)}));
  auto out = run(g, 2, {{"x", iota({2, 3})}, {"i", T({2, 2}, {2, -3, -1, 1}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["y"], T({2, 2}, {2, 0, 5, 4}), 0, 0, "y"));
  ir::Graph g0 = imp(R"(g (float[3, 2] x, int64[N, 2] i) => (float y) {
      y = GatherElements(x, i) })");
  auto o0 = run(g0, 1, {{"x", iota({3, 2})}, {"i", T({1, 2}, {2, 1}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(o0["y"], T({1, 2}, {4, 3}), 0, 0, "axis 0"));
  expect_error(R"(g (float[N, 3] x, int64[N] i) => (float y) { y = GatherElements(x, i) })",
               {"must have the same rank"});
}

// ---- GatherND ---------------------------------------------------------------------------------

TEST(GatherND, SpecExamplesAndBatchDims) {
  ir::Graph g = imp(R"(g (float[2, 2] x, int64[N, 2] i) => (float y) { y = GatherND(x, i) })");
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S}));
  auto out = run(g, 2, {{"x", iota({2, 2})}, {"i", T({2, 2}, {0, 0, 1, 1}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(out["y"], T({2}, {0, 3}), 0, 0, "y"));
  // Tuples of 1 pick rows; with batch_dims = 1 each batch has its own index tuple.
  ir::Graph gb = imp(R"(g (float[N, 2, 3] x, int64[N, 1] i) => (float y) {
      y = GatherND<batch_dims = 1>(x, i) })");
  EXPECT_EQ(shape_of(gb, "y"), (ir::Shape{S, C(3)}));
  auto ob = run(gb, 2, {{"x", iota({2, 2, 3})}, {"i", T({2, 1}, {1, -2}, DType::kI64)}});
  EXPECT_TRUE(tensors_close(ob["y"], T({2, 3}, {3, 4, 5, 6, 7, 8}), 0, 0, "batch_dims 1"));
}

TEST(GatherND, Errors) {
  expect_error(R"(g (float[2, 2] x, int64[2, 3] i) => (float y) { y = GatherND(x, i) })",
               {"address 3 dims"});
  expect_error(R"(g (float[2, 2] x, int64[2, N] i) => (float y) { y = GatherND(x, i) })",
               {"need a constant last dim"});
  expect_error(R"(g (float[3, 2] x, int64[2, 1] i) => (float y) {
      y = GatherND<batch_dims = 1>(x, i) })",
               {"batch dim 0 differs"});
  expect_error(R"(g (float[3, 2] x, int64[3, 1] i) => (float y) {
      y = GatherND<batch_dims = 2>(x, i) })",
               {"batch_dims 2 must be less than"});
}

// ---- ScatterND --------------------------------------------------------------------------------

TEST(ScatterND, NoneAddMulMaxMin) {
  const std::string sig = R"(g (float[8] x, float[4] u) => (float y) {
      i = Constant<value = int64[4, 1] {4, 3, 1, -1}>()
      y = ScatterND<reduction = "REDUCTION">(x, i, u) })";
  const RefTensor x = T({8}, {1, 2, 3, 4, 5, 6, 7, 8}), u = T({4}, {9, 10, 11, 12});
  const std::map<std::string, std::vector<double>> want = {{"none", {1, 11, 3, 10, 9, 6, 7, 12}},
                                                           {"add", {1, 13, 3, 14, 14, 6, 7, 20}},
                                                           {"mul", {1, 22, 3, 40, 45, 6, 7, 96}},
                                                           {"max", {1, 11, 3, 10, 9, 6, 7, 12}},
                                                           {"min", {1, 2, 3, 4, 5, 6, 7, 8}}};
  for (const auto& [red, values] : want) {
    std::string text = sig;
    text.replace(text.find("REDUCTION"), 9, red);
    ir::Graph g = imp(text, true, R"(<ir_version: 8, opset_import: ["" : 18]> )");
    auto out = run(g, 1, {{"x", x}, {"u", u}});
    EXPECT_TRUE(tensors_close(out["y"], T({8}, values), 0, 0, red));
  }
}

TEST(ScatterND, SlicesAndDuplicateAdds) {
  // Tuples of length 1 on a [N, 2] tensor replace whole rows; a repeated row adds twice.
  ir::Graph g = imp(R"(g (float[N, 2] x, float[2, 2] u) => (float y) {
      i = Constant<value = int64[2, 1] {0, 0}>()
      y = ScatterND<reduction = "add">(x, i, u) })");
  EXPECT_EQ(shape_of(g, "y"), (ir::Shape{S, C(2)}));
  auto out = run(g, 2, {{"x", iota({2, 2})}, {"u", T({2, 2}, {10, 20, 1, 2})}});
  EXPECT_TRUE(tensors_close(out["y"], T({2, 2}, {11, 23, 2, 3}), 0, 0, "y"));
  expect_error(R"(g (float[N, 2] x, float[3] u) => (float y) {
      i = Constant<value = int64[2, 1] {0, 0}>()
      y = ScatterND(x, i, u) })",
               {"updates have shape [3]", "need [2, 2]"});
  expect_error(R"(g (float[N, 2] x, float[2, 2] u) => (float y) {
      i = Constant<value = int64[2, 1] {0, 0}>()
      y = ScatterND<reduction = "sum">(x, i, u) })",
               {"reduction 'sum' is not one of"});
  expect_error(R"(g (float[N, 2] x, double[2, 2] u) => (float y) {
      i = Constant<value = int64[2, 1] {0, 0}>()
      y = ScatterND(x, i, u) })",
               {"updates are f64, data is f32"});
}

// ---- ONNX node tests --------------------------------------------------------------------------

std::vector<std::string> node_tests() {
  return kiln::testing::onnx_node_tests({"test_gather_", "test_gathernd_", "test_scatternd"});
}

TEST(GatherNodeTests, AreInstalled) { EXPECT_GE(node_tests().size(), 12u); }

class GatherNodeTest : public ::testing::TestWithParam<std::string> {};

// The integer inputs (the indices) become initializers — kiln needs those at compile time — and
// every output must match exactly (pure data movement).
TEST_P(GatherNodeTest, MatchesOnnxData) {
  kiln::testing::check_onnx_node_test(GetParam(), {.freeze_integers = true});
}

INSTANTIATE_TEST_SUITE_P(Onnx, GatherNodeTest, ::testing::ValuesIn(node_tests()),
                         kiln::testing::NodeTestName());

}  // namespace
}  // namespace kiln::compiler
