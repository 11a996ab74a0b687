// Skinny GEMM lowering and codegen (compiler/backend/lower/skinny_gemm_codegen.h): which GEMMs
// get a skinny kernel and at which planned sizes (M <= 16), the gated pair it makes with the
// cuBLASLt step, the compile-time transposition of [K, N] weights (exact bytes), the cases left
// to cuBLASLt alone (no small planned size, a shared weight, a batch, M too large), the
// geometry heuristic and candidates, and NVRTC for sm_80 and sm_90 in every dtype. No GPU.
#include <gtest/gtest.h>

#include <cstring>
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

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 20]> )";

// "float[r, c] name = {0, 1, 2, ...}": element i holds i, so a transposition is visible.
std::string counting(const std::string& name, int rows, int cols) {
  std::string values;
  for (int i = 0; i < rows * cols; ++i) values += (i ? ", " : "") + std::to_string(i);
  return "float[" + std::to_string(rows) + ", " + std::to_string(cols) + "] " + name + " = {" +
         values + "}";
}

struct Lowered {
  ir::Graph g;
  LoweredProgram p;
};

Lowered lower_text(const std::string& text, std::vector<int64_t> planned, int64_t max_m = 16,
                   std::vector<int64_t> specialised = {}, int64_t max_m_timed = 0) {
  Lowered out;
  out.g = import_text_ok(kHead + text, ImportOptions{"N", {}});
  LowerOptions opts;
  opts.planned_sizes = std::move(planned);
  opts.specialised_sizes = std::move(specialised);
  opts.skinny_max_m = max_m;
  opts.skinny_max_m_timed = max_m_timed;
  auto p = lower_graph(out.g, opts);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (p.ok()) out.p = std::move(*p);
  return out;
}

const GemmLaunch* gemm_at(const Lowered& l, size_t i) {
  return i < l.p.steps.size() ? std::get_if<GemmLaunch>(&l.p.steps[i]) : nullptr;
}
const KernelLaunch* kernel_at(const Lowered& l, size_t i) {
  return i < l.p.steps.size() ? std::get_if<KernelLaunch>(&l.p.steps[i]) : nullptr;
}

float element(const ir::Constant& c, size_t i) {
  float f;
  std::memcpy(&f, c.bytes.data() + 4 * i, 4);
  return f;
}

const std::string kDense = "g (float[N, 3] x) => (float[N, 5] y) <" + counting("w", 3, 5) +
                           R"(, float[5] b = {1, 2, 3, 4, 5}>
{
  h = MatMul (x, w)
  y = Add (h, b)
}
)";

TEST(SkinnyGemm, SmallPlannedSizesGetAGatedKernelAndATransposedWeight) {
  Lowered l = lower_text(kDense, {1, 4, 16, 32, 64});
  ASSERT_EQ(l.p.steps.size(), 2u);
  const KernelLaunch* k = kernel_at(l, 0);
  const GemmLaunch* gm = gemm_at(l, 1);
  ASSERT_NE(k, nullptr);
  ASSERT_NE(gm, nullptr);
  const std::vector<int64_t> want = {1, 4, 16};
  EXPECT_EQ(gm->skinny_sizes, want);
  ASSERT_TRUE(k->run_sizes.has_value());
  EXPECT_EQ(*k->run_sizes, want);
  EXPECT_EQ(gm->epilogue, Epilogue::kBias);
  EXPECT_TRUE(gm->trans_b);
  // Both read the [N, K] copy: w[k][n] = 5k + n lands at [n][k].
  const ir::Value& w = l.g.values[gm->b];
  EXPECT_EQ(w.name, "w/nk");
  ASSERT_TRUE(w.constant.has_value());
  EXPECT_EQ(w.constant->dims, (std::vector<int64_t>{5, 3}));
  for (int n = 0; n < 5; ++n)
    for (int kk = 0; kk < 3; ++kk) EXPECT_EQ(element(*w.constant, n * 3 + kk), 5.0f * kk + n);
  ASSERT_GE(k->args.size(), 2u);
  EXPECT_EQ(k->args[1].value, gm->b);
  EXPECT_EQ(k->args.back().kind, KernelArgRef::Kind::kSize);
  EXPECT_EQ(k->nodes, gm->nodes + " (skinny)");
  EXPECT_FALSE(k->candidates.empty());
  const std::string& body = l.p.kernels[static_cast<size_t>(k->kernel)].body;
  EXPECT_NE(body.find("kiln::skinny_gemm<float, 3, 5,"), std::string::npos) << body;
  // The kernel waits for its predecessors itself, after its first weight loads.
  EXPECT_TRUE(l.p.kernels[static_cast<size_t>(k->kernel)].enters_itself);
}

// kiln.GatedMatMul: the skinny kernel writes the gated output at the small sizes; elsewhere the
// GEMM writes the [M, 2N] product and the gating kernel, run after cuBLASLt only, the output.
const std::string kGated = "g (float[N, 3] x) => (float[N, 2] y) <" + counting("wg", 3, 2) + ", " +
                           counting("wu", 3, 2) + R"(>
{
  g = MatMul (x, wg)
  s = Sigmoid (g)
  a = Mul (g, s)
  u = MatMul (x, wu)
  y = Mul (a, u)
}
)";

ir::Graph gated_graph() {
  ir::Graph g = import_text_ok(kHead + kGated, ImportOptions{"N", {}});
  EXPECT_TRUE(fuse_gated_mlp(g).ok());
  EXPECT_EQ(kiln::testing::count_ops(g, "GatedMatMul", "kiln"), 1);
  return g;
}

TEST(SkinnyGemm, AGatedGemmIsOneKernelAtSmallSizes) {
  Lowered l;
  l.g = gated_graph();
  LowerOptions opts;
  opts.planned_sizes = {1, 4, 32};
  opts.skinny_max_m = 16;
  auto p = lower_graph(l.g, opts);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  l.p = std::move(*p);
  ASSERT_EQ(l.p.steps.size(), 3u);
  const KernelLaunch* k = kernel_at(l, 0);
  const GemmLaunch* gm = gemm_at(l, 1);
  const KernelLaunch* pairs = kernel_at(l, 2);
  ASSERT_TRUE(k != nullptr && gm != nullptr && pairs != nullptr);
  EXPECT_EQ(*k->run_sizes, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(gm->skinny_sizes, (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(pairs->run_sizes.has_value());
  EXPECT_TRUE(pairs->after_cublaslt);
  EXPECT_FALSE(k->after_cublaslt);
  // The skinny kernel writes y; the GEMM a [N, 4] product, which the gating kernel reads.
  const int y = k->args[2].value;
  EXPECT_EQ(l.g.values[y].name, "y");
  EXPECT_EQ(l.g.values[gm->d].shape.back(), ir::DimExpr::constant(4));
  EXPECT_EQ(pairs->args[0].value, gm->d);
  EXPECT_EQ(pairs->args[1].value, y);
  // Two outputs a thread: four fp32 inputs, 16 bytes.
  EXPECT_EQ(pairs->work, ir::DimExpr::size(1));
  const std::string& body = l.p.kernels[static_cast<size_t>(k->kernel)].body;
  EXPECT_NE(body.find(", 3, false, false, true>(a, w, nullptr, nullptr, d"), std::string::npos)
      << body;
  EXPECT_NE(l.p.kernels[static_cast<size_t>(pairs->kernel)].body.find("gated_pairs<float, 3, 2>"),
            std::string::npos);
  // Other block sizes for the autotuner (which then also has the gating's time for the GEMM
  // tuner), the same kernel body under other launch bounds.
  EXPECT_EQ(pairs->config, "block=256");
  ASSERT_EQ(pairs->candidates.size(), 2u);
  for (const LaunchCandidate& c : pairs->candidates) {
    EXPECT_EQ(c.config, "block=" + std::to_string(c.block));
    EXPECT_EQ(c.work_per_block, c.block);
    EXPECT_EQ(c.def.max_threads, c.block);
    EXPECT_EQ(c.work, pairs->work);
    EXPECT_EQ(c.def.body, l.p.kernels[static_cast<size_t>(pairs->kernel)].body);
  }
  // No small size: the GEMM and the gating kernel, which then always runs.
  opts.planned_sizes = {32};
  l.g = gated_graph();
  auto big = lower_graph(l.g, opts);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  ASSERT_EQ(big->steps.size(), 2u);
  EXPECT_FALSE(std::get<KernelLaunch>(big->steps[1]).after_cublaslt);
}

TEST(SkinnyGemm, NoSmallPlannedSizeLeavesCublasLtAlone) {
  for (const std::vector<int64_t>& planned : {std::vector<int64_t>{}, {17, 32}}) {
    Lowered l = lower_text(kDense, planned);
    ASSERT_EQ(l.p.steps.size(), 1u);
    const GemmLaunch* gm = gemm_at(l, 0);
    ASSERT_NE(gm, nullptr);
    EXPECT_TRUE(gm->skinny_sizes.empty());
    EXPECT_FALSE(gm->trans_b);
    EXPECT_EQ(l.g.values[gm->b].name, "w");
  }
}

TEST(SkinnyGemm, TheConfiguredMaximumMLimitsTheSizes) {
  Lowered four = lower_text(kDense, {1, 4, 8}, 4);
  ASSERT_EQ(four.p.steps.size(), 2u);
  EXPECT_EQ(gemm_at(four, 1)->skinny_sizes, (std::vector<int64_t>{1, 4}));
  Lowered off = lower_text(kDense, {1, 4, 8}, 0);  // compilation.skinny_gemm_max_m: 0
  ASSERT_EQ(off.p.steps.size(), 1u);
  EXPECT_TRUE(gemm_at(off, 0)->skinny_sizes.empty());
}

TEST(SkinnyGemm, MoreRowsOnlyAtTheSpecialisedSizesTheTunerTimes) {
  // skinny_gemm_max_m: auto with a GPU to time on: 16 rows at compile sizes 1 and 8, 4 at the
  // capture sizes 4 and 16 (no kernel specialised for them, nothing timed there).
  Lowered l = lower_text(kDense, {1, 4, 8, 16}, 4, {1, 8}, 16);
  ASSERT_EQ(l.p.steps.size(), 2u);
  EXPECT_EQ(gemm_at(l, 1)->skinny_sizes, (std::vector<int64_t>{1, 4, 8}));
  // Without timing (the limit 4 everywhere) 8 goes to cuBLASLt.
  Lowered untimed = lower_text(kDense, {1, 4, 8, 16}, 4, {1, 8}, 4);
  EXPECT_EQ(gemm_at(untimed, 1)->skinny_sizes, (std::vector<int64_t>{1, 4}));
  // The kernel's passes take up to 16 rows (the larger limit): its text is that of the limit 16.
  Lowered sixteen = lower_text(kDense, {1, 4, 8, 16}, 16, {1, 8});
  auto body = [](const Lowered& x) {
    return x.p.kernels.at(static_cast<size_t>(kernel_at(x, 0)->kernel)).body;
  };
  EXPECT_EQ(body(l), body(sixteen));
  EXPECT_NE(body(l), body(untimed));
}

TEST(SkinnyGemm, ASharedWeightIsNotCopied) {
  const std::string text =
      "g (float[N, 3] x) => (float[N, 5] y, float[N, 5] z) <" + counting("w", 3, 5) + R"(>
{
  y = MatMul (x, w)
  z = MatMul (x, w)
}
)";
  Lowered l = lower_text(text, {1, 8});
  for (const auto& s : l.p.steps) {
    const auto* gm = std::get_if<GemmLaunch>(&s);
    ASSERT_NE(gm, nullptr) << "no kernel step expected";
    EXPECT_TRUE(gm->skinny_sizes.empty());
    EXPECT_FALSE(gm->trans_b);
  }
}

TEST(SkinnyGemm, MTooLargeOrBatchedStaysOnCublasLt) {
  // M = 32N: over 16 at every size.
  const std::string rows32 = "g (float[N, 32, 3] x) => (float[N, 32, 5] y) <" +
                             counting("w", 3, 5) + ">\n{\n  y = MatMul (x, w)\n}\n";
  Lowered a = lower_text(rows32, {1, 2});
  ASSERT_EQ(a.p.steps.size(), 1u);
  EXPECT_TRUE(gemm_at(a, 0)->skinny_sizes.empty());
  // A batched MatMul (both operands activations).
  const std::string batched =
      "g (float[N, 2, 3] x, float[N, 3, 5] v) => (float[N, 2, 5] y)\n{\n  y = MatMul (x, v)\n}\n";
  Lowered b = lower_text(batched, {1, 2});
  ASSERT_EQ(b.p.steps.size(), 1u);
  EXPECT_TRUE(gemm_at(b, 0)->skinny_sizes.empty());
}

TEST(SkinnyGemm, GemmWithTransBUsesItsWeightAsIs) {
  const std::string text = "g (float[N, 3] x) => (float[N, 5] y) <" + counting("wt", 5, 3) +
                           ">\n{\n  y = Gemm <transB = 1, alpha = 0.5> (x, wt)\n}\n";
  Lowered l = lower_text(text, {2});
  ASSERT_EQ(l.p.steps.size(), 2u);
  const GemmLaunch* gm = gemm_at(l, 1);
  ASSERT_NE(gm, nullptr);
  EXPECT_EQ(l.g.values[gm->b].name, "wt");
  EXPECT_EQ(gm->skinny_sizes, std::vector<int64_t>{2});
  const KernelLaunch* k = kernel_at(l, 0);
  ASSERT_NE(k, nullptr);
  bool alpha = false;
  for (const auto& a : k->args) alpha |= a.kind == KernelArgRef::Kind::kF32 && a.f32 == 0.5f;
  EXPECT_TRUE(alpha) << "alpha is passed to the kernel";
}

// A B computed at run time stays on cuBLASLt: the skinny kernel reads its weights before waiting
// for the kernel before it (programmatic dependent launch), which may be the one writing B.
TEST(SkinnyGemm, AComputedWeightStaysOnCublasLt) {
  const std::string text =
      "g (float[N, 3] x, float[5, 3] v) => (float[N, 5] y)\n{\n  r = Relu (v)\n"
      "  y = Gemm <transB = 1> (x, r)\n}\n";
  Lowered l = lower_text(text, {1, 2});
  bool seen = false;
  for (const auto& s : l.p.steps)
    if (const auto* gm = std::get_if<GemmLaunch>(&s)) {
      seen = true;
      EXPECT_TRUE(gm->skinny_sizes.empty()) << "a skinny kernel for a computed B";
    }
  EXPECT_TRUE(seen);
}

// The gating kernel's outputs a thread: 16 bytes of inputs where N allows.
TEST(SkinnyGemm, GatedPairsVectorWidth) {
  EXPECT_EQ(gated_pairs_vec(DType::kF16, 5632), 4);
  EXPECT_EQ(gated_pairs_vec(DType::kBF16, 6), 2);
  EXPECT_EQ(gated_pairs_vec(DType::kF16, 17), 1);
  EXPECT_EQ(gated_pairs_vec(DType::kF32, 704), 2);
  EXPECT_EQ(gated_pairs_vec(DType::kF32, 17), 1);
}

// An fp16 GEMM of K x N whose M is the size, at most max_m rows.
SkinnyGemm f16_gemm(int64_t k, int64_t n, int max_m) {
  SkinnyGemm s;
  s.dtype = DType::kF16;
  s.k = k;
  s.n = n;
  s.m = ir::DimExpr::size();
  s.max_m = max_m;
  return s;
}

TEST(SkinnyGemm, GeometryHoldsAFewVectorsPerLane) {
  SkinnyGemm s = f16_gemm(768, 768, 1);
  SkinnyGeometry g = skinny_geometry(s);
  EXPECT_EQ(g.vec, 8);  // 16-byte loads
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.ksplit, 1);  // 96 vectors: three per lane already
  EXPECT_EQ(g.chunk, 3);   // all in flight at once
  s.n = 3072;
  EXPECT_EQ(skinny_geometry(s).rows, 2);  // short K, long N: a second row per group
  s.k = 5632;
  s.n = 2048;
  g = skinny_geometry(s);
  EXPECT_EQ(g.rows, 1);
  EXPECT_EQ(g.ksplit, 4);  // 704 vectors: six per lane
  EXPECT_EQ(g.chunk, 6);
  EXPECT_EQ(g.warps, 4);
  s.k = 2048;
  s.n = 11264;
  EXPECT_EQ(skinny_geometry(s).ksplit, 1);  // a split would pass 16k warps
  s.n = 2048;
  EXPECT_EQ(skinny_geometry(s).ksplit, 2);
  s.k = 65536;  // 8192 vectors: the split stops at 16k warps, a lane holds at most 16 at once
  g = skinny_geometry(s);
  EXPECT_EQ(g.ksplit, 8);
  EXPECT_EQ(g.chunk, 16);  // of 32: two chunks
  s.n = 512;
  EXPECT_EQ(skinny_geometry(s).ksplit, 16);
  s.n = 768;
  s.k = 17;
  EXPECT_EQ(skinny_geometry(s).vec, 1);
  for (const SkinnyGeometry& c : skinny_candidate_geometries(s)) {
    EXPECT_NE(c, skinny_geometry(s));
    EXPECT_LE(c.ksplit, 16);
    EXPECT_EQ(c.warps % c.ksplit, 0);
  }
}

TEST(SkinnyGemm, TensorCoreFormForMoreThanOneRowInHalfPrecision) {
  SkinnyGemm s = f16_gemm(2048, 2048, 1);
  EXPECT_FALSE(skinny_rows_geometry(s).has_value());  // one row a pass: the CUDA-core form
  for (int max_m : {2, 4, 8}) {
    s.max_m = max_m;
    EXPECT_EQ(skinny_geometry(s).mma_ksplit, 0) << max_m;  // the default stays one row's
    const std::optional<SkinnyGeometry> g = skinny_rows_geometry(s);
    ASSERT_TRUE(g.has_value()) << max_m;
    EXPECT_EQ(g->ksplit, 2);      // the CUDA-core form (one row) as the default
    EXPECT_EQ(g->mma_ksplit, 8);  // 32 steps of 64: four a warp
    EXPECT_EQ(g->mma_chunk, 4);
    EXPECT_EQ(g->warps, 8);  // the block serves both forms
    EXPECT_EQ(skinny_geometry_label(*g),
              "rows=1 ksplit=2 warps=8 vec=8 chunk=4 mma_ksplit=8 mma_chunk=4");
    EXPECT_EQ(skinny_candidate_geometries(s).front(), *g);  // candidate 0
  }
  s.k = 5632;
  EXPECT_EQ(skinny_rows_geometry(s)->mma_ksplit, 16);  // 88 steps: six a warp
  s.k = 768;
  s.n = 50257;
  const SkinnyGeometry g = *skinny_rows_geometry(s);
  EXPECT_EQ(g.mma_ksplit, 4);  // 12 steps: three a warp
  // The CUDA-core grid covers the tensor-core form's blocks (the kernel's static_assert).
  for (const SkinnyGeometry& c : skinny_candidate_geometries(s)) {
    EXPECT_NE(c, skinny_geometry(s));
    if (c.mma_ksplit > 0) {
      EXPECT_LE(c.warps / c.ksplit * c.rows, 16 * (c.warps / c.mma_ksplit));
    }
  }
  s.dtype = DType::kBF16;
  EXPECT_TRUE(skinny_rows_geometry(s).has_value());
  s.dtype = DType::kF32;  // no fp32 tensor-core form
  EXPECT_FALSE(skinny_rows_geometry(s).has_value());
  s.dtype = DType::kF16;
  s.k = 17;  // 16-byte loads need K a multiple of 8
  EXPECT_FALSE(skinny_rows_geometry(s).has_value());
}

// Which sizes the lowering gives the tensor-core form (candidate 0, a "heuristic" decision): from
// 3 rows where the size runs the general kernel, from 5 where it has a specialised entry
// (compile_sizes), whose CUDA-core form holds up to 4 rows.
TEST(SkinnyGemm, TensorCoreFormFromMoreRowsAtSpecialisedSizes) {
  const std::string half = R"(g (float16[N, 8] x) => (float16[N, 4] y)
  <float[8, 4] w32 = {
    1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}>
{
  w = Cast <to: int = 10> (w32)
  y = MatMul (x, w)
}
)";
  const std::vector<int64_t> planned = {1, 2, 3, 4, 8, 16};
  struct Case {
    std::vector<int64_t> specialised, tensor_core;
  };
  for (const Case& c :
       {Case{{}, {3, 4, 8, 16}}, Case{{1, 2, 4, 8}, {3, 8, 16}}, Case{{3, 4, 16}, {8, 16}}}) {
    Lowered l = lower_text(half, planned, 16, c.specialised);
    const KernelLaunch* k = kernel_at(l, 0);
    ASSERT_TRUE(k != nullptr);
    EXPECT_EQ(*k->run_sizes, planned);
    std::vector<int64_t> decided;
    for (const auto& [size, choice] : k->tuned) {
      EXPECT_EQ(choice.candidate, 0);
      EXPECT_EQ(choice.source, "heuristic");
      decided.push_back(size);
    }
    EXPECT_EQ(decided, c.tensor_core) << ::testing::PrintToString(c.specialised);
  }
}

// A gated GEMM's groups own whole (gate, up) pairs: two rows (or four, a candidate).
TEST(SkinnyGemm, GatedGeometryKeepsPairsTogether) {
  for (int max_m : {4, 16}) {
    SkinnyGemm s = f16_gemm(2048, 11264, max_m);
    s.gate = GateAct::kSilu;
    const SkinnyGeometry g = skinny_geometry(s);
    EXPECT_EQ(g.rows, 2);
    EXPECT_EQ(g.ksplit, 2);  // 256 vectors a row: four a lane
    for (const SkinnyGeometry& c : skinny_candidate_geometries(s)) EXPECT_EQ(c.rows % 2, 0);
  }
}

TEST(SkinnyGemm, EveryDtypeAndEpilogueCompilesWithNvrtc) {
  std::vector<KernelDef> kernels;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    SkinnyGemm s;
    s.dtype = dt;
    s.k = 17;
    s.n = 33;
    s.m = ir::DimExpr::size();
    s.max_m = 16;
    s.epilogue = Epilogue::kBiasGelu;
    s.has_c = true;
    kernels.push_back(codegen_skinny_gemm(s, skinny_geometry(s)));
    s.epilogue = Epilogue::kRelu;
    s.has_c = false;
    s.k = 768;
    s.max_m = 4;
    kernels.push_back(codegen_skinny_gemm(s, skinny_geometry(s)));
    SkinnyGeometry chunked = skinny_geometry(s);  // loads in several chunks
    chunked.chunk = 1;
    kernels.push_back(codegen_skinny_gemm(s, chunked));
    for (const SkinnyGeometry& g : skinny_candidate_geometries(s))
      kernels.push_back(codegen_skinny_gemm(s, g));
    for (int max_m : {8, 16}) {  // the tensor-core form in fp16 and bf16
      s.max_m = max_m;
      s.epilogue = max_m == 8 ? Epilogue::kBiasGelu : Epilogue::kNone;
      s.has_c = max_m == 8;
      kernels.push_back(
          codegen_skinny_gemm(s, skinny_rows_geometry(s).value_or(skinny_geometry(s))));
      for (const SkinnyGeometry& g : skinny_candidate_geometries(s))
        kernels.push_back(codegen_skinny_gemm(s, g));
    }
    // The gated form with every activation, both forms and its candidates; the cuBLASLt path's
    // gating kernel.
    s.epilogue = Epilogue::kNone;
    s.has_c = false;
    s.n = 66;
    for (GateAct act : {GateAct::kSilu, GateAct::kGelu, GateAct::kGeluTanh, GateAct::kRelu}) {
      s.gate = act;
      s.max_m = act == GateAct::kSilu ? 16 : 4;
      kernels.push_back(codegen_skinny_gemm(s, skinny_geometry(s)));
      if (auto both = skinny_rows_geometry(s)) kernels.push_back(codegen_skinny_gemm(s, *both));
      kernels.push_back(codegen_gated_pairs(dt, act, ir::DimExpr::size()));
      kernels.push_back(
          codegen_gated_pairs(dt, act, ir::DimExpr::size(64), gated_pairs_vec(dt, 64)));
    }
    for (const SkinnyGeometry& g : skinny_candidate_geometries(s))
      kernels.push_back(codegen_skinny_gemm(s, g));
  }
  for (size_t i = 0; i < kernels.size(); ++i) kernels[i].symbol = "skinny_" + std::to_string(i);
  NvrtcModule m{"skinny_gemm_test", codegen_module_source(kernels, {1}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::compiler
