// GPU: the skinny GEMM (kernels/skinny_gemm.cuh and skinny_gemm_mma.cuh,
// compiler/backend/lower/skinny_gemm_codegen.cc) against the CPU reference through the whole
// pipeline. The models are those of the GEMM family (tests/support/gemm_models.h); with small
// planned sizes, the GEMM step gets a skinny kernel at the sizes where M <= 16 and cuBLASLt keeps
// the others, so one run covers both paths:
//   sizes 1 and 4   compile sizes: the specialised skinny kernel (M constant; the CUDA-core form);
//   size 3          padded to the captured 4: the skinny kernel on padding rows too;
//   sizes 2, 8, 16  captured only: the general skinny kernel (M from S; passes of 2, 8, 16 rows),
//                   in fp16 and bf16 at 8 and 16 the lowering's tensor-core candidate instead;
//   sizes 17, 32    padded to 32: cuBLASLt.
// Every epilogue, fp32/tf32/fp16/bf16, K and N odd and large (a K split over warps, rows past N
// in the last block, K not a multiple of the vector width), the gated MLP (one kernel with the
// gating in its epilogue; cuBLASLt and a gating kernel above 16), and a norm before the GEMM
// (applied by the skinny kernel; a norm kernel before cuBLASLt). Every launch candidate forced:
// skinny_gemm_candidates_gpu_test.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tests/kernels/skinny_gemm_check.h"
#include "tests/support/gemm_models.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

const KN kShapes[] = {{17, 17}, {64, 48}, {999, 17}, {17, 1001}, {768, 2304}, {3072, 96}};

void sweep(Epi e) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(4242);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : kShapes) {
      SCOPED_TRACE(std::string(epi_name(e)) + " N=" + std::to_string(s.n));
      expect_skinny_matches(dense_model(e, s.k, s.n, p), skinny_check(p, s.k), s.k, rng);
    }
}

TEST(SkinnyGemmGpu, Plain) { sweep(Epi::kNone); }
TEST(SkinnyGemmGpu, Bias) { sweep(Epi::kBias); }
TEST(SkinnyGemmGpu, BiasRelu) { sweep(Epi::kBiasRelu); }
TEST(SkinnyGemmGpu, BiasGeluTanh) { sweep(Epi::kBiasGelu); }
TEST(SkinnyGemmGpu, BiasResidual) { sweep(Epi::kBiasResidual); }
TEST(SkinnyGemmGpu, ResidualBiasRelu) { sweep(Epi::kResidualBiasRelu); }

// The gated MLP (kiln.GatedMatMul): at sizes up to 16 one skinny kernel with the gating in its
// epilogue (both forms in fp16/bf16), at 17 and 32 cuBLASLt and the gating kernel.
TEST(SkinnyGemmGpu, GatedMlp) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(31);
  for (bool silu : {true, false})
    for (Precision p : kGemmPrecisions)
      for (const KN& s : {KN{64, 48}, KN{999, 17}, KN{768, 1536}}) {
        SCOPED_TRACE(std::string(silu ? "silu" : "relu") + " N=" + std::to_string(s.n));
        expect_skinny_matches(gated_mlp_model(silu, s.k, s.n, p), skinny_check(p, s.k), s.k, rng);
      }
}

// A norm before the GEMM (RMSNorm, LayerNorm with and without its bias), before a plain GEMM
// with a bias and before the gated MLP: at sizes up to 16 the skinny kernel normalises the rows
// itself, at 17 and 32 the norm kernel and cuBLASLt run. In fp16 and bf16 with K a multiple of 8
// both forms apply it (tensor cores above one row), and with skinny_gemm_max_m 4 the CUDA-core
// form alone up to 4 rows. {776, 40} (fp16, bf16): the tensor-core form's last step of 64 past
// K, rows past N in its last tile; {8192, 24} in fp32 loads a lane's share of W in two chunks.
// The tolerance allows for the rounding of the normalised rows.
TEST(SkinnyGemmGpu, NormPrologue) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(57);
  for (NormKind norm : {NormKind::kRms, NormKind::kLayer, NormKind::kLayerBias})
    for (bool gated : {false, true}) {
      if (gated && norm == NormKind::kLayer) continue;  // the same code as with a bias
      for (Precision p : kGemmPrecisions)
        for (const KN& s : {KN{999, 17}, KN{2048, 512}, KN{776, 40}, KN{8192, 24}}) {
          const bool half = p == Precision::kF16 || p == Precision::kBF16;
          if ((s.k == 8192 && p != Precision::kF32) || (s.k == 776 && !half)) continue;
          for (int max_m : {16, 4}) {
            if (max_m == 4 && !(half && s.k == 2048 && !gated)) continue;
            SCOPED_TRACE(std::string(norm_kind_name(norm)) + (gated ? " gated" : "") +
                         " N=" + std::to_string(s.n) + " max_m=" + std::to_string(max_m));
            expect_skinny_matches(norm_gemm_model(norm, gated, s.k, s.n, p),
                                  norm_check(p, s.k, gated, max_m), s.k, rng);
          }
        }
    }
}

// Gemm with transB (the weight already [N, K]), alpha and a residual C scaled by beta.
TEST(SkinnyGemmGpu, GemmTransBAlphaBetaC) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(77);
  for (Precision p : kGemmPrecisions)
    for (const KN& s : {KN{64, 48}, KN{999, 130}}) {
      GemmModel b("skinny_c", p);
      b.activation("x", {s.k}, 21).activation("c", {s.n}, 22).weight("wt", {s.n, s.k}, 23);
      b.node("Gemm", {"x", "wt", "c"}, {"y"},
             {{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 0.25f}});
      expect_skinny_matches(b.finish("y"), skinny_check(p, s.k), s.k, rng);
    }
}

// Autotuned (kernel geometries, then skinny against cuBLASLt per compile size): still correct.
TEST(SkinnyGemmGpu, Autotuned) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(5);
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    GpuCheck c = skinny_check(p, 2048);
    c.autotune = true;
    GpuCheckReport report;
    EXPECT_TRUE(
        gpu_model_matches_reference(dense_model(Epi::kBiasGelu, 2048, 5632, p), c, rng, &report))
        << report.detail;
    // With a norm prologue (the kernel reads the norm's input, scale and bias), in both forms.
    c.tol = norm_gemm_tolerance(p, 2048, true);
    EXPECT_TRUE(gpu_model_matches_reference(
        norm_gemm_model(NormKind::kLayerBias, true, 2048, 512, p), c, rng, &report))
        << report.detail;
  }
}

}  // namespace
}  // namespace kiln::testing
