#include "tests/support/paged_attention_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::testing {

int64_t paged_row(const PagedCacheShape& s, int64_t block, int64_t head, int64_t offset) {
  return (block * s.hkv + head) * s.block_size + offset;
}

void paged_kv_append_ref(const PagedCacheShape& s, const std::vector<double>& k,
                         const std::vector<double>& v, const std::vector<int64_t>& slot_mapping,
                         PagedCache& cache) {
  for (size_t t = 0; t < slot_mapping.size(); ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    for (int64_t h = 0; h < s.hkv; ++h) {
      const int64_t row = paged_row(s, slot / s.block_size, h, slot % s.block_size);
      const int64_t tok = static_cast<int64_t>(t) * s.hkv + h;
      std::copy_n(k.begin() + tok * s.d, s.d, cache.key.begin() + row * s.d);
      std::copy_n(v.begin() + tok * s.dv, s.dv, cache.value.begin() + row * s.dv);
    }
  }
}

std::vector<double> paged_attention_ref(const PagedCacheShape& s, const PagedCache& cache,
                                        const std::vector<double>& q, int64_t q_len,
                                        double scale) {
  const int64_t rows = static_cast<int64_t>(cache.context_lens.size());
  const int64_t group = s.hq / s.hkv;
  std::vector<double> out(static_cast<size_t>(rows * q_len * s.hq * s.dv), 0.0);
  std::vector<double> scores;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t ctx = cache.context_lens[b];
    const int32_t* table = cache.block_tables.data() + b * s.max_blocks_per_seq;
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t pos = ctx - q_len + i;
      if (pos < 0) continue;  // no keys: zeros
      for (int64_t h = 0; h < s.hq; ++h) {
        const double* qr = q.data() + ((b * q_len + i) * s.hq + h) * s.d;
        const int64_t hk = h / group;
        scores.assign(static_cast<size_t>(pos + 1), 0.0);
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= pos; ++j) {
          const int64_t row = paged_row(s, table[j / s.block_size], hk, j % s.block_size);
          double dot = 0.0;
          for (int64_t d = 0; d < s.d; ++d) dot += qr[d] * cache.key[row * s.d + d];
          scores[j] = scale * dot;
          top = std::max(top, scores[j]);
        }
        double sum = 0.0;
        for (double& x : scores) sum += (x = std::exp(x - top));
        double* orow = out.data() + ((b * q_len + i) * s.hq + h) * s.dv;
        for (int64_t j = 0; j <= pos; ++j) {
          const int64_t row = paged_row(s, table[j / s.block_size], hk, j % s.block_size);
          for (int64_t d = 0; d < s.dv; ++d)
            orow[d] += scores[j] / sum * cache.value[row * s.dv + d];
        }
      }
    }
  }
  return out;
}

}  // namespace kiln::testing
