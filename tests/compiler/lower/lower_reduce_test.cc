// Row-reduction lowering (compiler/lower/lower_reduce.cc): norms, the fused residual, softmax,
// last-axis reductions, refusals (the size in a reduced axis, unsupported axes and outputs), row
// geometry, and NVRTC compiles for sm_80 and sm_90 in fp32, fp16 and bf16.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <string>
#include <variant>

#include "compiler/front_end.h"
#include "compiler/kernel_codegen.h"
#include "compiler/lower/reduce_codegen.h"
#include "compiler/lowering.h"
#include "compiler/nvrtc_compile.h"
#include "compiler/onnx_import.h"
#include "compiler/passes/precision.h"
#include "tests/support/onnx_builder.h"

namespace kiln::compiler {
namespace {

using testing::OnnxBuilder;
const std::string kS = "S";

Result<LoweredProgram> lower_model(const OnnxBuilder& b, ir::Graph& g,
                                   Precision p = Precision::kF32) {
  ImportOptions opts{kS, {}};
  opts.max_size = 1024;
  KILN_ASSIGN_OR_RETURN(g, onnx_import_bytes(b.bytes(), "m", ".", opts));
  KILN_RETURN_IF_ERROR(front_end_passes(g, 1024));
  KILN_RETURN_IF_ERROR(precision_lower(g, p));
  LowerOptions lo;
  lo.precision = p;
  return lower_graph(g, lo);
}

std::vector<const KernelLaunch*> kernel_steps(const LoweredProgram& p) {
  std::vector<const KernelLaunch*> out;
  for (const auto& s : p.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&s)) out.push_back(k);
  return out;
}

std::vector<std::string> arg_names(const ir::Graph& g, const KernelLaunch& k) {
  std::vector<std::string> out;
  for (const auto& a : k.args)
    if (a.kind == KernelArgRef::Kind::kValue) out.push_back(g.values[a.value].name);
  return out;
}

OnnxBuilder residual_ln(int64_t width, bool sum_is_output) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, width})
      .input("r", {kS, width})
      .random_initializer("gamma", {width})
      .random_initializer("beta", {width})
      .node("Relu", {"x"}, {"h"})
      .node("Add", {"h", "r"}, {"sum"})
      .node("LayerNormalization", {"sum", "gamma", "beta"}, {"y"}, {{"epsilon", 1e-5f}})
      .output("y");
  if (sum_is_output) b.output("sum");
  return b;
}

TEST(LowerReduce, ResidualAddFusesIntoTheNorm) {
  for (bool sum_out : {false, true}) {
    SCOPED_TRACE(sum_out);
    ir::Graph g;
    auto p = lower_model(residual_ln(768, sum_out), g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto ks = kernel_steps(*p);
    ASSERT_EQ(ks.size(), 2u);  // Relu; Add + LayerNormalization
    const KernelDef& norm = p->kernels[static_cast<size_t>(ks[1]->kernel)];
    EXPECT_EQ(norm.symbol.rfind("kiln_layernorm_", 0), 0u) << norm.symbol;
    std::vector<std::string> want = {"h", "r"};
    if (sum_out) want.push_back("sum");
    want.insert(want.end(), {"gamma", "beta", "y"});
    EXPECT_EQ(arg_names(g, *ks[1]), want);
    EXPECT_NE(ks[1]->nodes.find("LayerNormalization"), std::string::npos) << ks[1]->nodes;
  }
}

TEST(LowerReduce, RmsNormAndWarpOrBlockRows) {
  for (int64_t width : {17, 1000, 4096}) {
    SCOPED_TRACE(width);
    OnnxBuilder b("m", 23);
    b.input("x", {kS, width})
        .random_initializer("g", {width})
        .node("RMSNormalization", {"x", "g"}, {"y"}, {{"epsilon", 1e-6f}})
        .output("y");
    ir::Graph g;
    auto p = lower_model(b, g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto ks = kernel_steps(*p);
    ASSERT_EQ(ks.size(), 1u);
    const KernelDef& k = p->kernels[static_cast<size_t>(ks[0]->kernel)];
    EXPECT_NE(k.body.find("kiln::norm_rows<float, " + std::to_string(width)), std::string::npos)
        << k.body;
    const RowGeometry geo = row_geometry(width, DType::kF32);
    EXPECT_EQ(ks[0]->block, geo.block);
    EXPECT_EQ(k.max_threads, geo.block);
    EXPECT_EQ(ks[0]->work, ir::DimExpr::size());
    if (width <= 1024) {
      EXPECT_EQ(geo.threads_per_row, 32);
      EXPECT_EQ(ks[0]->work_per_block, 8u);
    } else {
      EXPECT_EQ(geo.threads_per_row, 256);  // 1024 vectors of 4, about 4 per thread
      EXPECT_EQ(ks[0]->work_per_block, 1u);
    }
  }
  EXPECT_EQ(row_geometry(17, DType::kF32).vec, 1);
  EXPECT_EQ(row_geometry(1000, DType::kF16).vec, 8);
  EXPECT_EQ(row_geometry(6, DType::kF32).vec, 2);
}

TEST(LowerReduce, RefusesTheSizeInAReducedAxis) {
  OnnxBuilder b("m", 18);
  b.input("x", {int64_t{4}, kS}).node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{-1}}}).output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("Softmax"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("padding"), std::string::npos) << p.status().message();

  OnnxBuilder n("m", 18);
  n.input("x", {int64_t{4}, kS})
      .random_initializer("g", {1})
      .node("LayerNormalization", {"x", "g"}, {"y"})
      .output("y");
  auto q = lower_model(n, g);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
}

TEST(LowerReduce, RefusesSoftmaxOverAnotherAxisAndUsedStatistics) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, int64_t{4}, int64_t{8}})
      .node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{1}}})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("last axis"), std::string::npos) << p.status().message();

  OnnxBuilder n("m", 18);
  n.input("x", {kS, int64_t{8}})
      .random_initializer("g", {8})
      .node("LayerNormalization", {"x", "g"}, {"y", "mean"})
      .output("y")
      .output("mean");
  auto q = lower_model(n, g);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("Mean"), std::string::npos) << q.status().message();
}

TEST(LowerReduce, ReduceOverTrailingAxesFromAttributeOrInput) {
  OnnxBuilder b("m", 18);
  b.input("x", {kS, int64_t{3}, int64_t{5}})
      .int64_initializer("last2", {2}, {1, 2})
      .node("ReduceMean", {"x", "last2"}, {"m"}, {{"keepdims", int64_t{0}}})
      .node("ReduceMax", {"x", "last2"}, {"mx"})
      .output("m")
      .output("mx");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_NE(p->kernels[static_cast<size_t>(ks[0]->kernel)].body.find(
                "kiln::reduce_rows<float, float, 15"),
            std::string::npos);

  OnnxBuilder c("m", 18);
  c.input("x", {kS, int64_t{3}, int64_t{5}})
      .int64_initializer("mid", {1}, {1})
      .node("ReduceSum", {"x", "mid"}, {"y"})
      .output("y");
  auto q = lower_model(c, g);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("last axes"), std::string::npos) << q.status().message();
}

// Norms, softmax and reductions over several row lengths, in one module per precision.
OnnxBuilder all_rows_model() {
  OnnxBuilder b("rows", 18);
  for (int64_t w : {1, 3, 17, 768, 1000, 4096, 8192}) {
    const std::string s = std::to_string(w);
    b.input("x" + s, {kS, w})
        .input("r" + s, {kS, w})
        .random_initializer("g" + s, {w})
        .random_initializer("b" + s, {w})
        .int64_initializer("ax" + s, {1}, {-1})
        .node("Add", {"x" + s, "r" + s}, {"sum" + s})
        .node("LayerNormalization", {"sum" + s, "g" + s, "b" + s}, {"ln" + s})
        .node("LayerNormalization", {"x" + s, "g" + s}, {"lnnb" + s})
        .node("Softmax", {"x" + s}, {"sm" + s})
        .node("ReduceMean", {"x" + s, "ax" + s}, {"mean" + s})
        .node("ReduceSum", {"x" + s, "ax" + s}, {"rsum" + s})
        .node("ReduceMax", {"x" + s, "ax" + s}, {"max" + s})
        .output("ln" + s)
        .output("sum" + s)
        .output("lnnb" + s)
        .output("sm" + s)
        .output("mean" + s)
        .output("rsum" + s)
        .output("max" + s);
  }
  return b;
}

OnnxBuilder rms_model() {
  OnnxBuilder b("rms", 23);
  for (int64_t w : {1, 17, 1000, 4096}) {
    const std::string s = std::to_string(w);
    b.input("x" + s, {kS, w})
        .input("r" + s, {kS, w})
        .random_initializer("g" + s, {w})
        .node("Add", {"x" + s, "r" + s}, {"sum" + s})
        .node("RMSNormalization", {"sum" + s, "g" + s}, {"y" + s})
        .output("y" + s);
  }
  return b;
}

TEST(LowerReduce, EveryKernelCompilesForEveryArchAndPrecision) {
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    std::vector<KernelDef> kernels;
    for (const OnnxBuilder& b : {all_rows_model(), rms_model()}) {
      ir::Graph g;
      auto p = lower_model(b, g, prec);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      for (const KernelDef& k : p->kernels)  // the two programs share the boundary casts
        if (std::none_of(kernels.begin(), kernels.end(),
                         [&](const KernelDef& o) { return o.symbol == k.symbol; }))
          kernels.push_back(k);
    }
    NvrtcModule m{"rows", codegen_module_source(kernels, {1}), kernel_headers()};
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtc_compile(m, arch);
      EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    }
  }
}

TEST(LowerReduce, CodegenIsDeterministic) {
  ir::Graph g1, g2;
  auto p1 = lower_model(all_rows_model(), g1, Precision::kBF16);
  auto p2 = lower_model(all_rows_model(), g2, Precision::kBF16);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(codegen_module_source(p1->kernels, {}), codegen_module_source(p2->kernels, {}));
}

}  // namespace
}  // namespace kiln::compiler
