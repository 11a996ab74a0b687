// The CPU sampling reference (tests/support/sampling_ref.h) that the GPU sampling test checks
// the kernels against: Philox-4x32-10 against Random123's published known answers, the kernels'
// exp and fixed-point weights against float64, the rank order and its ties, the greedy limits
// (top_k 1, a tiny top_p, a temperature going to 0), the top_p boundary rule, and a chi-square
// test that draws over a fixed set of seeds follow the float64 softmax. CPU only, deterministic.
#include "tests/support/sampling_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace kiln::testing {
namespace {

TEST(SamplingRef, PhiloxKnownAnswers) {
  using A = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0, 0), (A{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, 0xffffffff, 0xffffffff),
            (A{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, 0xa4093822, 0x299f31d0),
            (A{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(SamplingRef, DrawIsTheFirstWordsTop24Bits) {
  const auto w = philox4x32_10({5, 0, 0, 0}, 0x9abcdef0u, 0x12345678u);
  EXPECT_EQ(sampling_draw24(0x123456789abcdef0ull, 5), w[0] >> 8);
  // The high halves of seed and step matter.
  EXPECT_NE(sampling_draw24(1, 0), sampling_draw24(1 + (1ull << 32), 0));
  EXPECT_NE(sampling_draw24(1, 0), sampling_draw24(1, 1ull << 32));
  uint32_t lo = ~0u, hi = 0;
  for (uint64_t s = 0; s < 4096; ++s) {
    const uint32_t u = sampling_draw24(s, s * 3);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_LT(hi, 1u << 24);
  EXPECT_LT(lo, (1u << 24) / 100);
  EXPECT_GT(hi, (1u << 24) / 100 * 99);
}

TEST(SamplingRef, ExpWithinTwoUlpsOfFloat64) {
  EXPECT_EQ(sampling_exp(0.0f), 1.0f);
  EXPECT_EQ(sampling_exp(-INFINITY), 0.0f);
  EXPECT_EQ(sampling_exp(-80.5f), 0.0f);
  double worst = 0.0;
  for (float a = -80.0f; a <= 0.0f; a += 0.000731f) {
    const double want = std::exp(static_cast<double>(a));
    worst = std::max(worst, std::abs(sampling_exp(a) - want) / want);
  }
  EXPECT_LT(worst, 2.4e-7);
}

// The fixed-point weights the kernels sum give the float64 softmax's probabilities.
TEST(SamplingRef, WeightsAreTheSoftmax) {
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int vocab : {7, 1000, 128256}) {
    std::vector<float> x(static_cast<size_t>(vocab));
    for (float& v : x) v = d(rng);
    const SamplingParams p{0.7f, 0, 1.0f, 0, 0};
    std::vector<int32_t> all(x.size());
    for (int32_t i = 0; i < vocab; ++i) all[static_cast<size_t>(i)] = i;
    const std::vector<double> probs = sampling_kept_probs(x, p, all);
    const std::vector<uint64_t> w = sampling_weights(x, p);
    double total = 0.0;
    for (uint64_t wi : w) total += static_cast<double>(wi);
    EXPECT_LT(total, 0x1p62);
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(w[i]) / total - probs[i]));
    EXPECT_LT(worst, 1e-7) << "vocab " << vocab;
  }
}

TEST(SamplingRef, GreedyTiesGoToTheLowestIndex) {
  SamplingParams p;  // temperature 0
  EXPECT_EQ(sample_ref({1.0f, 3.0f, 3.0f, 2.0f}, p).token, 1);
  EXPECT_EQ(sample_ref({-0.0f, 0.0f, -1.0f}, p).token, 0);  // +0 and -0 are equal
  EXPECT_EQ(sample_ref({-INFINITY, -2.0f, -2.0f}, p).token, 1);
  EXPECT_EQ(sample_ref({4.0f}, SamplingParams{1.0f, 0, 1.0f, 9, 9}).token, 0);
  const SampledToken t = sample_ref({0.0f, 0.0f}, p);
  EXPECT_NEAR(t.logprob, std::log(0.5), 1e-12);
}

std::vector<float> random_logits(std::mt19937& rng, int n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = std::round(d(rng) * 4.0f) / 4.0f;  // coarse: many ties
  return x;
}

TEST(SamplingRef, TopK1AndTinyTopPAreGreedy) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> x = random_logits(rng, 1 + trial * 37, 2.0f);
    const int32_t greedy = sample_ref(x, SamplingParams{}).token;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      EXPECT_EQ(sample_ref(x, SamplingParams{1.3f, 1, 1.0f, seed, 0}).token, greedy);
      EXPECT_EQ(sample_ref(x, SamplingParams{0.8f, 0, 1e-6f, seed, 4}).token, greedy);
      EXPECT_EQ(sample_ref(x, SamplingParams{0.8f, 50, 0.0f, seed, 4}).token, greedy);
    }
  }
}

TEST(SamplingRef, TemperatureToZeroIsGreedy) {
  const std::vector<float> x = {0.5f, 1.25f, 1.0f, -3.0f};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    EXPECT_EQ(sample_ref(x, SamplingParams{1e-3f, 0, 1.0f, seed, 0}).token, 1);
    EXPECT_EQ(sample_ref(x, SamplingParams{1e-39f, 0, 1.0f, seed, 0}).token, 1);  // 1/t overflows
  }
  // Tied maxima: a small temperature still draws between them, never elsewhere.
  const std::vector<float> tied = {2.0f, 0.0f, 2.0f};
  int counts[3] = {};
  for (uint64_t seed = 0; seed < 400; ++seed)
    ++counts[sample_ref(tied, SamplingParams{1e-3f, 0, 1.0f, seed, 1}).token];
  EXPECT_EQ(counts[1], 0);
  EXPECT_GT(counts[0], 150);
  EXPECT_GT(counts[2], 150);
}

TEST(SamplingRef, TopPKeepsTheShortestPrefixReachingTheMass) {
  // Probabilities 1/2, 1/4, 1/8, 1/8 at temperature 1; tokens 2 and 3 are tied.
  const std::vector<float> x = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  auto kept = [&](float top_p, int top_k = 0) {
    return sampling_kept(x, SamplingParams{1.0f, top_k, top_p, 0, 0});
  };
  EXPECT_EQ(kept(0.3f), (std::vector<int32_t>{0}));
  EXPECT_EQ(kept(0.7f), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kept(0.8f), (std::vector<int32_t>{0, 1, 2}));  // the tie: the lower index first
  EXPECT_EQ(kept(0.9f), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(kept(1.0f), (std::vector<int32_t>{0, 1, 2, 3}));
  // top_k first, then top_p over the renormalised top_k: 2/3 and 1/3.
  EXPECT_EQ(kept(0.6f, 2), (std::vector<int32_t>{0}));
  EXPECT_EQ(kept(0.7f, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kept(1.0f, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(0.0f, 3), (std::vector<int32_t>{0}));  // at least the first token
}

// Pearson's chi-square of `counts` against `probs` over n draws.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double e = probs[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(SamplingRef, DrawsFollowTheProbabilities) {
  const std::vector<float> x = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 0.3f};
  constexpr int kDraws = 20000;
  struct Case {
    SamplingParams p;
    double critical;  // chi-square at p = 0.001 for (kept - 1) degrees of freedom
  };
  for (const Case& c : {Case{{0.7f, 0, 1.0f, 0, 0}, 20.52}, Case{{1.5f, 3, 1.0f, 0, 0}, 13.82},
                        Case{{1.0f, 0, 0.8f, 0, 0}, 16.27}, Case{{1.2f, 4, 0.9f, 0, 0}, 16.27}}) {
    const std::vector<int32_t> kept = sampling_kept(x, c.p);
    const std::vector<double> probs = sampling_kept_probs(x, c.p, kept);
    std::vector<int> counts(kept.size(), 0);
    int outside = 0;
    for (int d = 0; d < kDraws; ++d) {
      SamplingParams p = c.p;
      p.seed = 1000 + static_cast<uint64_t>(d);  // seeds vary ...
      p.step = static_cast<uint64_t>(d % 5);     // ... and steps
      const int32_t t = sample_ref(x, p).token;
      const auto it = std::find(kept.begin(), kept.end(), t);
      if (it == kept.end())
        ++outside;
      else
        ++counts[static_cast<size_t>(it - kept.begin())];
    }
    SCOPED_TRACE("temperature " + std::to_string(c.p.temperature) + " top_k " +
                 std::to_string(c.p.top_k) + " top_p " + std::to_string(c.p.top_p));
    EXPECT_EQ(outside, 0);
    EXPECT_LT(chi_square(counts, probs, kDraws), c.critical);
  }
}

}  // namespace
}  // namespace kiln::testing
