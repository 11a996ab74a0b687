// The KV cache block manager (runtime/kv_cache.h), on the CPU: growth across block boundaries,
// all-or-nothing failures, exclusive ownership of blocks, a stress run, and fill_step's images.
#include "runtime/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using testing::is_error;

KvBlockManager make(int64_t num_blocks, int64_t block_size = 16, int64_t max_sequences = 8,
                    int64_t max_seq_len = 256) {
  Result<KvBlockManager> m =
      KvBlockManager::create({num_blocks, block_size, max_sequences, max_seq_len});
  if (!m.ok()) {
    ADD_FAILURE() << m.status().to_string();
    std::abort();  // the tests below would only repeat the failure
  }
  return std::move(*m);
}

std::vector<int32_t> blocks_of(const KvBlockManager& m, SeqId seq) {
  Result<std::vector<int32_t>> b = m.blocks(seq);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? *b : std::vector<int32_t>{};
}

// Every block is either free or owned by exactly one live sequence.
::testing::AssertionResult blocks_partitioned(const KvBlockManager& m,
                                              const std::vector<SeqId>& live) {
  std::map<int32_t, SeqId> owner;
  int64_t owned = 0;
  for (SeqId s : live) {
    for (int32_t b : blocks_of(m, s)) {
      if (b < 0 || b >= m.geometry().num_blocks)
        return ::testing::AssertionFailure() << "sequence " << s << " owns block " << b;
      auto [it, fresh] = owner.emplace(b, s);
      if (!fresh)
        return ::testing::AssertionFailure()
               << "block " << b << " is owned by sequences " << it->second << " and " << s;
      ++owned;
    }
  }
  if (owned + m.free_blocks() != m.geometry().num_blocks)
    return ::testing::AssertionFailure() << owned << " owned + " << m.free_blocks()
                                         << " free != " << m.geometry().num_blocks << " blocks";
  return ::testing::AssertionSuccess();
}

TEST(KvBlockManager, GeometryIsChecked) {
  auto bad = [](KvCacheGeometry g, std::initializer_list<std::string> needles) {
    Result<KvBlockManager> m = KvBlockManager::create(g);
    return is_error(m.ok() ? Status::ok_status() : m.status(), StatusCode::kInvalidArgument,
                    needles);
  };
  EXPECT_TRUE(bad({64, 12, 8, 256}, {"block_size 12", "power of two"}));
  EXPECT_TRUE(bad({64, 512, 8, 256}, {"block_size 512"}));
  EXPECT_TRUE(bad({64, 0, 8, 256}, {"block_size 0"}));
  EXPECT_TRUE(bad({0, 16, 8, 256}, {"num_blocks 0"}));
  EXPECT_TRUE(bad({64, 16, 0, 256}, {"max_sequences 0"}));
  EXPECT_TRUE(bad({64, 16, 8, 0}, {"max_seq_len 0"}));
  // 257 tokens need 17 blocks of 16.
  EXPECT_TRUE(bad({16, 16, 8, 257}, {"16 blocks", "max_seq_len 257", "needs 17 blocks"}));
  EXPECT_TRUE(KvBlockManager::create({17, 16, 8, 257}).ok());
  EXPECT_EQ((KvCacheGeometry{17, 16, 8, 257}.max_blocks_per_seq()), 17);
}

TEST(KvBlockManager, GrowsAcrossBlockBoundaries) {
  KvBlockManager m = make(8, 16, 8, 128);
  ASSERT_TRUE(m.add(1).ok());
  EXPECT_EQ(*m.length(1), 0);
  EXPECT_TRUE(blocks_of(m, 1).empty());
  ASSERT_TRUE(m.reserve(1, 15).ok());
  EXPECT_EQ(*m.length(1), 15);
  EXPECT_EQ(blocks_of(m, 1), std::vector<int32_t>{0});
  ASSERT_TRUE(m.reserve(1, 1).ok());  // 16: still one block, exactly full
  EXPECT_EQ(blocks_of(m, 1), std::vector<int32_t>{0});
  EXPECT_EQ(m.free_blocks(), 7);
  ASSERT_TRUE(m.reserve(1, 1).ok());  // 17: a second block
  EXPECT_EQ(blocks_of(m, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.free_blocks(), 6);
  ASSERT_TRUE(m.reserve(1, 0).ok());  // no-op
  EXPECT_EQ(*m.length(1), 17);
  // A prefill of 33 tokens at once takes three blocks.
  ASSERT_TRUE(m.add(2).ok());
  ASSERT_TRUE(m.reserve(2, 33).ok());
  EXPECT_EQ(blocks_of(m, 2), (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_TRUE(blocks_partitioned(m, {1, 2}));
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.free_blocks(), 5);
  EXPECT_FALSE(m.contains(1));
  EXPECT_TRUE(blocks_partitioned(m, {2}));
}

TEST(KvBlockManager, FullCacheFailsAndChangesNothing) {
  KvBlockManager m = make(4, 16, 8, 64);
  ASSERT_TRUE(m.add(7).ok());
  ASSERT_TRUE(m.add(8).ok());
  ASSERT_TRUE(m.reserve(7, 40).ok());  // 3 blocks
  const std::vector<int32_t> before = blocks_of(m, 7);
  EXPECT_TRUE(
      is_error(m.reserve(8, 17), StatusCode::kResourceExhausted,
               {"sequence 8", "length 0", "17 tokens", "2 more blocks", "1 of 4 are free"}));
  EXPECT_EQ(*m.length(8), 0);
  EXPECT_TRUE(blocks_of(m, 8).empty());
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_EQ(blocks_of(m, 7), before);
  EXPECT_TRUE(m.reserve(8, 16).ok());  // one block still fits
  EXPECT_TRUE(blocks_partitioned(m, {7, 8}));
}

TEST(KvBlockManager, MaxSeqLenFailsAndChangesNothing) {
  KvBlockManager m = make(64, 16, 8, 100);
  ASSERT_TRUE(m.add(3).ok());
  ASSERT_TRUE(m.reserve(3, 90).ok());
  EXPECT_TRUE(is_error(m.reserve(3, 11), StatusCode::kInvalidArgument,
                       {"sequence 3", "length 90", "101", "max_seq_len 100"}));
  EXPECT_EQ(*m.length(3), 90);
  EXPECT_EQ(blocks_of(m, 3).size(), 6u);
  EXPECT_EQ(m.free_blocks(), 58);
  EXPECT_TRUE(m.reserve(3, 10).ok());
  EXPECT_EQ(*m.length(3), 100);
}

TEST(KvBlockManager, BatchReserveIsAllOrNothing) {
  KvBlockManager m = make(6, 16, 8, 96);
  for (SeqId s : {1, 2, 3}) ASSERT_TRUE(m.add(s).ok());
  ASSERT_TRUE(m.reserve(std::vector<SeqTokens>{{1, 16}, {2, 16}, {3, 16}}).ok());
  EXPECT_EQ(m.free_blocks(), 3);
  // Rows 1 and 2 fit alone; row 3's second block does not: nobody grows.
  const std::vector<SeqTokens> too_many = {{1, 17}, {2, 16}, {3, 32}};
  EXPECT_TRUE(is_error(m.reserve(too_many), StatusCode::kResourceExhausted,
                       {"sequence 3", "length 16", "the batch needs at least 5", "3 of 6"}));
  // A row past max_seq_len after rows that fit: nobody grows.
  EXPECT_TRUE(is_error(m.reserve(std::vector<SeqTokens>{{1, 1}, {2, 81}}),
                       StatusCode::kInvalidArgument, {"sequence 2", "max_seq_len 96"}));
  // An unknown sequence, a negative count, a repeated sequence.
  EXPECT_TRUE(is_error(m.reserve(std::vector<SeqTokens>{{1, 1}, {9, 1}}), StatusCode::kNotFound,
                       {"sequence 9"}));
  EXPECT_TRUE(is_error(m.reserve(std::vector<SeqTokens>{{1, 1}, {2, -1}}),
                       StatusCode::kInvalidArgument, {"sequence 2", "negative"}));
  EXPECT_TRUE(is_error(m.reserve(std::vector<SeqTokens>{{1, 1}, {1, 1}}),
                       StatusCode::kInvalidArgument, {"sequence 1", "twice"}));
  for (SeqId s : {1, 2, 3}) {
    EXPECT_EQ(*m.length(s), 16) << "sequence " << s;
    EXPECT_EQ(blocks_of(m, s).size(), 1u) << "sequence " << s;
  }
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_TRUE(m.reserve(std::vector<SeqTokens>{{1, 17}, {2, 16}}).ok());
  EXPECT_EQ(m.free_blocks(), 0);
  EXPECT_TRUE(blocks_partitioned(m, {1, 2, 3}));
}

TEST(KvBlockManager, AddAndFreeErrors) {
  KvBlockManager m = make(8, 16, 2, 64);
  ASSERT_TRUE(m.add(1).ok());
  EXPECT_TRUE(is_error(m.add(1), StatusCode::kInvalidArgument, {"sequence 1", "already"}));
  ASSERT_TRUE(m.add(2).ok());
  EXPECT_TRUE(is_error(m.add(3), StatusCode::kResourceExhausted,
                       {"sequence 3", "2 sequences are live", "max_sequences) is 2"}));
  EXPECT_TRUE(is_error(m.free(3), StatusCode::kNotFound, {"sequence 3"}));
  EXPECT_TRUE(is_error(m.length(3).status(), StatusCode::kNotFound, {"sequence 3"}));
  EXPECT_TRUE(is_error(m.reserve(3, 1), StatusCode::kNotFound, {"sequence 3"}));
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_TRUE(m.add(3).ok());
  EXPECT_EQ(m.live_sequences(), 2);
}

TEST(KvBlockManager, FreedBlocksAreReused) {
  KvBlockManager m = make(4, 16, 8, 64);
  ASSERT_TRUE(m.add(1).ok());
  ASSERT_TRUE(m.reserve(1, 64).ok());
  EXPECT_EQ(m.free_blocks(), 0);
  const std::vector<int32_t> first = blocks_of(m, 1);
  ASSERT_TRUE(m.free(1).ok());
  EXPECT_EQ(m.free_blocks(), 4);
  ASSERT_TRUE(m.add(2).ok());
  ASSERT_TRUE(m.reserve(2, 64).ok());
  const std::vector<int32_t> second = blocks_of(m, 2);
  EXPECT_EQ(std::set<int32_t>(first.begin(), first.end()),
            std::set<int32_t>(second.begin(), second.end()));
}

// 1,000 sequences of random lengths through a cache that holds 64 at a time (each sized for the
// longest sequence): added, grown in random steps (prefill-like and decode-like), freed at random.
TEST(KvBlockManager, StressThousandSequences) {
  constexpr int64_t kBlock = 16, kMaxLen = 200, kLive = 64;
  const int64_t num_blocks = kLive * ((kMaxLen + kBlock - 1) / kBlock) / 3;  // often full
  KvBlockManager m = make(num_blocks, kBlock, kLive, kMaxLen);
  std::mt19937_64 rng(12345);
  std::map<SeqId, int64_t> target;  // live sequence -> the length it will reach
  std::map<SeqId, int64_t> length;
  SeqId next = 0;
  int64_t full_errors = 0, steps = 0;
  while (next < 1000 || !target.empty()) {
    ++steps;
    // Add while there is room.
    while (next < 1000 && static_cast<int64_t>(target.size()) < kLive) {
      ASSERT_TRUE(m.add(next).ok());
      target[next] = std::uniform_int_distribution<int64_t>(1, kMaxLen)(rng);
      length[next] = 0;
      ++next;
    }
    // Grow a random batch of sequences together: a prompt of random length first, then 1 to 4
    // tokens at a time.
    std::vector<SeqTokens> batch;
    for (const auto& [s, t] : target)
      if (length[s] < t && rng() % 2 == 0) {
        const int64_t room = t - length[s];
        const int64_t grow = length[s] == 0 ? 1 + static_cast<int64_t>(rng() % room)
                                            : std::min<int64_t>(room, 1 + rng() % 4);
        batch.push_back({s, grow});
      }
    const int64_t free_before = m.free_blocks();
    const Status st = m.reserve(batch);
    if (st.ok()) {
      for (const SeqTokens& r : batch) length[r.seq] += r.new_tokens;
    } else {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
      EXPECT_EQ(m.free_blocks(), free_before);
      ++full_errors;
    }
    // Free the finished ones, and (when the cache is full) one unfinished one: preemption.
    std::vector<SeqId> done;
    for (const auto& [s, t] : target)
      if (length[s] == t || (!st.ok() && done.empty())) done.push_back(s);
    for (SeqId s : done) {
      ASSERT_EQ(*m.length(s), length[s]);
      ASSERT_EQ(static_cast<int64_t>(blocks_of(m, s).size()), m.blocks_for(length[s]));
      ASSERT_TRUE(m.free(s).ok());
      target.erase(s);
      length.erase(s);
    }
    std::vector<SeqId> live;
    for (const auto& [s, t] : target) live.push_back(s);
    ASSERT_TRUE(blocks_partitioned(m, live)) << "step " << steps;
  }
  EXPECT_EQ(m.free_blocks(), num_blocks);
  EXPECT_EQ(m.live_sequences(), 0);
  EXPECT_GT(full_errors, 10) << "the stress run should have filled the cache many times";
}

TEST(KvBlockManager, FillStepImages) {
  KvBlockManager m = make(16, 4, 4, 16);  // block 4, max 4 blocks per sequence
  // Blocks are handed out in order 0, 1, 2, ...: sequence 20's 3 earlier tokens take block 0,
  // sequence 30's 8 take blocks 1, 2. Then the step, in batch order: 10 prefills 6 tokens
  // (blocks 3, 4), 20 appends 2 (tokens 3, 4: the end of block 0, then block 5), 30 decodes 1
  // (token 8: block 6).
  for (SeqId s : {10, 20, 30}) ASSERT_TRUE(m.add(s).ok());
  ASSERT_TRUE(m.reserve(20, 3).ok());
  ASSERT_TRUE(m.reserve(30, 8).ok());
  const std::vector<SeqTokens> step = {{10, 6}, {20, 2}, {30, 1}};
  ASSERT_TRUE(m.reserve(step).ok());
  EXPECT_EQ(blocks_of(m, 10), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(blocks_of(m, 20), (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(blocks_of(m, 30), (std::vector<int32_t>{1, 2, 6}));

  // Padded to 4 rows and 12 tokens.
  Result<KvStepImages> img = m.fill_step(step, 4, 12);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->max_blocks_per_seq, 4);
  EXPECT_EQ(img->block_tables, (std::vector<int32_t>{3, 4, 0, 0,  //
                                                     0, 5, 0, 0,  //
                                                     1, 2, 6, 0,  //
                                                     0, 0, 0, 0}));
  EXPECT_EQ(img->context_lens, (std::vector<int32_t>{6, 5, 9, 0}));
  // 10: tokens 0..5 -> slots 12..15 (block 3), 16, 17 (block 4); 20: token 3 -> slot 3 (block 0),
  // token 4 -> slot 20 (block 5); 30: token 8 -> slot 24 (block 6); then padding.
  EXPECT_EQ(img->slot_mapping,
            (std::vector<int64_t>{12, 13, 14, 15, 16, 17, 3, 20, 24, -1, -1, -1}));

  // Unpadded: exactly the batch.
  img = m.fill_step(step, 3, 9);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->context_lens, (std::vector<int32_t>{6, 5, 9}));
  EXPECT_EQ(img->slot_mapping.back(), 24);

  // An empty step: every row padding.
  img = m.fill_step({}, 2, 3);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->context_lens, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(img->slot_mapping, (std::vector<int64_t>{-1, -1, -1}));
  EXPECT_EQ(img->block_tables, std::vector<int32_t>(8, 0));
}

// The per-token layout of the same step: every token its own row, seeing its own position and
// what precedes it in its sequence.
TEST(KvBlockManager, FillTokensImages) {
  KvBlockManager m = make(16, 4, 4, 16);
  for (SeqId s : {10, 20, 30}) ASSERT_TRUE(m.add(s).ok());
  ASSERT_TRUE(m.reserve(20, 3).ok());
  ASSERT_TRUE(m.reserve(30, 8).ok());
  const std::vector<SeqTokens> step = {{10, 2}, {20, 2}, {30, 1}};
  ASSERT_TRUE(m.reserve(step).ok());  // 10: block 3; 20: blocks 0, 4; 30: blocks 1, 2, 5
  Result<KvStepImages> img = m.fill_tokens(step, 6);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(img->rows, 6);
  EXPECT_EQ(img->block_tables, (std::vector<int32_t>{3, 0, 0, 0,  //
                                                     3, 0, 0, 0,  //
                                                     0, 4, 0, 0,  //
                                                     0, 4, 0, 0,  //
                                                     1, 2, 5, 0,  //
                                                     0, 0, 0, 0}));
  EXPECT_EQ(img->context_lens, (std::vector<int32_t>{1, 2, 4, 5, 9, 0}));
  EXPECT_EQ(img->slot_mapping, (std::vector<int64_t>{12, 13, 3, 16, 20, -1}));
  // Too few padded tokens for the batch, a token count the images do not match: errors.
  EXPECT_FALSE(m.fill_tokens(step, 4).ok());
  std::vector<int32_t> bt(4), cl(1);
  std::vector<int64_t> sm(1);
  EXPECT_FALSE(m.fill_tokens(step, 5, {bt, cl, sm}).ok());
}

TEST(KvBlockManager, FillStepErrorsWriteNothing) {
  KvBlockManager m = make(16, 4, 4, 16);
  ASSERT_TRUE(m.add(1).ok());
  ASSERT_TRUE(m.reserve(1, 5).ok());
  const auto err = [&](std::vector<SeqTokens> b, int64_t rows, int64_t tokens) {
    Result<KvStepImages> r = m.fill_step(b, rows, tokens);
    return r.ok() ? Status::ok_status() : r.status();
  };
  EXPECT_TRUE(is_error(err({{1, 5}}, 5, 8), StatusCode::kInvalidArgument,
                       {"padded rows 5", "max_sequences 4"}));
  EXPECT_TRUE(is_error(err({{1, 5}}, 1, 4), StatusCode::kInvalidArgument,
                       {"5 tokens", "padded token count 4"}));
  EXPECT_TRUE(is_error(err({{1, 6}}, 1, 8), StatusCode::kInvalidArgument,
                       {"sequence 1", "length 5", "new_tokens 6"}));
  EXPECT_TRUE(is_error(err({{1, 0}}, 1, 8), StatusCode::kInvalidArgument, {"new_tokens 0"}));
  EXPECT_TRUE(is_error(err({{2, 1}}, 1, 8), StatusCode::kNotFound, {"sequence 2"}));
  EXPECT_TRUE(is_error(err({{1, 1}, {1, 1}}, 2, 8), StatusCode::kInvalidArgument, {"twice"}));

  // The view form checks the buffer sizes, and leaves them untouched on error.
  std::vector<int32_t> bt(4, 77), cl(1, 77);
  std::vector<int64_t> sm(3, 77);
  const std::vector<SeqTokens> step = {{1, 5}};
  EXPECT_TRUE(is_error(m.fill_step(step, 1, 3, {bt, cl, sm}), StatusCode::kInvalidArgument,
                       {"padded token count 3"}));
  EXPECT_EQ(sm, std::vector<int64_t>(3, 77));
  EXPECT_TRUE(is_error(m.fill_step(step, 1, 8, {bt, cl, sm}), StatusCode::kInvalidArgument,
                       {"3 slots", "needs 4, 1 and 8"}));
  EXPECT_EQ(bt, std::vector<int32_t>(4, 77));
}

}  // namespace
}  // namespace kiln::runtime
