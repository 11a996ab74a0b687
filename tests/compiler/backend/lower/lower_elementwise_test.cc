// Elementwise lowering decisions (compiler/backend/lower/lower_elementwise.cc): which nodes fuse
// into how many kernels, which values are stored, literals vs kernel inputs, the vector or scalar
// path, and that every kernel a model of all supported ops produces NVRTC-compiles for sm_80 and
// sm_90 in fp32, fp16 and bf16.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <set>
#include <string>
#include <variant>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/precision.h"
#include "tests/support/lower_harness.h"
#include "tests/support/onnx_builder.h"

namespace kiln::compiler {
namespace {

using testing::OnnxBuilder;
const std::string kS = "S";

using testing::kernel_steps;
using testing::lower_model;

const std::string& body_of(const LoweredProgram& p, const KernelLaunch& k) {
  return p.kernels[static_cast<size_t>(k.kernel)].body;
}

// Names of the tensors a launch passes (kSize excluded).
std::vector<std::string> arg_names(const ir::Graph& g, const KernelLaunch& k) {
  std::vector<std::string> out;
  for (const auto& a : k.args)
    if (a.kind == KernelArgRef::Kind::kValue) out.push_back(g.values[a.value].name);
  return out;
}

TEST(LowerElementwise, AChainFusesIntoOneKernelWithTheScalarBakedIn) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{64}})
      .random_initializer("bias", {64})
      .initializer("half", {}, {0.5f})
      .node("Add", {"x", "bias"}, {"a"})
      .node("Mul", {"a", "half"}, {"m"})
      .node("Gelu", {"m"}, {"g"})
      .node("Tanh", {"g"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(arg_names(g, *ks[0]), (std::vector<std::string>{"x", "bias", "y"}));
  const std::string& body = body_of(*p, *ks[0]);
  EXPECT_NE(body.find(float_literal(0.5f)), std::string::npos) << body;
  EXPECT_NE(body.find("kiln::op_gelu("), std::string::npos) << body;
  EXPECT_NE(body.find("kiln::load_vec<float, 4>"), std::string::npos) << body;  // row vector
}

TEST(LowerElementwise, ADiamondFusesAndStoresOnlyWhatOthersRead) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{8}})
      .node("Sigmoid", {"x"}, {"s"})
      .node("Mul", {"s", "x"}, {"m"})
      .node("Add", {"s", "m"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_EQ(arg_names(g, *ks[0]), (std::vector<std::string>{"x", "y"}));

  b.output("s");  // now the intermediate is read outside the group too
  auto p2 = lower_model(b, g);
  ASSERT_TRUE(p2.ok()) << p2.status().to_string();
  auto ks2 = kernel_steps(*p2);
  ASSERT_EQ(ks2.size(), 1u);
  EXPECT_EQ(arg_names(g, *ks2[0]), (std::vector<std::string>{"x", "s", "y"}));
}

// Relu's one reader needs the Softmax computed after it: Relu moves next to the Add
// (elementwise_sink) and the two fuse, as SiLU(gate) · up does after the up GEMM.
TEST(LowerElementwise, AProducerMovesToItsConsumerWhoseOtherInputComesLater) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{8}})
      .node("Relu", {"x"}, {"r"})
      .node("Softmax", {"x"}, {"sm"})
      .node("Add", {"r", "sm"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 2u);  // Softmax, Relu+Add
  EXPECT_NE(ks[0]->nodes.find("Softmax"), std::string::npos) << ks[0]->nodes;
  EXPECT_NE(ks[1]->nodes.find("Relu"), std::string::npos) << ks[1]->nodes;
  EXPECT_NE(ks[1]->nodes.find("Add"), std::string::npos) << ks[1]->nodes;

  b.output("r");  // a graph output stays where it is: three launches again
  auto p2 = lower_model(b, g);
  ASSERT_TRUE(p2.ok()) << p2.status().to_string();
  EXPECT_EQ(kernel_steps(*p2).size(), 3u);
}

// A node whose reader is an Add of a GEMM's output stays before the GEMM, which takes the Add
// as its residual epilogue: one GEMM step and the Relu, no separate Add.
TEST(LowerElementwise, AGemmResidualKeepsItsProducerBeforeTheGemm) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{8}})
      .random_initializer("w", {8, 8})
      .node("Relu", {"x"}, {"r"})
      .node("MatMul", {"x", "w"}, {"mm"})
      .node("Add", {"mm", "r"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_NE(ks[0]->nodes.find("Relu"), std::string::npos) << ks[0]->nodes;
  EXPECT_EQ(ks[0]->nodes.find("Add"), std::string::npos) << ks[0]->nodes;
  size_t gemms = 0;
  for (const auto& st : p->steps) gemms += std::holds_alternative<compiler::GemmLaunch>(st);
  EXPECT_EQ(gemms, 1u);
}

TEST(LowerElementwise, ADifferentOutputShapeStartsANewGroup) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{1}})
      .input("z", {kS, int64_t{8}})
      .node("Exp", {"x"}, {"e"})
      .node("Mul", {"e", "z"}, {"y"})  // [S,1] * [S,8] -> [S,8]
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(kernel_steps(*p).size(), 2u);
}

TEST(LowerElementwise, PathFollowsTheInnerDim) {
  for (int64_t width : {16, 17}) {
    SCOPED_TRACE(width);
    OnnxBuilder b("m", 20);
    b.input("x", {kS, width}).input("y", {kS, width}).node("Add", {"x", "y"}, {"z"}).output("z");
    OnnxBuilder c("m", 20);
    c.input("x", {kS, width})
        .random_initializer("b", {width})
        .node("Add", {"x", "b"}, {"z"})
        .output("z");
    ir::Graph g;
    auto flat = lower_model(b, g);
    ASSERT_TRUE(flat.ok()) << flat.status().to_string();
    const std::string& fb = body_of(*flat, *kernel_steps(*flat)[0]);
    EXPECT_NE(fb.find("load_vec<float, 4>(in0 + i)"), std::string::npos) << fb;  // flat + tail
    auto row = lower_model(c, g);
    ASSERT_TRUE(row.ok()) << row.status().to_string();
    const std::string& rb = body_of(*row, *kernel_steps(*row)[0]);
    EXPECT_EQ(rb.find("load_vec") != std::string::npos, width == 16) << rb;
  }
}

TEST(LowerElementwise, HalfPrecisionUsesEightWideVectors) {
  OnnxBuilder b("m", 20);
  b.input("x", {kS, int64_t{64}})
      .random_initializer("b", {64})
      .node("Add", {"x", "b"}, {"a"})
      .node("Relu", {"a"}, {"r"})
      .node("Mul", {"r", "r"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g, Precision::kF16);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  bool found = false;
  for (const auto* k : kernel_steps(*p))
    found |= body_of(*p, *k).find("kiln::load_vec<kiln::f16, 8>") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(LowerElementwise, IntegerChainsComputeInLongLong) {
  OnnxBuilder b("m", 20);
  b.typed_input("ids", onnx::TensorProto::INT64, {kS, int64_t{4}})
      .int64_initializer("big", {}, {(int64_t{1} << 40) + 3})
      .int64_initializer("ten", {}, {10})
      .node("Add", {"ids", "big"}, {"a"})
      .node("Less", {"a", "ten"}, {"l"})
      .node("Not", {"l"}, {"n"})
      .node("Cast", {"n"}, {"y"}, {{"to", int64_t{onnx::TensorProto::FLOAT}}})
      .output("y")
      .typed_output("a", onnx::TensorProto::INT64);
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 1u);
  const std::string& body = body_of(*p, *ks[0]);
  EXPECT_NE(body.find("1099511627779LL"), std::string::npos) << body;  // exact, not via float
  EXPECT_NE(body.find("const long long t0 = kiln::op_add(x0, 1099511627779LL)"), std::string::npos)
      << body;
}

TEST(LowerElementwise, ExpandIsABroadcastCopy) {
  OnnxBuilder b("m", 20);
  b.input("x", {int64_t{1}, int64_t{8}})
      .input("like", {kS, int64_t{8}})
      .node("Shape", {"like"}, {"shape"})
      .node("Expand", {"x", "shape"}, {"e"})
      .node("Add", {"e", "like"}, {"y"})
      .output("y");
  ir::Graph g;
  auto p = lower_model(b, g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto ks = kernel_steps(*p);
  ASSERT_EQ(ks.size(), 1u);  // Expand and Add in one kernel; the shape is not an input
  EXPECT_EQ(arg_names(g, *ks[0]), (std::vector<std::string>{"x", "like", "y"}));
}

// A model with every supported op; outputs keep every op alive.
OnnxBuilder all_ops_model() {
  OnnxBuilder b("all", 20);
  b.input("x", {kS, int64_t{24}})
      .input("y", {kS, int64_t{24}})
      .typed_input("ids", onnx::TensorProto::INT64, {kS, int64_t{24}})
      .typed_input("mask", onnx::TensorProto::BOOL, {kS, int64_t{1}})
      .initializer("lo", {}, {-0.5f})
      .initializer("hi", {}, {0.5f})
      .initializer("p", {}, {1.5f})
      .random_initializer("w", {24});
  const std::vector<std::string> unary = {"Neg",  "Abs",  "Exp", "Erf", "Tanh",    "Sigmoid",
                                          "Relu", "Gelu", "Sin", "Cos", "Identity"};
  for (const auto& op : unary) b.node(op, {"x"}, {"u_" + op}).output("u_" + op);
  b.node("Abs", {"x"}, {"ax"}).node("Add", {"ax", "p"}, {"axp"});
  for (const auto& op : {"Sqrt", "Reciprocal", "Log"}) {
    b.node(op, {"axp"}, {std::string("f_") + op}).output(std::string("f_") + op);
  }
  for (const auto& op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    b.node(op, {"x", "w"}, {std::string("b_") + op}).output(std::string("b_") + op);
  b.node("Pow", {"axp", "p"}, {"pow"}).output("pow");
  b.node("Clip", {"x", "lo", "hi"}, {"clip"}).output("clip");
  for (const auto& op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    b.node(op, {"x", "y"}, {std::string("c_") + op})
        .typed_output(std::string("c_") + op, onnx::TensorProto::BOOL);
  b.node("Greater", {"x", "y"}, {"gt"})
      .node("And", {"gt", "mask"}, {"and"})
      .node("Or", {"and", "mask"}, {"or"})
      .node("Not", {"or"}, {"not"})
      .node("Where", {"not", "x", "y"}, {"where"})
      .output("where");
  b.node("Cast", {"x"}, {"x16"}, {{"to", int64_t{onnx::TensorProto::FLOAT16}}})
      .node("Cast", {"x16"}, {"xi"}, {{"to", int64_t{onnx::TensorProto::INT32}}})
      .node("Cast", {"ids"}, {"idsf"}, {{"to", int64_t{onnx::TensorProto::BFLOAT16}}})
      .node("Cast", {"idsf"}, {"idsb"}, {{"to", int64_t{onnx::TensorProto::BOOL}}})
      .typed_output("xi", onnx::TensorProto::INT32)
      .typed_output("idsb", onnx::TensorProto::BOOL);
  b.node("Mul", {"ids", "ids"}, {"sq"}).typed_output("sq", onnx::TensorProto::INT64);
  return b;
}

TEST(LowerElementwise, EveryKernelCompilesForEveryArchAndPrecision) {
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    ir::Graph g;
    auto p = lower_model(all_ops_model(), g, prec);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_GE(p->kernels.size(), 1u);
    NvrtcModule m{"ew_all", codegen_module_source(p->kernels, {1, 17}), kernel_headers()};
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtc_compile(m, arch);
      EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    }
  }
}

TEST(LowerElementwise, CodegenIsDeterministic) {
  ir::Graph g1, g2;
  auto p1 = lower_model(all_ops_model(), g1, Precision::kF16);
  auto p2 = lower_model(all_ops_model(), g2, Precision::kF16);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_EQ(codegen_module_source(p1->kernels, {4}), codegen_module_source(p2->kernels, {4}));
}

// --- launch-configuration candidates -------------------------------------------------------

// compiler/backend/launch_plan.h's rules for one launch's candidates, against its default kernel.
void expect_valid_candidates(const LoweredProgram& p, const KernelLaunch& l) {
  const KernelDef& def = p.kernels[static_cast<size_t>(l.kernel)];
  SCOPED_TRACE(l.nodes + " (" + l.config + ")");
  ASSERT_FALSE(l.candidates.empty());
  EXPECT_LE(l.candidates.size(), 6u);
  // The default is what it was before tuning: 256 threads, one vector per thread.
  EXPECT_TRUE(l.config.starts_with("block=256 vec=") && l.config.ends_with(" items=1")) << l.config;
  const int vec = std::stoi(l.config.substr(std::string("block=256 vec=").size()));
  EXPECT_EQ(l.block, 256u);
  EXPECT_EQ(l.work_per_block, 256u * static_cast<uint32_t>(vec));
  EXPECT_EQ(def.max_threads, 256u);
  std::set<std::string> seen;
  for (const LaunchCandidate& c : l.candidates) {
    SCOPED_TRACE(c.config);
    EXPECT_TRUE(seen.insert(c.config).second) << "duplicate label";
    EXPECT_NE(c.config, l.config);
    EXPECT_EQ(c.def.params, def.params);
    EXPECT_LE(c.block, c.def.max_threads);
    EXPECT_EQ(c.work, l.work);
    EXPECT_EQ(c.grid_y, l.grid_y);
    EXPECT_EQ(c.shared_bytes, 0u);
  }
}

TEST(LowerElementwise, EveryLaunchHasCandidatesWithTheDefaultsArguments) {
  for (Precision prec : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(std::string(precision_name(prec)));
    ir::Graph g;
    auto p = lower_model(all_ops_model(), g, prec);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto ks = kernel_steps(*p);
    ASSERT_FALSE(ks.empty());
    for (const KernelLaunch* k : ks) expect_valid_candidates(*p, *k);
  }
}

TEST(LowerElementwise, CandidatesAreDeterministic) {
  ir::Graph g1, g2;
  auto p1 = lower_model(all_ops_model(), g1, Precision::kBF16);
  auto p2 = lower_model(all_ops_model(), g2, Precision::kBF16);
  ASSERT_TRUE(p1.ok() && p2.ok());
  const auto a = candidate_kernels(*p1, {4}), b = candidate_kernels(*p2, {4});
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].def.symbol, b[i].def.symbol);
}

// Every candidate of the all-ops model through candidate_kernels and its sized entry points,
// one precision per test.
class LowerElementwiseCandidates : public ::testing::TestWithParam<Precision> {};

TEST_P(LowerElementwiseCandidates, CompileForSm80AndSm90) {
  ir::Graph g;
  auto p = lower_model(all_ops_model(), g, GetParam());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const std::vector<SizedKernel> sized = candidate_kernels(*p, {17});
  EXPECT_GE(sized.size(), 4 * kernel_steps(*p).size());
  NvrtcModule m{"ew_candidates", codegen_module_source({}, {}, sized), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, LowerElementwiseCandidates,
                         ::testing::Values(Precision::kF32, Precision::kF16, Precision::kBF16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(precision_name(info.param));
                         });

}  // namespace
}  // namespace kiln::compiler
