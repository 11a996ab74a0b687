#include "runtime/kv_cache.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_set>

namespace kiln::runtime {

namespace {

using std::to_string;

constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxBlockSize = 256;

std::string seq_name(SeqId seq) { return "sequence " + to_string(seq); }

}  // namespace

Result<KvBlockManager> KvBlockManager::create(const KvCacheGeometry& g) {
  const std::string at = "KV cache: ";
  if (g.block_size < 1 || g.block_size > kMaxBlockSize || (g.block_size & (g.block_size - 1)))
    return invalid_argument(at + "block_size " + to_string(g.block_size) +
                            " is not a power of two in [1, 256]");
  if (g.num_blocks < 1 || g.num_blocks > kMaxBlocks)
    return invalid_argument(at + "num_blocks " + to_string(g.num_blocks) + " is outside [1, " +
                            to_string(kMaxBlocks) + "]");
  if (g.max_sequences < 1)
    return invalid_argument(at + "max_sequences " + to_string(g.max_sequences) +
                            " must be at least 1");
  // Slots are int64, block ids int32: max_seq_len only has to keep the block table int32-sized.
  if (g.max_seq_len < 1 || g.max_seq_len > kMaxBlocks)
    return invalid_argument(at + "max_seq_len " + to_string(g.max_seq_len) + " is outside [1, " +
                            to_string(kMaxBlocks) + "]");
  if (g.num_blocks < g.max_blocks_per_seq())
    return invalid_argument(at + to_string(g.num_blocks) + " blocks of " + to_string(g.block_size) +
                            " tokens cannot hold one sequence of " + "max_seq_len " +
                            to_string(g.max_seq_len) + " (needs " +
                            to_string(g.max_blocks_per_seq()) + " blocks)");
  return KvBlockManager(g);
}

KvBlockManager::KvBlockManager(const KvCacheGeometry& g) : geometry_(g) {
  // Descending, so that a fresh cache hands out blocks 0, 1, 2, ... in order.
  free_.resize(static_cast<size_t>(g.num_blocks));
  for (size_t i = 0; i < free_.size(); ++i)
    free_[i] = static_cast<int32_t>(g.num_blocks - 1 - static_cast<int64_t>(i));
}

Result<const KvBlockManager::Sequence*> KvBlockManager::find(SeqId seq, const char* action) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return not_found("KV cache: cannot " + std::string(action) + " " + seq_name(seq) +
                     ": it is not in the cache (add it first)");
  return &it->second;
}

Status KvBlockManager::add(SeqId seq) {
  if (seqs_.contains(seq))
    return invalid_argument("KV cache: " + seq_name(seq) + " is already in the cache");
  if (live_sequences() >= geometry_.max_sequences)
    return resource_exhausted("KV cache: cannot add " + seq_name(seq) + ": " +
                              to_string(live_sequences()) + " sequences are live, the limit " +
                              "(max_sequences) is " + to_string(geometry_.max_sequences));
  seqs_.emplace(seq, Sequence{});
  return Status::ok_status();
}

Result<int64_t> KvBlockManager::blocks_needed(SeqId seq, int64_t new_tokens) const {
  KILN_ASSIGN_OR_RETURN(const Sequence* s, find(seq, "grow"));
  if (new_tokens < 0)
    return invalid_argument("KV cache: " + seq_name(seq) + ": new_tokens " + to_string(new_tokens) +
                            " is negative");
  if (new_tokens > geometry_.max_seq_len - s->length)
    return invalid_argument("KV cache: " + seq_name(seq) + " of length " + to_string(s->length) +
                            " cannot grow by " + to_string(new_tokens) +
                            " tokens: " + to_string(s->length + new_tokens) +
                            " exceeds max_seq_len " + to_string(geometry_.max_seq_len));
  return blocks_for(s->length + new_tokens) - static_cast<int64_t>(s->blocks.size());
}

void KvBlockManager::grow(SeqId seq, int64_t new_tokens) {
  Sequence& s = seqs_.at(seq);
  s.length += new_tokens;
  while (static_cast<int64_t>(s.blocks.size()) < blocks_for(s.length)) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
}

Status KvBlockManager::reserve(SeqId seq, int64_t new_tokens) {
  const SeqTokens row{seq, new_tokens};
  return reserve(std::span<const SeqTokens>(&row, 1));
}

Status KvBlockManager::reserve(std::span<const SeqTokens> batch) {
  // Every check first; only then does any block move, so an error leaves the cache as it was.
  std::unordered_set<SeqId> seen;
  int64_t needed = 0;
  for (const SeqTokens& row : batch) {
    if (!seen.insert(row.seq).second)
      return invalid_argument("KV cache: " + seq_name(row.seq) +
                              " appears twice in one reserve batch");
    KILN_ASSIGN_OR_RETURN(int64_t n, blocks_needed(row.seq, row.new_tokens));
    needed += n;
    if (needed > free_blocks()) {
      const int64_t length = seqs_.at(row.seq).length;
      return resource_exhausted(
          "KV cache full: " + seq_name(row.seq) + " of length " + to_string(length) +
          " cannot grow by " + to_string(row.new_tokens) +
          " tokens: " + (batch.size() > 1 ? "the batch needs at least " : "it needs ") +
          to_string(needed) + " more blocks of " + to_string(geometry_.block_size) + " tokens, " +
          to_string(free_blocks()) + " of " + to_string(geometry_.num_blocks) + " are free");
    }
  }
  for (const SeqTokens& row : batch) grow(row.seq, row.new_tokens);
  return Status::ok_status();
}

Status KvBlockManager::free(SeqId seq) {
  KILN_ASSIGN_OR_RETURN(const Sequence* s, find(seq, "free"));
  // Reversed, so that the sequence's first block is the next one handed out.
  free_.insert(free_.end(), s->blocks.rbegin(), s->blocks.rend());
  seqs_.erase(seq);
  return Status::ok_status();
}

Result<std::vector<int32_t>> KvBlockManager::blocks(SeqId seq) const {
  KILN_ASSIGN_OR_RETURN(const Sequence* s, find(seq, "query"));
  return s->blocks;
}

Result<int64_t> KvBlockManager::length(SeqId seq) const {
  KILN_ASSIGN_OR_RETURN(const Sequence* s, find(seq, "query"));
  return s->length;
}

Status KvBlockManager::check_batch(std::span<const SeqTokens> batch, int64_t tokens) const {
  std::unordered_set<SeqId> seen;
  int64_t total = 0;
  for (const SeqTokens& row : batch) {
    if (!seen.insert(row.seq).second)
      return invalid_argument("KV step: " + seq_name(row.seq) + " appears twice in one step");
    KILN_ASSIGN_OR_RETURN(const Sequence* s, find(row.seq, "fill a step for"));
    if (row.new_tokens < 1 || row.new_tokens > s->length)
      return invalid_argument("KV step: " + seq_name(row.seq) + " of length " +
                              to_string(s->length) + ": new_tokens " + to_string(row.new_tokens) +
                              " must be in [1, length] (reserve the step's tokens first)");
    total += row.new_tokens;
  }
  if (total > tokens)
    return invalid_argument("KV step: the batch appends " + to_string(total) +
                            " tokens, more than the padded token count " + to_string(tokens));
  return Status::ok_status();
}

Status KvBlockManager::fill_step(std::span<const SeqTokens> batch, int64_t rows, int64_t tokens,
                                 const KvStepView& out) const {
  const int64_t width = geometry_.max_blocks_per_seq();
  const int64_t batch_rows = static_cast<int64_t>(batch.size());
  if (rows < batch_rows || rows > geometry_.max_sequences)
    return invalid_argument("KV step: padded rows " + to_string(rows) + " must be in [" +
                            to_string(batch_rows) + " (the batch), max_sequences " +
                            to_string(geometry_.max_sequences) + "]");
  if (static_cast<int64_t>(out.block_tables.size()) != rows * width ||
      static_cast<int64_t>(out.context_lens.size()) != rows ||
      static_cast<int64_t>(out.slot_mapping.size()) != tokens)
    return invalid_argument("KV step: output buffers hold " + to_string(out.block_tables.size()) +
                            " block table entries, " + to_string(out.context_lens.size()) +
                            " context lengths and " + to_string(out.slot_mapping.size()) +
                            " slots; the step needs " + to_string(rows * width) + ", " +
                            to_string(rows) + " and " + to_string(tokens));
  KILN_RETURN_IF_ERROR(check_batch(batch, tokens));

  std::fill(out.block_tables.begin(), out.block_tables.end(), 0);
  std::fill(out.context_lens.begin(), out.context_lens.end(), 0);
  std::fill(out.slot_mapping.begin(), out.slot_mapping.end(), -1);
  size_t slot = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& s = seqs_.at(batch[i].seq);
    std::copy(s.blocks.begin(), s.blocks.end(),
              out.block_tables.begin() + static_cast<std::ptrdiff_t>(i) * width);
    out.context_lens[i] = static_cast<int32_t>(s.length);
    for (int64_t t = s.length - batch[i].new_tokens; t < s.length; ++t)
      out.slot_mapping[slot++] =
          int64_t{s.blocks[static_cast<size_t>(t / geometry_.block_size)]} * geometry_.block_size +
          t % geometry_.block_size;
  }
  return Status::ok_status();
}

Status KvBlockManager::fill_tokens(std::span<const SeqTokens> batch, int64_t tokens,
                                   const KvStepView& out) const {
  const int64_t width = geometry_.max_blocks_per_seq();
  if (static_cast<int64_t>(out.block_tables.size()) != tokens * width ||
      static_cast<int64_t>(out.context_lens.size()) != tokens ||
      static_cast<int64_t>(out.slot_mapping.size()) != tokens)
    return invalid_argument("KV step: output buffers hold " + to_string(out.block_tables.size()) +
                            " block table entries, " + to_string(out.context_lens.size()) +
                            " context lengths and " + to_string(out.slot_mapping.size()) +
                            " slots; a step of " + to_string(tokens) + " tokens needs " +
                            to_string(tokens * width) + ", " + to_string(tokens) + " and " +
                            to_string(tokens));
  KILN_RETURN_IF_ERROR(check_batch(batch, tokens));
  std::fill(out.block_tables.begin(), out.block_tables.end(), 0);
  std::fill(out.context_lens.begin(), out.context_lens.end(), 0);
  std::fill(out.slot_mapping.begin(), out.slot_mapping.end(), -1);
  size_t row = 0;
  for (const SeqTokens& b : batch) {
    const Sequence& s = seqs_.at(b.seq);
    for (int64_t t = s.length - b.new_tokens; t < s.length; ++t, ++row) {
      std::copy(s.blocks.begin(), s.blocks.end(),
                out.block_tables.begin() + static_cast<std::ptrdiff_t>(row) * width);
      out.context_lens[row] = static_cast<int32_t>(t + 1);
      out.slot_mapping[row] =
          int64_t{s.blocks[static_cast<size_t>(t / geometry_.block_size)]} * geometry_.block_size +
          t % geometry_.block_size;
    }
  }
  return Status::ok_status();
}

Result<KvStepImages> KvBlockManager::fill_tokens(std::span<const SeqTokens> batch,
                                                 int64_t tokens) const {
  if (tokens < 0) return invalid_argument("KV step: tokens " + to_string(tokens) + " is negative");
  KvStepImages img;
  img.rows = tokens;
  img.tokens = tokens;
  img.max_blocks_per_seq = geometry_.max_blocks_per_seq();
  img.block_tables.resize(static_cast<size_t>(tokens * img.max_blocks_per_seq));
  img.context_lens.resize(static_cast<size_t>(tokens));
  img.slot_mapping.resize(static_cast<size_t>(tokens));
  KILN_RETURN_IF_ERROR(
      fill_tokens(batch, tokens, {img.block_tables, img.context_lens, img.slot_mapping}));
  return img;
}

Result<KvStepImages> KvBlockManager::fill_step(std::span<const SeqTokens> batch, int64_t rows,
                                               int64_t tokens) const {
  KvStepImages img;
  img.rows = rows;
  img.tokens = tokens;
  img.max_blocks_per_seq = geometry_.max_blocks_per_seq();
  if (rows < 0 || tokens < 0 || rows > geometry_.max_sequences)
    return invalid_argument("KV step: padded rows " + to_string(rows) + " must be in [" +
                            to_string(batch.size()) + ", max_sequences " +
                            to_string(geometry_.max_sequences) + "] and tokens " +
                            to_string(tokens) + " non-negative");
  img.block_tables.resize(static_cast<size_t>(rows * img.max_blocks_per_seq));
  img.context_lens.resize(static_cast<size_t>(rows));
  img.slot_mapping.resize(static_cast<size_t>(tokens));
  KILN_RETURN_IF_ERROR(
      fill_step(batch, rows, tokens, {img.block_tables, img.context_lens, img.slot_mapping}));
  return img;
}

}  // namespace kiln::runtime
