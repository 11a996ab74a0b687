// CPU reference (float64) for attention over a paged KV cache, the layout of
// kernels/paged_attention.cuh: key_cache [num_blocks, hkv, block_size, d], value_cache
// [num_blocks, hkv, block_size, dv], block_tables [rows, max_blocks_per_seq], context_lens
// [rows] (tokens in the cache including this step's), slot_mapping [tokens] (-1: write nothing).
// Every tensor here is contiguous; rows with context_len 0 produce zeros.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::testing {

struct PagedCacheShape {
  int64_t num_blocks = 1, hkv = 1, block_size = 16, d = 64, dv = 64;
  int64_t hq = 1;                  // query heads (a multiple of hkv)
  int64_t max_blocks_per_seq = 1;  // columns of block_tables
};

struct PagedCache {
  std::vector<double> key, value;  // [num_blocks, hkv, block_size, d | dv]
  std::vector<int32_t> block_tables;
  std::vector<int32_t> context_lens;
};

// Element offset of (block, head, offset) row in the key (d) or value (dv) cache.
int64_t paged_row(const PagedCacheShape& s, int64_t block, int64_t head, int64_t offset);

// Copies k [tokens, hkv, d] and v [tokens, hkv, dv] to their slots; slot -1 skipped.
void paged_kv_append_ref(const PagedCacheShape& s, const std::vector<double>& k,
                         const std::vector<double>& v, const std::vector<int64_t>& slot_mapping,
                         PagedCache& cache);

// q [rows, q_len, hq, d] → [rows, q_len, hq, dv]: query i of row b sits at position
// context_len - q_len + i and attends (softmax of scale·q·k) over positions 0..its own.
// Decode is q_len = 1.
std::vector<double> paged_attention_ref(const PagedCacheShape& s, const PagedCache& cache,
                                        const std::vector<double>& q, int64_t q_len,
                                        double scale);

}  // namespace kiln::testing
