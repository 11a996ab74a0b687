// GPU: kiln.Attention whose keys run over the size, with no key-padding input and no causal
// mask, run padded: each request of size s replays the graph captured at the next capture size
// P > s, so the keys [s, P) are padding the kernels must exclude through the device-resident real
// size. Every output is compared with the CPU reference evaluated at size s (the keys a real
// query may see). The padding is poisoned with NaN (debug executor: 0xFF bytes in every padding
// row of Q, K and V, so a padding key that reached a max, a sum or 0·V would turn the row NaN)
// and, in a second pass, zeros (what a normal run pads with: a zero key scores 0, above most
// real scores' weights, so it would shift every row). Paths: SIMT (f32, head dim 16), tensor
// cores (f16/bf16, head dims 64 and 128, partial key tiles), GQA, and one query row over the
// padded keys (split-key decode). Sizes above the largest capture run eagerly at s itself.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/reference/reference_compare.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

// Attention over `keys` keys (the size) with `queries` query rows, `hq` query heads sharing 2
// key/value heads of `d`; not causal, no mask.
OnnxBuilder keys_over_size(int64_t hq, int64_t d, Dim queries) {
  OnnxBuilder b("attention_keys_over_size", 23);
  b.input("q", {int64_t{2}, hq, queries, d});
  b.input("k", {int64_t{2}, int64_t{2}, std::string("S"), d});
  b.input("v", {int64_t{2}, int64_t{2}, std::string("S"), d});
  b.node("Attention", {"q", "k", "v"}, {"y"});
  b.output("y");
  return b;
}

GpuCheck padded_check(Precision p, bool poison) {
  // 1 → 8, 5 → 8, 17 → 32, 100 → 128 (partial 64-key tiles), 128 exact, 300 eager at 300.
  GpuCheck c = gpu_check(p, {1, 5, 17, 100, 128, 300});
  c.max_size = 512;
  c.capture_sizes = {8, 32, 128};
  c.debug = poison;
  c.tol = compiler::tolerance_end_to_end(p);
  c.tol_set = true;
  return c;
}

TEST(AttentionRealSizeGpu, PaddingKeysNeverReachRealRows) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  struct Case {
    Precision precision;
    int64_t d;
  };
  const Case cases[] = {{Precision::kF32, 16},  {Precision::kF16, 16}, {Precision::kF16, 64},
                        {Precision::kBF16, 64}, {Precision::kF16, 128}, {Precision::kBF16, 128}};
  for (bool poison : {true, false})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(compiler::precision_name(c.precision)) + " d=" +
                   std::to_string(c.d) + (poison ? " NaN padding" : " zero padding"));
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(keys_over_size(4, c.d, std::string("S")),
                                              padded_check(c.precision, poison), rng, &report))
          << report.detail;
    }
}

TEST(AttentionRealSizeGpu, OneQueryRowOverPaddedKeys) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(22);
  for (bool poison : {true, false})
    for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
      for (int64_t d : {16, 64}) {
        SCOPED_TRACE(std::string(compiler::precision_name(p)) + " d=" + std::to_string(d) +
                     (poison ? " NaN padding" : " zero padding"));
        GpuCheckReport report;
        EXPECT_TRUE(gpu_model_matches_reference(keys_over_size(4, d, int64_t{1}),
                                                padded_check(p, poison), rng, &report))
            << report.detail;
      }
}

// The launch candidates the autotuner may pick read the real size too: each forced in turn at
// the compile sizes, which are also the capture sizes (so runs of 5 and 17 replay them padded).
TEST(AttentionRealSizeGpu, EveryLaunchCandidateExcludesPaddingKeys) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(23);
  for (Precision p : {Precision::kF32, Precision::kF16})
    for (int cand = 0; cand < 6; ++cand) {
      SCOPED_TRACE(std::string(compiler::precision_name(p)) + " candidate " +
                   std::to_string(cand));
      GpuCheck c = padded_check(p, true);
      c.sizes = {5, 17, 100};
      c.compile_sizes = c.capture_sizes;
      c.candidate = cand;
      GpuCheckReport report;
      const int64_t d = p == Precision::kF32 ? 16 : 64;
      EXPECT_TRUE(gpu_model_matches_reference(keys_over_size(4, d, std::string("S")), c, rng,
                                              &report))
          << report.detail;
      if (report.tuned_launches == 0) break;  // no candidate this far: the path has fewer
    }
}

}  // namespace
}  // namespace kiln::testing
