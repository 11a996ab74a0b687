// CPU reference for the sampling kernels (kernels/sampling.cuh): the same rules (rank order,
// top_k, then top_p, then one Philox draw over the kept weights in index order) and the same
// arithmetic where it decides a token (the kernels' exp in correctly rounded float operations,
// fixed-point weights, exact integer sums), so it picks exactly the GPU's token. The float64
// softmax beside it (sampling_kept_probs) is what the weights approximate; the reference's tests
// check the two agree and that draws follow it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::testing {

// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): counter c, key (k0, k1).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1);
// The 24-bit draw of (seed, step): word 0 >> 8 of the counter (step lo, step hi, 0, 0) under the
// key (seed lo, seed hi); u = draw · 2^-24.
uint32_t sampling_draw24(uint64_t seed, uint64_t step);

// The kernels' exp(a) for a <= 0, bit for bit.
float sampling_exp(float a);

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off
  uint64_t seed = 0;
  uint64_t step = 0;
};

struct SampledToken {
  int32_t token = -1;
  double logprob = 0.0;  // log softmax(logits)[token] in float64, temperature 1, no filtering
};

// Whether `p` samples greedily (temperature <= 0 or too small to invert, top_k == 1, one token).
bool sampling_is_greedy(const SamplingParams& p, size_t vocab);
// Every token's fixed-point weight, e = exp((x - max) · (1 / temperature)) · 2^(62 - index bits)
// rounded to an integer.
std::vector<uint64_t> sampling_weights(const std::vector<float>& logits, const SamplingParams& p);
// The tokens top_k and top_p keep, in rank order (logit descending, lower index first among
// equal logits; +0 and -0 equal).
std::vector<int32_t> sampling_kept(const std::vector<float>& logits, const SamplingParams& p);
// The kept tokens' probabilities by float64 softmax of logits / temperature, in the order of
// `kept`.
std::vector<double> sampling_kept_probs(const std::vector<float>& logits, const SamplingParams& p,
                                        const std::vector<int32_t>& kept);
// The token the kernels pick for one row of logits (decoded to float).
SampledToken sample_ref(const std::vector<float>& logits, const SamplingParams& p);

}  // namespace kiln::testing
