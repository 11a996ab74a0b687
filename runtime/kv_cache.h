// The paged KV cache's block manager: which cache blocks each sequence owns, as in vLLM. Pure
// host logic (no CUDA), so it is unit-tested on any machine; kv_cache_device.h owns the device
// tensors and buffers that this manager's step images are copied into.
//
// The cache is num_blocks blocks of block_size token slots. A sequence owns a list of blocks, in
// order; token t of the sequence lives in slot blocks[t / block_size] * block_size +
// t % block_size. Blocks are taken from the free list as a sequence grows (reserve) and all of
// them return when it ends (free). A failed add/reserve/free changes nothing; a batch reserve is
// all-or-nothing for the whole batch.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/status.h"

namespace kiln::runtime {

using SeqId = int64_t;

struct KvCacheGeometry {
  int64_t num_blocks = 0;     // in [1, 2^31 - 1]: block ids are int32
  int64_t block_size = 16;    // tokens per block: a power of two in [1, 256]
  int64_t max_sequences = 0;  // live sequences at once, and rows of block_tables
  int64_t max_seq_len = 0;    // tokens per sequence
  // ceil(max_seq_len / block_size): the columns of block_tables.
  int64_t max_blocks_per_seq() const { return (max_seq_len + block_size - 1) / block_size; }
};

// One row of a step: `new_tokens` tokens appended to sequence `seq`.
struct SeqTokens {
  SeqId seq = 0;
  int64_t new_tokens = 0;
};

// Where fill_step writes one step's host images (borrowed; usually pinned host memory).
// Sizes: block_tables rows * max_blocks_per_seq (row-major), context_lens rows, slot_mapping
// tokens, for the padded `rows` and `tokens` of the step.
struct KvStepView {
  std::span<int32_t> block_tables;
  std::span<int32_t> context_lens;
  std::span<int64_t> slot_mapping;
};

// The same images in owned vectors (tests, debugging).
struct KvStepImages {
  int64_t rows = 0;
  int64_t tokens = 0;
  int64_t max_blocks_per_seq = 0;
  std::vector<int32_t> block_tables;
  std::vector<int32_t> context_lens;
  std::vector<int64_t> slot_mapping;
};

class KvBlockManager {
 public:
  // Checks the geometry (each limit above, and that one max_seq_len sequence fits).
  static Result<KvBlockManager> create(const KvCacheGeometry& g);

  // A new, empty sequence. invalid_argument if `seq` is live; resource_exhausted when
  // max_sequences are live.
  Status add(SeqId seq);
  // Grows `seq` by new_tokens (>= 0), taking the blocks it now needs from the free list.
  // invalid_argument when it would exceed max_seq_len, resource_exhausted when too few blocks
  // are free, not_found for an unknown sequence; the message names the sequence, its length and
  // the limit. On error nothing changes.
  Status reserve(SeqId seq, int64_t new_tokens);
  // All the rows at once, all-or-nothing: every row is checked (and the blocks the batch needs
  // counted) before any block moves. A sequence may appear once per batch.
  Status reserve(std::span<const SeqTokens> batch);
  // Ends `seq`: every block it owns returns to the free list. not_found for an unknown sequence.
  Status free(SeqId seq);

  // One step's images at padded `rows` (batch.size() <= rows <= max_sequences) and padded
  // `tokens` (>= the sum of new_tokens). Call after reserve(batch): each row's new tokens are
  // the last new_tokens of its sequence (1 <= new_tokens <= length). Row i of block_tables is
  // batch[i]'s blocks, then 0 up to max_blocks_per_seq; context_lens[i] is its length;
  // slot_mapping holds the rows' new tokens' slots in batch order. Padding rows: block table 0,
  // context_len 0; padding tokens: slot -1. Writes `out` only when every check passes.
  Status fill_step(std::span<const SeqTokens> batch, int64_t rows, int64_t tokens,
                   const KvStepView& out) const;
  Result<KvStepImages> fill_step(std::span<const SeqTokens> batch, int64_t rows,
                                 int64_t tokens) const;

  // The per-token layout (what generation programs read: kernels see each token as its own
  // row): row t of block_tables is the blocks of token t's sequence, context_lens[t] is token
  // t's position + 1 (so it sees itself and what precedes it), slot_mapping[t] its slot. Tokens
  // are the rows' new tokens in batch order; padding tokens (up to `tokens`): table 0,
  // context_len 0, slot -1. Same checks as fill_step; `out` holds tokens rows.
  Status fill_tokens(std::span<const SeqTokens> batch, int64_t tokens, const KvStepView& out) const;
  Result<KvStepImages> fill_tokens(std::span<const SeqTokens> batch, int64_t tokens) const;

  const KvCacheGeometry& geometry() const { return geometry_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t live_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  bool contains(SeqId seq) const { return seqs_.contains(seq); }
  // The blocks of `seq` in order / its length in tokens; not_found for an unknown sequence.
  Result<std::vector<int32_t>> blocks(SeqId seq) const;
  Result<int64_t> length(SeqId seq) const;
  // Blocks a sequence of `tokens` tokens occupies.
  int64_t blocks_for(int64_t tokens) const {
    return (tokens + geometry_.block_size - 1) / geometry_.block_size;
  }

 private:
  struct Sequence {
    int64_t length = 0;
    std::vector<int32_t> blocks;
  };
  explicit KvBlockManager(const KvCacheGeometry& g);
  Result<const Sequence*> find(SeqId seq, const char* action) const;
  // Every row live, once, with 1 <= new_tokens <= its length, and at most `tokens` in all.
  Status check_batch(std::span<const SeqTokens> batch, int64_t tokens) const;
  // Checks that `seq` can grow by new_tokens without exceeding max_seq_len; the blocks it needs.
  Result<int64_t> blocks_needed(SeqId seq, int64_t new_tokens) const;
  void grow(SeqId seq, int64_t new_tokens);

  KvCacheGeometry geometry_;
  std::vector<int32_t> free_;  // a stack: the next block handed out is free_.back()
  std::unordered_map<SeqId, Sequence> seqs_;
};

}  // namespace kiln::runtime
