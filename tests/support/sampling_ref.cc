#include "tests/support/sampling_ref.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>

namespace kiln::testing {

namespace {

// The kernels' rank: logit descending, then the lower index; +0 and -0 equal.
bool ranks_before(const std::vector<float>& x, int32_t a, int32_t b) {
  if (x[a] != x[b]) return x[a] > x[b];
  return a < b;
}

int index_bits(size_t vocab) {
  int b = 1;
  while ((size_t{1} << b) < vocab) ++b;
  return b;
}

float max_logit(const std::vector<float>& x) { return *std::max_element(x.begin(), x.end()); }

// As the kernel: (x - max) then · (1 / temperature), each rounded to float.
uint64_t weight_of(float xi, float max, float inv_temp, float scale) {
  const float d = xi - max;
  const float e = sampling_exp(d * inv_temp);
  return static_cast<uint64_t>(std::nearbyint(e * scale));
}

// Every token's weight (sampling_weight), computed once.
std::vector<uint64_t> all_weights(const std::vector<float>& x, const SamplingParams& p) {
  const float m = max_logit(x), inv = 1.0f / p.temperature;
  const float scale = static_cast<float>(uint64_t{1} << (62 - index_bits(x.size())));
  std::vector<uint64_t> w;
  w.reserve(x.size());
  for (float xi : x) w.push_back(weight_of(xi, m, inv, scale));
  return w;
}

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

uint32_t sampling_draw24(uint64_t seed, uint64_t step) {
  const auto r =
      philox4x32_10({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u},
                    static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r[0] >> 8;
}

// Every operation as the kernel writes it: one correctly rounded float operation at a time.
float sampling_exp(float a) {
  if (!(a >= -80.0f)) return 0.0f;
  const float n = std::nearbyint(a * 1.44269502f);
  float r = std::fma(n, -0.693145751953125f, a);
  r = std::fma(n, -1.42860677e-6f, r);
  float q = 1.98412698e-4f;
  q = std::fma(q, r, 1.38888889e-3f);
  q = std::fma(q, r, 8.33333377e-3f);
  q = std::fma(q, r, 4.16666679e-2f);
  q = std::fma(q, r, 1.66666672e-1f);
  q = std::fma(q, r, 0.5f);
  q = std::fma(q, r, 1.0f);
  q = std::fma(q, r, 1.0f);
  return q * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

bool sampling_is_greedy(const SamplingParams& p, size_t vocab) {
  return !(p.temperature > 0.0f) || std::isinf(1.0f / p.temperature) || p.top_k == 1 || vocab == 1;
}

std::vector<uint64_t> sampling_weights(const std::vector<float>& x, const SamplingParams& p) {
  return all_weights(x, p);
}

std::vector<int32_t> sampling_kept(const std::vector<float>& x, const SamplingParams& p) {
  const int32_t v = static_cast<int32_t>(x.size());
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return ranks_before(x, a, b); });
  if (p.top_k > 0 && p.top_k < v) order.resize(static_cast<size_t>(p.top_k));
  if (p.top_p < 1.0f) {
    const std::vector<uint64_t> w = all_weights(x, p);
    uint64_t kept = 0;
    for (int32_t i : order) kept += w[static_cast<size_t>(i)];
    uint64_t target =
        p.top_p > 0.0f
            ? static_cast<uint64_t>(static_cast<double>(p.top_p) * static_cast<double>(kept))
            : 0;
    target = std::max<uint64_t>(target, 1);
    uint64_t cum = 0;
    for (size_t j = 0; j < order.size(); ++j) {
      cum += w[static_cast<size_t>(order[j])];
      if (cum >= target) {
        order.resize(j + 1);
        break;
      }
    }
  }
  return order;
}

std::vector<double> sampling_kept_probs(const std::vector<float>& x, const SamplingParams& p,
                                        const std::vector<int32_t>& kept) {
  const double m = max_logit(x);
  std::vector<double> out;
  double z = 0.0;
  for (int32_t i : kept) {
    out.push_back(std::exp((x[static_cast<size_t>(i)] - m) / p.temperature));
    z += out.back();
  }
  for (double& e : out) e /= z;
  return out;
}

SampledToken sample_ref(const std::vector<float>& x, const SamplingParams& p) {
  SampledToken out;
  if (sampling_is_greedy(p, x.size())) {
    int32_t best = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i)
      if (ranks_before(x, i, best)) best = i;
    out.token = best;
  } else {
    std::vector<int32_t> kept = sampling_kept(x, p);
    std::sort(kept.begin(), kept.end());  // the draw runs in index order
    const std::vector<uint64_t> w = all_weights(x, p);
    uint64_t total = 0;
    for (int32_t i : kept) total += w[static_cast<size_t>(i)];
    const auto product = static_cast<unsigned __int128>(sampling_draw24(p.seed, p.step)) * total;
    const auto target = static_cast<uint64_t>(product >> 24);
    uint64_t cum = 0;
    for (int32_t i : kept) {
      cum += w[static_cast<size_t>(i)];
      if (cum > target) {
        out.token = i;
        break;
      }
    }
  }
  const double m = max_logit(x);
  double s = 0.0;
  for (float xi : x) s += std::exp(static_cast<double>(xi) - m);
  out.logprob = static_cast<double>(x[static_cast<size_t>(out.token)]) - m - std::log(s);
  return out;
}

}  // namespace kiln::testing
