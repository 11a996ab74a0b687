// GPU: every launch candidate of the skinny GEMM (compiler/backend/lower/skinny_gemm_codegen.cc,
// skinny_candidate_geometries: what autotuning may pick) computes the same GEMM, forced at the
// compile sizes 1 and 4 (GpuCheck::candidate). An executable of its own, so that its run time
// (about 20 s a candidate index at the Llama shapes on an H200) does not add to
// skinny_gemm_gpu_test's under run_gpu.sh's limit per test executable.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "tests/kernels/skinny_gemm_check.h"
#include "tests/support/gemm_models.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

// Every launch candidate (another split of rows or K, more warps) computes the same GEMM. In fp32,
// {8192, 24} has 2048 vectors a row, so a candidate loads each lane's share in two chunks.
TEST(SkinnyGemmGpu, EveryCandidate) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(99);
  for (int candidate = 0; candidate < 5; ++candidate)
    for (Precision p : {Precision::kF32, Precision::kF16})
      for (const KN& s : {KN{768, 2304}, KN{3072, 96}, KN{40, 1001}, KN{8192, 24}}) {
        SCOPED_TRACE("candidate " + std::to_string(candidate) + " N=" + std::to_string(s.n));
        GpuCheck c = skinny_check(p, s.k);
        c.candidate = candidate;
        c.sizes = {1, 4};
        expect_skinny_matches(dense_model(Epi::kBiasResidual, s.k, s.n, p), c, s.k, rng);
      }
}

// Every launch candidate (as autotuning may pick it) at the shapes of a Llama-style layer, at
// compile sizes 1 and 4: the gated MLP with and without an RMSNorm prologue (the candidates split
// rows two ways for a gated kernel, 2 and 4 rows a warp group, pairs kept together), a
// projection with a norm prologue and one with a residual. Candidates past a launch's count
// leave it on its default. One test per candidate index, to run one alone (compute-sanitizer).
class SkinnyGemmCandidate : public ::testing::TestWithParam<int> {};

TEST_P(SkinnyGemmCandidate, LlamaShapes) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(101 + GetParam());
  struct Case {
    const char* what;
    bool gated;
    bool norm;
    KN shape;
  };
  const Case cases[] = {{"gated", true, false, {2048, 704}},
                        {"rms gated", true, true, {2048, 704}},
                        {"rms gated wide", true, true, {2048, 5632}},
                        {"rms", false, true, {2048, 2048}},
                        {"residual", false, false, {5632, 2048}}};
  for (Precision p : {Precision::kF32, Precision::kF16})
    for (const Case& cs : cases) {
      const int64_t k = cs.shape.k, n = cs.shape.n;
      SCOPED_TRACE(std::string(cs.what) + " K=" + std::to_string(k) + " N=" + std::to_string(n));
      GpuCheck c = cs.norm ? norm_check(p, k, cs.gated, 16) : skinny_check(p, k);
      c.candidate = GetParam();
      c.sizes = {1, 4};
      const OnnxBuilder model = cs.norm    ? norm_gemm_model(NormKind::kRms, cs.gated, k, n, p)
                                : cs.gated ? gated_mlp_model(true, k, n, p)
                                           : dense_model(Epi::kBiasResidual, k, n, p);
      expect_skinny_matches(model, c, k, rng);
    }
}

INSTANTIATE_TEST_SUITE_P(EveryIndex, SkinnyGemmCandidate, ::testing::Range(0, 9));

}  // namespace
}  // namespace kiln::testing
