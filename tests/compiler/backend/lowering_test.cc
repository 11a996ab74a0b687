#include "compiler/backend/lowering.h"

#include <gtest/gtest.h>

#include "compiler/frontend/canonicalize.h"
#include "compiler/frontend/onnx_import.h"
#include "tests/support/op_cases.h"

namespace kiln::compiler {
namespace {

Result<ir::Graph> import(const testing::OnnxBuilder& b) {
  auto g = onnx_import_bytes(b.bytes(), b.proto().graph().name(), ".", {"batch", {}});
  if (!g.ok()) return g;
  KILN_RETURN_IF_ERROR(canonicalize(*g));
  return g;
}

int count_gemms(const LoweredProgram& p) {
  int n = 0;
  for (const auto& s : p.steps) n += std::holds_alternative<GemmLaunch>(s);
  return n;
}

TEST(Lowering, EveryOpCaseLowersToTheExpectedSteps) {
  for (const auto& c : testing::op_cases()) {
    SCOPED_TRACE(c.name);
    auto g = import(c.model);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto p = lower_graph(*g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(static_cast<int>(p->kernels.size()), c.expected_kernels);
    EXPECT_EQ(count_gemms(*p), c.expected_gemms);
  }
}

TEST(Lowering, BiasAddAndReluFoldIntoTheGemmEpilogue) {
  auto g = import(testing::OnnxBuilder("m").input("x", {std::string("batch"), int64_t{8}})
                      .random_initializer("w", {8, 4}).random_initializer("b", {4})
                      .node("MatMul", {"x", "w"}, {"h"}).node("Add", {"b", "h"}, {"hb"})
                      .node("Relu", {"hb"}, {"y"}).output("y"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->steps.size(), 1u);
  const auto& gemm = std::get<GemmLaunch>(p->steps[0]);
  EXPECT_EQ(gemm.epilogue, Epilogue::kBiasRelu);
  EXPECT_EQ(g->values[gemm.d].name, "y");
  EXPECT_EQ(g->values[gemm.bias].name, "b");
  EXPECT_EQ(gemm.m, ir::DimExpr::size());
  EXPECT_EQ(gemm.k, ir::DimExpr::constant(8));
  EXPECT_EQ(gemm.n, ir::DimExpr::constant(4));
}

TEST(Lowering, AnIntermediateThatIsAGraphOutputIsNotFusedAway) {
  auto g = import(testing::OnnxBuilder("m").input("x", {std::string("batch"), int64_t{8}})
                      .random_initializer("w", {8, 4})
                      .node("MatMul", {"x", "w"}, {"h"}).node("Relu", {"h"}, {"y"})
                      .output("y").output("h"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->steps.size(), 2u);
  EXPECT_EQ(std::get<GemmLaunch>(p->steps[0]).epilogue, Epilogue::kNone);
  EXPECT_EQ(p->kernels.size(), 1u);
}

TEST(Lowering, RefusesTheSizeInAGemmReduction) {
  auto g = import(testing::OnnxBuilder("m").input("a", {int64_t{3}, std::string("batch")})
                      .input("b", {std::string("batch"), int64_t{5}})
                      .node("MatMul", {"a", "b"}, {"y"}).output("y"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("MatMul_0"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("reduction"), std::string::npos);
}

TEST(Lowering, RefusesSoftmaxAcrossTheSize) {
  auto g = import(testing::OnnxBuilder("m").input("x", {int64_t{4}, std::string("batch")})
                      .node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{1}}}).output("y"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("Softmax_0"), std::string::npos) << p.status().message();
}

TEST(Lowering, SoftmaxOnANonLastAxisIsUnimplementedNotWrong) {
  auto g = import(testing::OnnxBuilder("m")
                      .input("x", {std::string("batch"), int64_t{4}, int64_t{6}})
                      .node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{1}}})
                      .output("y"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented);
}

TEST(Lowering, ElementwiseChainFusesIntoOneKernel) {
  auto g = import(testing::OnnxBuilder("m").input("x", {std::string("batch"), int64_t{8}})
                      .input("y", {int64_t{8}})
                      .node("Add", {"x", "y"}, {"a"}).node("Relu", {"a"}, {"b"})
                      .node("Mul", {"b", "x"}, {"c"}).node("Sigmoid", {"c"}, {"z"}).output("z"));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->kernels.size(), 1u);
  ASSERT_EQ(p->steps.size(), 1u);
  const auto& k = std::get<KernelLaunch>(p->steps[0]);
  EXPECT_EQ(k.args.size(), 4u);  // x, y, z, S
  EXPECT_EQ(k.args.back().kind, KernelArgRef::Kind::kSize);
  EXPECT_EQ(k.work, ir::DimExpr::size(8));
}

}  // namespace
}  // namespace kiln::compiler
