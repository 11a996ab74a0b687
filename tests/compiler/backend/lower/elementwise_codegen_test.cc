// Fused elementwise codegen (compiler/backend/lower/elementwise_codegen): path choice, broadcast
// indexing, literals, dtypes, determinism, and that every path NVRTC-compiles in every dtype.
#include "compiler/backend/lower/elementwise_codegen.h"

#include <gtest/gtest.h>

#include <set>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

EwGroup bias_relu_group(int64_t width = 16) {
  EwGroup g;
  g.inputs = {{DimExpr::size(), DimExpr::constant(width)}, {DimExpr::constant(width)}};
  g.out_shape = {DimExpr::size(), DimExpr::constant(width)};
  g.ops = {{"add", {EwOperand::input(0), EwOperand::input(1)}}, {"relu", {EwOperand::temp(0)}}};
  g.outputs = {1};
  return g;
}

bool has(const KernelDef& k, const std::string& s) { return k.body.find(s) != std::string::npos; }

TEST(ElementwiseCodegen, ScalarPathBroadcastIndexing) {
  KernelDef k = codegen_elementwise(bias_relu_group(17));  // 17 is no multiple of 4
  ASSERT_EQ(elementwise_path(bias_relu_group(17)), EwPath::kScalar);
  ASSERT_EQ(k.params.size(), 3u);
  EXPECT_EQ(k.params[0], "const float* __restrict__ in0");
  EXPECT_TRUE(has(k, "in0[i]")) << k.body;             // same shape: flat index
  EXPECT_TRUE(has(k, "in1[c1 * in1_st0]")) << k.body;  // row broadcast
  EXPECT_TRUE(has(k, "kiln::op_add(x0, x1)")) << k.body;
  EXPECT_TRUE(has(k, "kiln::op_relu(t0)")) << k.body;
  EXPECT_TRUE(has(k, "out0[i] = kiln::ew_store_f<float>(t1)")) << k.body;
  EXPECT_FALSE(has(k, "load_vec")) << k.body;
}

TEST(ElementwiseCodegen, RowVectorPathReadsABiasRowAsAVector) {
  const EwGroup g = bias_relu_group(16);
  ASSERT_EQ(elementwise_path(g), EwPath::kRowVector);
  EXPECT_EQ(elementwise_vector_width(g), 4);
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "kiln::load_vec<float, 4>(in1 + c1 * in1_st0)")) << k.body;
  EXPECT_TRUE(has(k, "kiln::store_vec<float, 4>(out0 + i, r0)")) << k.body;
}

TEST(ElementwiseCodegen, FlatVectorPathHasAScalarTail) {
  EwGroup g = bias_relu_group(17);
  g.inputs[1] = {DimExpr::constant(1)};  // a one-element input: read once per vector
  ASSERT_EQ(elementwise_path(g), EwPath::kFlatVector);
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "kiln::load_vec<float, 4>(in0 + i)")) << k.body;
  EXPECT_TRUE(has(k, "const float a1 = in1[0]")) << k.body;
  EXPECT_TRUE(has(k, "nv * 4 + kiln::global_thread_index()")) << k.body;
}

TEST(ElementwiseCodegen, RowBroadcastAlongTheInnerAxisIsReadOncePerVector) {
  EwGroup g = bias_relu_group(16);
  g.inputs[1] = {DimExpr::size(), DimExpr::constant(1)};  // one value per row
  ASSERT_EQ(elementwise_path(g), EwPath::kRowVector);
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "const float a1 = in1[c0 * in1_st0]")) << k.body;
}

TEST(ElementwiseCodegen, VectorWidthFollowsTheNarrowestDtype) {
  EwGroup g = bias_relu_group(16);
  g.input_dtypes = {DType::kF16, DType::kF16};
  g.output_dtypes = {DType::kF16};
  EXPECT_EQ(elementwise_vector_width(g), 8);
  KernelDef k = codegen_elementwise(g);
  EXPECT_EQ(k.params[0], "const kiln::f16* __restrict__ in0");
  EXPECT_TRUE(has(k, "kiln::load_vec<kiln::f16, 8>")) << k.body;
  g.output_dtypes = {DType::kF32};
  g.input_dtypes = {DType::kF32, DType::kF32};
  g.inputs[0] = {DimExpr::size(), DimExpr::constant(12)};
  g.inputs[1] = {DimExpr::constant(12)};
  g.out_shape = {DimExpr::size(), DimExpr::constant(12)};
  EXPECT_EQ(elementwise_path(g), EwPath::kRowVector);
  g.output_dtypes = {DType::kBool};  // 16 per vector does not divide 12... capped at 8
  EXPECT_EQ(elementwise_vector_width(g), 8);
  EXPECT_EQ(elementwise_path(g), EwPath::kScalar);
}

TEST(ElementwiseCodegen, ScalarOperandIsExactBitPattern) {
  EwGroup g = bias_relu_group();
  g.ops[0].args[1] = EwOperand::constant(0.1f);
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "__int_as_float(0x3dcccccd)")) << k.body;
}

TEST(ElementwiseCodegen, IntegerOpsComputeInLongLongAndWrapNarrowTypes) {
  EwGroup g;
  g.inputs = {{DimExpr::size()}, {DimExpr::size()}};
  g.input_dtypes = {DType::kI32, DType::kI32};
  g.out_shape = {DimExpr::size()};
  g.ops = {
      {"add", {EwOperand::input(0), EwOperand::input(1)}, EwType::kInt, EwType::kInt, DType::kI32},
      {"less",
       {EwOperand::temp(0), EwOperand::int_constant(5)},
       EwType::kInt,
       EwType::kInt,
       DType::kUnspecified}};
  g.outputs = {0, 1};
  g.output_dtypes = {DType::kI32, DType::kBool};
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "const long long t0 = kiln::wrap_i32(kiln::op_add(x0, x1))")) << k.body;
  EXPECT_TRUE(has(k, "kiln::op_less(t0, 5LL)")) << k.body;
  EXPECT_TRUE(has(k, "kiln::ew_store_i<unsigned char>(t1)")) << k.body;
}

TEST(ElementwiseCodegen, OperandsAreConvertedToTheOpsComputeType) {
  EwGroup g;
  g.inputs = {{DimExpr::size()}};
  g.input_dtypes = {DType::kI64};
  g.out_shape = {DimExpr::size()};
  g.ops = {{"identity",
            {EwOperand::input(0)},
            EwType::kFloat,
            EwType::kFloat,
            DType::kUnspecified}};  // Cast int64 -> f16
  g.outputs = {0};
  g.output_dtypes = {DType::kF16};
  KernelDef k = codegen_elementwise(g);
  EXPECT_TRUE(has(k, "kiln::op_identity(static_cast<float>(x0))")) << k.body;
  EXPECT_TRUE(has(k, "kiln::ew_store_f<kiln::f16>(t0)")) << k.body;
}

TEST(ElementwiseCodegen, ElementwiseFunctionsMatchOnnxOps) {
  EXPECT_EQ(ew_function_for_op("Add"), "add");
  EXPECT_EQ(ew_function_for_op("Relu"), "relu");
  EXPECT_EQ(ew_function_for_op("GreaterOrEqual"), "greater_equal");
  EXPECT_EQ(ew_function_for_op("MatMul"), "");
  EXPECT_EQ(ew_function_arity("add"), 2);
  EXPECT_EQ(ew_function_arity("tanh"), 1);
  EXPECT_EQ(ew_function_arity("where"), 3);
  EXPECT_EQ(ew_function_arity("nope"), 0);
}

TEST(ElementwiseCodegen, Deterministic) {
  EXPECT_EQ(codegen_elementwise(bias_relu_group()).body,
            codegen_elementwise(bias_relu_group()).body);
}

// Every path in every float dtype, plus integer and mixed kernels, for both archs.
TEST(ElementwiseCodegen, EveryPathCompilesWithNvrtc) {
  std::vector<KernelDef> kernels;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t width : {16, 17}) {
      EwGroup g = bias_relu_group(width);
      g.input_dtypes = {dt, dt};
      g.output_dtypes = {dt};
      kernels.push_back(codegen_elementwise(g));
      g.inputs[1] = {DimExpr::constant(1)};
      kernels.push_back(codegen_elementwise(g));
    }
  }
  EwGroup ints;
  ints.inputs = {{DimExpr::size(), DimExpr::constant(8)}, {DimExpr::constant(8)}};
  ints.input_dtypes = {DType::kI64, DType::kBool};
  ints.out_shape = {DimExpr::size(), DimExpr::constant(8)};
  ints.ops = {
      {"mul",
       {EwOperand::input(0), EwOperand::int_expr(DimExpr::size(2, 1))},
       EwType::kInt,
       EwType::kInt,
       DType::kUnspecified},
      {"where",
       {EwOperand::input(1), EwOperand::temp(0), EwOperand::int_constant(-1)},
       EwType::kInt,
       EwType::kInt,
       DType::kUnspecified},
      {"to_bool", {EwOperand::temp(1)}, EwType::kInt, EwType::kInt, DType::kUnspecified},
      {"identity", {EwOperand::temp(1)}, EwType::kFloat, EwType::kFloat, DType::kUnspecified}};
  ints.outputs = {1, 2, 3};
  ints.output_dtypes = {DType::kI32, DType::kBool, DType::kBF16};
  kernels.push_back(codegen_elementwise(ints));
  for (size_t i = 0; i < kernels.size(); ++i) kernels[i].symbol = "k" + std::to_string(i);
  NvrtcModule m{"ew_codegen_test", codegen_module_source(kernels, {1, 1000}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

// --- launch-configuration candidates -------------------------------------------------------

std::vector<std::string> labels(const std::vector<LaunchCandidate>& cs) {
  std::vector<std::string> out;
  for (const auto& c : cs) out.push_back(c.config);
  return out;
}

// What every candidate list must satisfy (compiler/backend/launch_plan.h) against the default
// kernel.
void expect_valid_candidates(const EwGroup& g, const std::vector<LaunchCandidate>& cs) {
  const KernelDef def = codegen_elementwise(g);
  const std::string default_label = elementwise_config_label(elementwise_default_config(g));
  std::set<std::string> seen;
  EXPECT_LE(cs.size(), 6u);
  for (const LaunchCandidate& c : cs) {
    SCOPED_TRACE(c.config);
    EXPECT_TRUE(seen.insert(c.config).second) << "duplicate label";
    EXPECT_NE(c.config, default_label);
    EXPECT_EQ(c.def.params, def.params);
    EXPECT_TRUE(c.def.symbol.empty());
    EXPECT_LE(c.block, c.def.max_threads);
    EXPECT_EQ(c.def.max_threads, c.block);  // as tight as the default's
    EXPECT_EQ(c.work, *ir::shape_numel(g.out_shape));
    EXPECT_EQ(c.grid_y, DimExpr::constant(1));
    EXPECT_EQ(c.shared_bytes, 0u);
    EXPECT_FALSE(c.def.body == def.body && c.block == 256u &&
                 c.work_per_block ==
                     256u * static_cast<uint32_t>(elementwise_default_config(g).vec))
        << "identical to the default";
  }
}

TEST(ElementwiseCandidates, TheDefaultIsTheMeasuredConfiguration) {
  const EwGroup row = bias_relu_group(16), scalar = bias_relu_group(17);
  const EwConfig d = elementwise_default_config(row);
  EXPECT_EQ(elementwise_config_label(d), "block=256 vec=4 items=1");
  EXPECT_EQ(elementwise_config_label(elementwise_default_config(scalar)),
            "block=256 vec=1 items=1");
  const KernelDef k = codegen_elementwise(row);
  EXPECT_EQ(k.max_threads, 256u);
  EXPECT_EQ(k.body, codegen_elementwise(row, d).body);
  EXPECT_EQ(k.params, codegen_elementwise(row, d).params);
}

TEST(ElementwiseCandidates, VectorPathsOfferBlocksItemsAndAHalfVector) {
  const EwGroup g = bias_relu_group(16);
  const auto cs = elementwise_candidates(g);
  EXPECT_EQ(labels(cs),
            (std::vector<std::string>{"block=128 vec=4 items=1", "block=512 vec=4 items=1",
                                      "block=1024 vec=4 items=1", "block=256 vec=4 items=4",
                                      "block=256 vec=2 items=1"}));
  expect_valid_candidates(g, cs);
  ASSERT_EQ(cs.size(), 5u);
  EXPECT_EQ(cs[0].work_per_block, 128u * 4);
  EXPECT_EQ(cs[3].work_per_block, 256u * 4 * 4);
  EXPECT_EQ(cs[4].work_per_block, 256u * 2);
  EXPECT_TRUE(has(cs[4].def, "kiln::load_vec<float, 2>(in1 + c1 * in1_st0)")) << cs[4].def.body;
  EXPECT_EQ(cs[0].def.body, codegen_elementwise(g).body);  // only the launch bounds differ
  // The flat path keeps its scalar tail at half width.
  EwGroup flat = bias_relu_group(17);
  flat.inputs[1] = {DimExpr::constant(1)};
  const auto fc = elementwise_candidates(flat);
  expect_valid_candidates(flat, fc);
  ASSERT_EQ(fc.size(), 5u);
  EXPECT_TRUE(has(fc[4].def, "nv * 2 + kiln::global_thread_index()")) << fc[4].def.body;
}

TEST(ElementwiseCandidates, HalfPrecisionHalvesToFourAndInt64ToTheScalarPath) {
  EwGroup g = bias_relu_group(16);
  g.input_dtypes = {DType::kF16, DType::kF16};
  g.output_dtypes = {DType::kF16};
  auto cs = elementwise_candidates(g);
  expect_valid_candidates(g, cs);
  ASSERT_EQ(cs.size(), 5u);
  EXPECT_EQ(cs[4].config, "block=256 vec=4 items=1");
  EXPECT_TRUE(has(cs[4].def, "kiln::load_vec<kiln::f16, 4>")) << cs[4].def.body;
  // int64: 2 per 16 bytes, so 8 bytes is one element: the scalar loop.
  g.input_dtypes = {DType::kI64, DType::kI64};
  g.output_dtypes = {DType::kI64};
  g.ops = {{"add",
            {EwOperand::input(0), EwOperand::input(1)},
            EwType::kInt,
            EwType::kInt,
            DType::kUnspecified}};
  g.outputs = {0};
  cs = elementwise_candidates(g);
  expect_valid_candidates(g, cs);
  ASSERT_EQ(cs.size(), 5u);
  EXPECT_EQ(cs[4].config, "block=256 vec=1 items=1");
  EXPECT_FALSE(has(cs[4].def, "load_vec")) << cs[4].def.body;
}

TEST(ElementwiseCandidates, ScalarPathOffersBlocksAndItems) {
  const EwGroup g = bias_relu_group(17);
  const auto cs = elementwise_candidates(g);
  EXPECT_EQ(labels(cs),
            (std::vector<std::string>{"block=128 vec=1 items=1", "block=512 vec=1 items=1",
                                      "block=1024 vec=1 items=1", "block=256 vec=1 items=4"}));
  expect_valid_candidates(g, cs);
}

TEST(ElementwiseCandidates, AConstantWorkDropsThoseThatCannotDiffer) {
  EwGroup g = bias_relu_group(16);
  g.inputs[0] = {DimExpr::constant(4), DimExpr::constant(16)};
  g.out_shape = {DimExpr::constant(4), DimExpr::constant(16)};  // 16 vectors: one block
  EXPECT_EQ(labels(elementwise_candidates(g)),
            (std::vector<std::string>{"block=256 vec=2 items=1"}));
  g.inputs[0] = {DimExpr::constant(96), DimExpr::constant(16)};
  g.out_shape = {DimExpr::constant(96), DimExpr::constant(16)};  // 384 vectors
  EXPECT_EQ(labels(elementwise_candidates(g)),
            (std::vector<std::string>{"block=128 vec=4 items=1", "block=512 vec=4 items=1",
                                      "block=256 vec=4 items=4", "block=256 vec=2 items=1"}));
  g.inputs[0] = {DimExpr::constant(1024), DimExpr::constant(16)};
  g.out_shape = {DimExpr::constant(1024), DimExpr::constant(16)};
  EXPECT_EQ(elementwise_candidates(g).size(), 5u);
}

TEST(ElementwiseCandidates, Deterministic) {
  const auto a = elementwise_candidates(bias_relu_group(16));
  const auto b = elementwise_candidates(bias_relu_group(16));
  ASSERT_EQ(labels(a), labels(b));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].def.body, b[i].def.body);
}

// Every candidate of every path, in every float dtype and an integer/mixed kernel, through
// candidate_kernels and the sized entry points, for both archs.
TEST(ElementwiseCandidates, EveryCandidateCompilesWithNvrtc) {
  std::vector<EwGroup> groups;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t width : {16, 17}) {
      EwGroup g = bias_relu_group(width);
      g.input_dtypes = {dt, dt};
      g.output_dtypes = {dt};
      groups.push_back(g);
      g.inputs[1] = {DimExpr::constant(1)};
      groups.push_back(g);
    }
  }
  EwGroup mixed;  // i64 and bool in, i32, bool and f32 out: 8 per vector, 4 at half width
  mixed.inputs = {{DimExpr::size(), DimExpr::constant(8)}, {DimExpr::constant(8)}};
  mixed.input_dtypes = {DType::kI64, DType::kBool};
  mixed.out_shape = {DimExpr::size(), DimExpr::constant(8)};
  mixed.ops = {
      {"where",
       {EwOperand::input(1), EwOperand::input(0), EwOperand::int_constant(-1)},
       EwType::kInt,
       EwType::kInt,
       DType::kUnspecified},
      {"to_bool", {EwOperand::temp(0)}, EwType::kInt, EwType::kInt, DType::kUnspecified},
      {"identity", {EwOperand::temp(0)}, EwType::kFloat, EwType::kFloat, DType::kUnspecified}};
  mixed.outputs = {0, 1, 2};
  mixed.output_dtypes = {DType::kI32, DType::kBool, DType::kF32};
  groups.push_back(mixed);
  LoweredProgram prog;
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelDef def = codegen_elementwise(groups[i]);
    def.symbol = "k" + std::to_string(i);
    prog.kernels.push_back(def);
    KernelLaunch l;
    l.kernel = static_cast<int>(i);
    l.candidates = elementwise_candidates(groups[i]);
    EXPECT_FALSE(l.candidates.empty());
    prog.steps.push_back(l);
  }
  const std::vector<SizedKernel> sized = candidate_kernels(prog, {17});
  EXPECT_GE(sized.size(), 4 * groups.size());
  NvrtcModule m{"ew_candidates_test", codegen_module_source({}, {}, sized), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::compiler
