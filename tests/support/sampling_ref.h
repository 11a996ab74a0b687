// CPU reference for the sampling kernels (kernels/sampling.cuh): the same rules (rank order,
// top_k, then top_p, then one Philox draw scanned in index order) in float64, so it picks the
// same token as the GPU. It also says when the pick sits so close to a boundary (a top_p mass,
// a draw's cumulative sum) that float32 rounding on the GPU could move it: tests accept either
// answer only there.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::testing {

// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC'11): counter c, key (k0, k1).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1);
// The draw of (seed, step) in [0, 1): key (seed lo, seed hi), counter (step lo, step hi, 0, 0),
// (word 0 >> 8) · 2^-24.
double sampling_uniform(uint64_t seed, uint64_t step);

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;        // >= 1: off
  uint64_t seed = 0;
  uint64_t step = 0;
};

struct SampledToken {
  int32_t token = -1;
  double logprob = 0.0;        // log softmax(logits)[token], temperature 1, no filtering
  bool near_boundary = false;  // a float32 rounding could change the pick
};

// Whether `p` samples greedily (temperature <= 0 or too small to invert, top_k == 1, one token).
bool sampling_is_greedy(const SamplingParams& p, size_t vocab);
// The tokens top_k and top_p keep, in rank order (logit descending, lower index first among
// equal logits; +0 and -0 equal). `near_boundary` is set when the top_p cut is within 1e-4.
std::vector<int32_t> sampling_kept(const std::vector<float>& logits, const SamplingParams& p,
                                   bool* near_boundary);
// The kept tokens' probabilities, in the order of sampling_kept.
std::vector<double> sampling_kept_probs(const std::vector<float>& logits, const SamplingParams& p,
                                        const std::vector<int32_t>& kept);
// The token the kernels pick for one row of logits (decoded to float).
SampledToken sample_ref(const std::vector<float>& logits, const SamplingParams& p);

}  // namespace kiln::testing
