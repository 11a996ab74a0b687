#include "tests/support/sampling_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kiln::testing {

namespace {

constexpr double kBoundary = 1e-4;  // relative distance under which float32 could flip a pick

// The kernels' rank: logit descending, then the lower index; +0 and -0 equal.
bool ranks_before(const std::vector<float>& x, int32_t a, int32_t b) {
  if (x[a] != x[b]) return x[a] > x[b];
  return a < b;
}

float inverse_temperature(const SamplingParams& p) { return 1.0f / p.temperature; }

// exp((x_i - max) / temperature) as the kernels define it (the inverse taken in float).
double scaled_exp(const std::vector<float>& x, int32_t i, double max, const SamplingParams& p) {
  return std::exp((static_cast<double>(x[i]) - max) * inverse_temperature(p));
}

double max_logit(const std::vector<float>& x) { return *std::max_element(x.begin(), x.end()); }

}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0];
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

double sampling_uniform(uint64_t seed, uint64_t step) {
  const auto r = philox4x32_10(
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<double>(r[0] >> 8) * 0x1p-24;
}

bool sampling_is_greedy(const SamplingParams& p, size_t vocab) {
  return !(p.temperature > 0.0f) || std::isinf(inverse_temperature(p)) || p.top_k == 1 ||
         vocab == 1;
}

std::vector<int32_t> sampling_kept(const std::vector<float>& x, const SamplingParams& p,
                                   bool* near_boundary) {
  const int32_t v = static_cast<int32_t>(x.size());
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return ranks_before(x, a, b); });
  if (p.top_k > 0 && p.top_k < v) order.resize(static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    const double m = max_logit(x);
    double z = 0.0;
    for (int32_t i : order) z += scaled_exp(x, i, m, p);
    double cum = 0.0;
    size_t keep = order.size();
    for (size_t j = 0; j < order.size(); ++j) {
      const double before = cum;
      cum += scaled_exp(x, order[j], m, p) / z;
      if (cum >= p.top_p || j + 1 == order.size()) {
        keep = j + 1;
        if (std::abs(cum - p.top_p) < kBoundary || (j > 0 && std::abs(before - p.top_p) < kBoundary))
          *near_boundary = true;
        break;
      }
    }
    order.resize(keep);
  }
  return order;
}

std::vector<double> sampling_kept_probs(const std::vector<float>& x, const SamplingParams& p,
                                        const std::vector<int32_t>& kept) {
  const double m = max_logit(x);
  std::vector<double> out;
  double z = 0.0;
  for (int32_t i : kept) {
    out.push_back(scaled_exp(x, i, m, p));
    z += out.back();
  }
  for (double& e : out) e /= z;
  return out;
}

SampledToken sample_ref(const std::vector<float>& x, const SamplingParams& p) {
  SampledToken out;
  const double m = max_logit(x);
  if (sampling_is_greedy(p, x.size())) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i)
      if (ranks_before(x, i, best)) best = i;
    out.token = best;
  } else {
    std::vector<int32_t> kept = sampling_kept(x, p, &out.near_boundary);
    std::sort(kept.begin(), kept.end());  // the draw scans in index order
    double z = 0.0;
    for (int32_t i : kept) z += scaled_exp(x, i, m, p);
    const double target = sampling_uniform(p.seed, p.step) * z;
    double cum = 0.0;
    out.token = kept.back();
    for (int32_t i : kept) {
      const double e = scaled_exp(x, i, m, p);
      if (e == 0.0) continue;
      const double before = cum;
      cum += e;
      if (cum > target) {
        out.token = i;
        if (std::abs(before - target) < kBoundary * z || std::abs(cum - target) < kBoundary * z)
          out.near_boundary = true;
        break;
      }
    }
  }
  double s = 0.0;
  for (float xi : x) s += std::exp(static_cast<double>(xi) - m);
  out.logprob = static_cast<double>(x[out.token]) - m - std::log(s);
  return out;
}

}  // namespace kiln::testing
