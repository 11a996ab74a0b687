// The paged-attention CPU reference: a hand-computed case, the paged result equal to plain
// causal attention over the keys gathered into contiguous rows, GQA head mapping, append with
// padding slots, and rows with context_len 0.
#include "tests/support/paged_attention_ref.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace kiln::testing {
namespace {

// Plain attention for one query over contiguous keys k [n, d] and values v [n, dv].
std::vector<double> plain_attention(const double* q, const std::vector<double>& k,
                                    const std::vector<double>& v, int64_t n, int64_t d,
                                    int64_t dv, double scale) {
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    double dot = 0;
    for (int64_t x = 0; x < d; ++x) dot += q[x] * k[j * d + x];
    w[j] = std::exp(scale * dot);
  }
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<double> out(static_cast<size_t>(dv), 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t x = 0; x < dv; ++x) out[x] += w[j] / sum * v[j * dv + x];
  return out;
}

TEST(PagedAttentionRef, HandComputedTwoKeys) {
  PagedCacheShape s{.num_blocks = 3, .hkv = 1, .block_size = 1, .d = 1, .dv = 1, .hq = 1,
                    .max_blocks_per_seq = 2};
  PagedCache c;
  c.key = {9, 1, 0};    // block 0 unused; the row's keys live in blocks 1, 2
  c.value = {9, 2, 4};
  c.block_tables = {1, 2};
  c.context_lens = {2};
  // scores ln3·1 and 0: weights 3/4 and 1/4 → 0.75·2 + 0.25·4.
  const std::vector<double> out = paged_attention_ref(s, c, {1.0}, 1, std::log(3.0));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NEAR(out[0], 2.5, 1e-12);
}

TEST(PagedAttentionRef, EqualsPlainAttentionOverGatheredKeys) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  PagedCacheShape s{.num_blocks = 20, .hkv = 2, .block_size = 4, .d = 5, .dv = 3, .hq = 4,
                    .max_blocks_per_seq = 6};
  PagedCache c;
  c.key.resize(s.num_blocks * s.hkv * s.block_size * s.d);
  c.value.resize(s.num_blocks * s.hkv * s.block_size * s.dv);
  for (double& x : c.key) x = u(rng);
  for (double& x : c.value) x = u(rng);
  std::vector<int32_t> perm(s.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.block_tables.assign(perm.begin(), perm.begin() + 18);  // 3 rows × 6 scattered blocks
  c.context_lens = {23, 5, 9};
  const int64_t q_len = 5, rows = 3;
  std::vector<double> q(rows * q_len * s.hq * s.d);
  for (double& x : q) x = u(rng);
  const double scale = 0.7;
  const std::vector<double> out = paged_attention_ref(s, c, q, q_len, scale);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t h = 0; h < s.hq; ++h) {
      const int64_t hk = h / (s.hq / s.hkv);
      std::vector<double> k, v;  // the row's keys of kv head hk, gathered in position order
      for (int64_t j = 0; j < c.context_lens[b]; ++j) {
        const int64_t row = paged_row(s, c.block_tables[b * 6 + j / 4], hk, j % 4);
        k.insert(k.end(), c.key.begin() + row * s.d, c.key.begin() + (row + 1) * s.d);
        v.insert(v.end(), c.value.begin() + row * s.dv, c.value.begin() + (row + 1) * s.dv);
      }
      for (int64_t i = 0; i < q_len; ++i) {
        const int64_t n = c.context_lens[b] - q_len + i + 1;  // causal: keys 0..position
        const int64_t qi = (b * q_len + i) * s.hq + h;
        const std::vector<double> want = plain_attention(q.data() + qi * s.d, k, v, n, s.d,
                                                         s.dv, scale);
        for (int64_t x = 0; x < s.dv; ++x)
          EXPECT_NEAR(out[qi * s.dv + x], want[x], 1e-12) << "b=" << b << " h=" << h
                                                          << " i=" << i;
      }
    }
}

TEST(PagedAttentionRef, EmptyRowsAndNegativePositionsAreZero) {
  PagedCacheShape s{.num_blocks = 2, .hkv = 1, .block_size = 2, .d = 2, .dv = 2, .hq = 1,
                    .max_blocks_per_seq = 2};
  PagedCache c;
  c.key.assign(8, 1.0);
  c.value.assign(8, 5.0);
  c.block_tables = {0, 1, 0, 0};
  c.context_lens = {2, 0};
  const std::vector<double> q(2 * 3 * 2, 1.0);
  // q_len 3 over 2 tokens: query 0 sits at position -1 (nothing), 1 and 2 average to 5.
  const std::vector<double> out = paged_attention_ref(s, c, q, 3, 1.0);
  const std::vector<double> want = {0, 0, 5, 5, 5, 5, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-12) << i;
}

TEST(PagedAttentionRef, AppendWritesSlotsAndSkipsPadding) {
  PagedCacheShape s{.num_blocks = 3, .hkv = 2, .block_size = 2, .d = 2, .dv = 1, .hq = 2,
                    .max_blocks_per_seq = 1};
  PagedCache c;
  c.key.assign(3 * 2 * 2 * 2, -1.0);
  c.value.assign(3 * 2 * 2 * 1, -1.0);
  // Token 0 → block 2 offset 1; token 1 padding; token 2 → block 0 offset 0.
  const std::vector<double> k = {1, 2, 3, 4, 50, 51, 52, 53, 5, 6, 7, 8};
  const std::vector<double> v = {10, 20, 60, 61, 30, 40};
  paged_kv_append_ref(s, k, v, {5, -1, 0}, c);
  std::vector<double> want_k(c.key.size(), -1.0), want_v(c.value.size(), -1.0);
  auto put = [&](int64_t blk, int64_t h, int64_t off, double k0, double k1, double v0) {
    const int64_t row = paged_row(s, blk, h, off);
    want_k[row * 2] = k0;
    want_k[row * 2 + 1] = k1;
    want_v[row] = v0;
  };
  put(2, 0, 1, 1, 2, 10);
  put(2, 1, 1, 3, 4, 20);
  put(0, 0, 0, 5, 6, 30);
  put(0, 1, 0, 7, 8, 40);
  EXPECT_EQ(c.key, want_k);
  EXPECT_EQ(c.value, want_v);
}

}  // namespace
}  // namespace kiln::testing
