// Norm prologues (compiler/backend/lower/reduce_codegen.h, "Norm prologues"): a LayerNorm or
// RMSNorm whose only reader is a GEMM's A becomes its skinny kernel's prologue. The program is
// [norm (before_cublaslt)] [skinny kernel reading the norm's input, scale and bias] [GEMM], and
// the norm keeps its own always-run launch wherever the skinny kernel cannot take it: another
// reader, no small planned size, fusion off. NVRTC for sm_80 and sm_90 of every prologue in
// every dtype, in both forms of the kernel (CUDA cores; tensor cores in fp16 and bf16). No GPU.
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/skinny_gemm_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/passes/fuse_gated_mlp.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using kiln::testing::import_text_ok;

const std::string kHead = R"(<ir_version: 10, opset_import: ["" : 23]> )";

struct Lowered {
  ir::Graph g;
  LoweredProgram p;
};

Lowered lower_graph_ok(ir::Graph g, std::vector<int64_t> planned, bool fuse = true) {
  Lowered out;
  out.g = std::move(g);
  LowerOptions opts;
  opts.planned_sizes = std::move(planned);
  opts.skinny_max_m = 16;
  opts.fuse = fuse;
  auto p = lower_graph(out.g, opts);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) out.p = std::move(*p);
  return out;
}

Lowered lower_text(const std::string& text, std::vector<int64_t> planned, bool fuse = true) {
  return lower_graph_ok(import_text_ok(kHead + text, ImportOptions{"N", {}}), std::move(planned),
                        fuse);
}

const KernelLaunch* kernel_at(const Lowered& l, size_t i) {
  return i < l.p.steps.size() ? std::get_if<KernelLaunch>(&l.p.steps[i]) : nullptr;
}
const GemmLaunch* gemm_at(const Lowered& l, size_t i) {
  return i < l.p.steps.size() ? std::get_if<GemmLaunch>(&l.p.steps[i]) : nullptr;
}
const std::string& body_of(const Lowered& l, const KernelLaunch& k) {
  return l.p.kernels[static_cast<size_t>(k.kernel)].body;
}
int value_named(const Lowered& l, const std::string& name) {
  for (size_t v = 0; v < l.g.values.size(); ++v)
    if (l.g.values[v].name == name) return static_cast<int>(v);
  ADD_FAILURE() << "no value " << name;
  return -1;
}

const std::string kRmsDense = R"(g (float[N, 8] x) => (float[N, 4] y)
  <float[8] s = {1, 2, 3, 4, 5, 6, 7, 8}, float[8, 4] w = {
    1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1},
   float[4] b = {1, 2, 3, 4}>
{
  h = RMSNormalization <epsilon: float = 0.25> (x, s)
  t = MatMul (h, w)
  y = Add (t, b)
}
)";

TEST(NormPrologue, RmsNormBeforeAGemmRunsInItsSkinnyKernel) {
  Lowered l = lower_text(kRmsDense, {1, 4, 32});
  ASSERT_EQ(l.p.steps.size(), 3u);
  const KernelLaunch* norm = kernel_at(l, 0);
  const KernelLaunch* skinny = kernel_at(l, 1);
  const GemmLaunch* gm = gemm_at(l, 2);
  ASSERT_TRUE(norm != nullptr && skinny != nullptr && gm != nullptr);
  // The norm runs only where cuBLASLt computes the GEMM; it writes h, which the GEMM reads.
  EXPECT_TRUE(norm->before_cublaslt);
  EXPECT_FALSE(norm->run_sizes.has_value());
  EXPECT_EQ(norm->args[norm->args.size() - 2].value, value_named(l, "h"));
  EXPECT_EQ(gm->a, value_named(l, "h"));
  EXPECT_EQ(gm->skinny_sizes, (std::vector<int64_t>{1, 4}));
  // The skinny kernel reads x, the weight and the scale; it writes y.
  EXPECT_EQ(*skinny->run_sizes, (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(skinny->before_cublaslt);
  ASSERT_GE(skinny->args.size(), 5u);
  EXPECT_EQ(skinny->args[0].value, value_named(l, "x"));
  EXPECT_EQ(skinny->args[1].value, gm->b);
  EXPECT_EQ(skinny->args[2].value, value_named(l, "s"));
  EXPECT_EQ(skinny->args[3].value, gm->bias);
  EXPECT_EQ(skinny->args[4].value, gm->d);
  EXPECT_EQ(skinny->nodes, gm->nodes + " (skinny, norm prologue)");
  const std::string& body = body_of(l, *skinny);
  EXPECT_NE(body.find(", 1>(a, w, bias, nullptr, d, "), std::string::npos) << body;
  EXPECT_NE(body.find("kiln::SkinnyNorm<float>{norm_scale, nullptr, float(0.25)}"),
            std::string::npos)
      << body;
  EXPECT_NE(l.p.kernels[static_cast<size_t>(skinny->kernel)].params[2].find("norm_scale"),
            std::string::npos);
  // Every candidate geometry keeps the prologue (one parameter list).
  for (const LaunchCandidate& c : skinny->candidates)
    EXPECT_NE(c.def.body.find("kiln::SkinnyNorm<float>"), std::string::npos) << c.config;
}

// GPT-2's form: LayerNorm with a bias, viewed [-1, K] into a Gemm whose C is the bias.
TEST(NormPrologue, LayerNormThroughAViewIntoAGemmWithItsBias) {
  Lowered l = lower_text(R"(g (float[2, N, 4] x) => (float[2, N, 3] y)
  <float[4] s = {1, 1, 2, 2}, float[4] o = {0, 1, 0, 1}, float[4, 3] w = {
    1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, float[3] c = {1, 2, 3}, int64[2] flat = {-1, 4},
   int64[3] back = {2, -1, 3}>
{
  h = LayerNormalization <axis: int = -1> (x, s, o)
  h2 = Reshape (h, flat)
  t = Gemm (h2, w, c)
  y = Reshape (t, back)
}
)",
                         {1, 2, 16});
  ASSERT_EQ(l.p.steps.size(), 3u);
  const KernelLaunch* norm = kernel_at(l, 0);
  const KernelLaunch* skinny = kernel_at(l, 1);
  ASSERT_TRUE(norm != nullptr && skinny != nullptr && gemm_at(l, 2) != nullptr);
  EXPECT_TRUE(norm->before_cublaslt);
  // M = 2S: at most 16 rows at sizes 1 and 2 (not 16).
  EXPECT_EQ(*skinny->run_sizes, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(skinny->args[0].value, value_named(l, "x"));
  EXPECT_EQ(skinny->args[2].value, value_named(l, "s"));
  EXPECT_EQ(skinny->args[3].value, value_named(l, "o"));
  const std::string& body = body_of(l, *skinny);
  EXPECT_NE(body.find("kiln::SkinnyNorm<float>{norm_scale, norm_bias, float(9.99999975e-06)}"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find(", 3>(a, w, bias, nullptr, d"), std::string::npos) << body;
}

// The gated MLP after a norm: [norm] [skinny gated kernel with the prologue] [GEMM] [gating].
TEST(NormPrologue, GatedMlpAfterANorm) {
  ir::Graph g = import_text_ok(kHead + R"(g (float[N, 4] x) => (float[N, 2] y)
  <float[4] s = {1, 2, 3, 4}, float[4, 2] wg = {1, 0, 0, 1, 1, 0, 0, 1},
   float[4, 2] wu = {0, 1, 1, 0, 0, 1, 1, 0}>
{
  h = RMSNormalization (x, s)
  gt = MatMul (h, wg)
  sg = Sigmoid (gt)
  a = Mul (gt, sg)
  u = MatMul (h, wu)
  y = Mul (a, u)
}
)",
                               ImportOptions{"N", {}});
  ASSERT_TRUE(fuse_gated_mlp(g).ok());
  ASSERT_EQ(kiln::testing::count_ops(g, "GatedMatMul", "kiln"), 1);
  Lowered l = lower_graph_ok(std::move(g), {1, 32});
  ASSERT_EQ(l.p.steps.size(), 4u);
  const KernelLaunch* norm = kernel_at(l, 0);
  const KernelLaunch* skinny = kernel_at(l, 1);
  const KernelLaunch* pairs = kernel_at(l, 3);
  ASSERT_TRUE(norm != nullptr && skinny != nullptr && gemm_at(l, 2) != nullptr && pairs);
  EXPECT_TRUE(norm->before_cublaslt);
  EXPECT_TRUE(pairs->after_cublaslt);
  EXPECT_EQ(skinny->args[0].value, value_named(l, "x"));
  EXPECT_NE(body_of(l, *skinny).find(", true, 1>(a, w, nullptr, nullptr, d"), std::string::npos)
      << body_of(l, *skinny);
}

// fp16 with K a multiple of 8 and up to 16 rows: the skinny kernel is the CUDA-core form at one
// row and has both forms (one row on CUDA cores, more on tensor cores) where M > 1, and both
// apply the norm.
TEST(NormPrologue, BothFormsOfTheSkinnyKernelTakeIt) {
  const std::string half = R"(g (float16[N, 8] x) => (float16[N, 4] y)
  <float[8] s32 = {1, 2, 3, 4, 5, 6, 7, 8}, float[8, 4] w32 = {
    1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}>
{
  s = Cast <to: int = 10> (s32)
  w = Cast <to: int = 10> (w32)
  h = RMSNormalization (x, s)
  y = MatMul (h, w)
}
)";
  Lowered l = lower_text(half, {1, 8, 32});
  ASSERT_EQ(l.p.steps.size(), 3u);
  const KernelLaunch* norm = kernel_at(l, 0);
  const KernelLaunch* skinny = kernel_at(l, 1);
  ASSERT_TRUE(norm != nullptr && skinny != nullptr && gemm_at(l, 2) != nullptr);
  EXPECT_TRUE(norm->before_cublaslt);
  EXPECT_EQ(*skinny->run_sizes, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(skinny->args[0].value, value_named(l, "x"));
  EXPECT_EQ(skinny->config.find("mma_ksplit="), std::string::npos) << skinny->config;
  EXPECT_NE(body_of(l, *skinny).find("kiln::skinny_gemm<"), std::string::npos);
  // Size 8 takes candidate 0, the two forms, by the lowering's decision (from 3 rows); size 1
  // the default.
  ASSERT_EQ(skinny->tuned.count(8), 1u);
  EXPECT_EQ(skinny->tuned.count(1), 0u);
  EXPECT_EQ(skinny->tuned.at(8).candidate, 0);
  EXPECT_EQ(skinny->tuned.at(8).source, "heuristic");
  ASSERT_FALSE(skinny->candidates.empty());
  EXPECT_NE(skinny->candidates[0].config.find("mma_ksplit="), std::string::npos);
  for (const std::string& body : {body_of(l, *skinny), skinny->candidates[0].def.body}) {
    EXPECT_NE(body.find(", 1>(a, w, nullptr, nullptr, d, "), std::string::npos) << body;
    EXPECT_NE(body.find("kiln::SkinnyNorm<kiln::f16>{norm_scale, nullptr, "), std::string::npos)
        << body;
  }
  EXPECT_NE(skinny->candidates[0].def.body.find("kiln::skinny_gemm_dual<"), std::string::npos);
}

// The norm keeps a launch of its own that always runs, and the GEMM's skinny kernel reads the
// norm's output, when: the norm has another reader; no planned size is small; fusion is off.
TEST(NormPrologue, OtherwiseTheNormRunsOnItsOwn) {
  const std::string two_readers = R"(g (float[N, 8] x) => (float[N, 4] y, float[N, 8] h)
  <float[8] s = {1, 2, 3, 4, 5, 6, 7, 8}, float[8, 4] w = {
    1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}>
{
  h = RMSNormalization (x, s)
  y = MatMul (h, w)
}
)";
  struct Case {
    const char* what;
    const std::string* text;
    std::vector<int64_t> planned;
    bool fuse;
    size_t steps;
  };
  for (const Case& c : {Case{"a graph output", &two_readers, {1, 32}, true, 3},
                        Case{"no small size", &kRmsDense, {32}, true, 2},
                        Case{"fusion off", &kRmsDense, {1, 32}, false, 0}}) {
    SCOPED_TRACE(c.what);
    Lowered l = lower_text(*c.text, c.planned, c.fuse);
    if (c.steps > 0) {
      ASSERT_EQ(l.p.steps.size(), c.steps);
    }
    const KernelLaunch* norm = kernel_at(l, 0);
    ASSERT_NE(norm, nullptr);
    EXPECT_FALSE(norm->before_cublaslt);
    for (const LaunchStep& step : l.p.steps)
      if (const auto* k = std::get_if<KernelLaunch>(&step); k && k->run_sizes) {
        EXPECT_EQ(k->args[0].value, value_named(l, "h"));
        EXPECT_EQ(body_of(l, *k).find("SkinnyNorm"), std::string::npos);
      }
  }
}

TEST(NormPrologue, EveryPrologueCompilesWithNvrtc) {
  std::vector<KernelDef> kernels;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (NormPrologue norm : {NormPrologue::kRms, NormPrologue::kLayer, NormPrologue::kLayerBias}) {
      SkinnyGemm s;
      s.dtype = dt;
      s.k = 1000;
      s.n = 66;
      s.m = ir::DimExpr::size();
      s.norm = norm;
      s.norm_epsilon = 1e-6f;
      s.epilogue = Epilogue::kBiasGelu;
      s.has_c = true;
      if (dt != DType::kF32) {  // 16 rows a pass: both forms, each with the prologue
        s.max_m = 16;
        const std::optional<SkinnyGeometry> both = skinny_rows_geometry(s);
        ASSERT_TRUE(both.has_value());
        kernels.push_back(codegen_skinny_gemm(s, *both));
        if (norm != NormPrologue::kLayer) {
          SkinnyGemm gated = s;
          gated.epilogue = Epilogue::kNone;
          gated.has_c = false;
          gated.gate = GateAct::kSilu;
          kernels.push_back(codegen_skinny_gemm(gated, *skinny_rows_geometry(gated)));
        }
      }
      s.max_m = 4;
      const SkinnyGeometry geo = skinny_geometry(s);
      EXPECT_EQ(geo.mma_ksplit, 0);
      if (norm == NormPrologue::kLayer) {
        SkinnyGeometry chunked = geo;  // the row means read ahead of chunked weight loads
        chunked.chunk = 1;
        kernels.push_back(codegen_skinny_gemm(s, chunked));
      } else {
        kernels.push_back(codegen_skinny_gemm(s, geo));
      }
      if (dt == DType::kF16 && norm == NormPrologue::kLayerBias)
        for (const SkinnyGeometry& g : skinny_candidate_geometries(s))
          kernels.push_back(codegen_skinny_gemm(s, g));
      if (norm != NormPrologue::kLayer) {
        s.epilogue = Epilogue::kNone;
        s.has_c = false;
        s.gate = GateAct::kSilu;
        s.max_m = 4;
        kernels.push_back(codegen_skinny_gemm(s, skinny_geometry(s)));
      }
    }
  for (size_t i = 0; i < kernels.size(); ++i) kernels[i].symbol = "prologue_" + std::to_string(i);
  NvrtcModule m{"norm_prologue_test", codegen_module_source(kernels, {1}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::compiler
