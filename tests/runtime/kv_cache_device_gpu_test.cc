// The KV cache's device half (runtime/kv_cache_device.h) on a GPU: after write_step the device
// buffers hold exactly the host images fill_step produces (padding rows included), and a cache
// sized by memory_fraction fits in the GPU's free memory. Skips without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/kv_cache_device.h"
#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using testing::is_error;

// 3 layers of [32 blocks, 2 heads, 4 tokens, 8 dims] in f16; 4 blocks per sequence.
KvCacheDeviceOptions small() {
  KvCacheDeviceOptions o;
  o.num_layers = 3;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.dtype = DType::kF16;
  o.block_size = 4;
  o.max_blocks = 32;
  o.max_sequences = 4;
  o.max_seq_len = 16;
  o.max_tokens = 24;
  return o;
}

class KvCacheDeviceGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      GTEST_SKIP() << "no CUDA device";
    }
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  template <typename T>
  std::vector<T> download(const T* dev, size_t n) {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  cudaStream_t stream_ = nullptr;
};

TEST_F(KvCacheDeviceGpu, FixedBlocksLayout) {
  Result<std::unique_ptr<KvCacheDevice>> kv = KvCacheDevice::create(small());
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  KvCacheDevice& c = **kv;
  EXPECT_EQ(c.num_blocks(), 32);
  EXPECT_EQ(c.manager().free_blocks(), 32);
  EXPECT_EQ(KvCacheDevice::block_bytes(small()), 2 * 3 * 2 * 4 * 8 * 2);
  // [32 blocks, 2 heads, 4 tokens, 8 dims] of f16 = 4096 bytes per tensor, distinct and ordered.
  EXPECT_EQ(c.layer_bytes(), 4096);
  for (int64_t l = 0; l < 3; ++l) {
    ASSERT_NE(c.key_cache(l), nullptr);
    EXPECT_EQ(static_cast<char*>(c.value_cache(l)) - static_cast<char*>(c.key_cache(l)), 4096);
    if (l > 0) {
      EXPECT_EQ(static_cast<char*>(c.key_cache(l)) - static_cast<char*>(c.value_cache(l - 1)),
                4096);
    }
  }
  EXPECT_EQ(c.key_cache(3), nullptr);
  EXPECT_EQ(c.value_cache(-1), nullptr);
  // The cache starts zeroed.
  const std::vector<uint16_t> v =
      download(static_cast<const uint16_t*>(c.value_cache(2)), 4096 / 2);
  EXPECT_EQ(v, std::vector<uint16_t>(4096 / 2, 0));
  // The step buffers start as an all-padding step.
  EXPECT_EQ(download(c.context_lens(), 4), std::vector<int32_t>(4, 0));
  EXPECT_EQ(download(c.slot_mapping(), 24), std::vector<int64_t>(24, -1));
  EXPECT_EQ(download(c.block_tables(), 16), std::vector<int32_t>(16, 0));
}

TEST_F(KvCacheDeviceGpu, DeviceBuffersHoldTheHostImages) {
  Result<std::unique_ptr<KvCacheDevice>> kv = KvCacheDevice::create(small());
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  KvCacheDevice& c = **kv;
  KvBlockManager& m = c.manager();
  for (SeqId s : {5, 6, 7}) ASSERT_TRUE(m.add(s).ok());
  ASSERT_TRUE(m.reserve(6, 7).ok());
  // A mixed step: a prefill of 9, one token, two tokens; padded to 4 rows and 16 tokens.
  const std::vector<SeqTokens> step = {{5, 9}, {6, 1}, {7, 2}};
  ASSERT_TRUE(m.reserve(step).ok());
  ASSERT_TRUE(c.write_step(step, 4, 16, stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  Result<KvStepImages> img = m.fill_step(step, 4, 16);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(download(c.block_tables(), 16), img->block_tables);
  EXPECT_EQ(download(c.context_lens(), 4), img->context_lens);
  EXPECT_EQ(download(c.slot_mapping(), 16), img->slot_mapping);
  EXPECT_EQ(img->context_lens, (std::vector<int32_t>{9, 8, 2, 0}));
  EXPECT_EQ(img->slot_mapping[12], -1);

  // Then decode steps of every sequence, padded to 4 rows and 4 tokens, several in a row
  // without synchronising in between (the pinned images are reused): the last one is what the
  // device holds.
  const std::vector<SeqTokens> decode = {{5, 1}, {6, 1}, {7, 1}};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(m.reserve(decode).ok());
    ASSERT_TRUE(c.write_step(decode, 4, 4, stream_).ok());
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  img = m.fill_step(decode, 4, 4);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  EXPECT_EQ(download(c.block_tables(), 16), img->block_tables);
  EXPECT_EQ(download(c.context_lens(), 4), (std::vector<int32_t>{12, 11, 5, 0}));
  EXPECT_EQ(download(c.slot_mapping(), 4), img->slot_mapping);
  EXPECT_EQ(img->slot_mapping[3], -1);

  // A step that fails its checks copies nothing.
  EXPECT_TRUE(is_error(c.write_step(decode, 4, 25, stream_), StatusCode::kInvalidArgument,
                       {"padded tokens 25", "max_tokens 24"}));
  EXPECT_TRUE(is_error(c.write_step(decode, 2, 4, stream_), StatusCode::kInvalidArgument,
                       {"padded rows 2"}));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(download(c.context_lens(), 4), (std::vector<int32_t>{12, 11, 5, 0}));
}

// write_tokens without `copy` fills only the pinned images (token_images), which start as
// padding; whoever copies them (a decode graph's copy nodes; here plain copies) then records
// images_read, and the next write waits for that before refilling them.
TEST_F(KvCacheDeviceGpu, TokenImagesFilledForAGraphToCopy) {
  Result<std::unique_ptr<KvCacheDevice>> kv = KvCacheDevice::create(small());
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  KvCacheDevice& c = **kv;
  const KvStepView start = c.token_images(24);
  ASSERT_EQ(start.block_tables.size(), 24u * 4);
  for (int32_t b : start.block_tables) ASSERT_EQ(b, 0);
  for (int32_t l : start.context_lens) ASSERT_EQ(l, 0);
  for (int64_t s : start.slot_mapping) ASSERT_EQ(s, -1);
  EXPECT_EQ(c.token_images(100).slot_mapping.size(), 24u);  // at most max_tokens

  KvBlockManager& m = c.manager();
  for (SeqId s : {5, 6}) ASSERT_TRUE(m.add(s).ok());
  const std::vector<SeqTokens> step = {{5, 3}, {6, 2}};
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(m.reserve(step).ok());
    ASSERT_TRUE(c.write_tokens(step, 8, stream_, /*copy=*/false).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    // Nothing was copied: the device still holds the all-padding step.
    EXPECT_EQ(download(c.slot_mapping(), 8), std::vector<int64_t>(8, -1));
    const KvStepView img = c.token_images(8);
    Result<KvStepImages> want = m.fill_tokens(step, 8);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    EXPECT_EQ(std::vector<int32_t>(img.block_tables.begin(), img.block_tables.end()),
              want->block_tables);
    EXPECT_EQ(std::vector<int32_t>(img.context_lens.begin(), img.context_lens.end()),
              want->context_lens);
    EXPECT_EQ(std::vector<int64_t>(img.slot_mapping.begin(), img.slot_mapping.end()),
              want->slot_mapping);
    EXPECT_EQ(img.slot_mapping[7], -1);
    ASSERT_EQ(cudaMemcpyAsync(c.slot_mapping(), img.slot_mapping.data(),
                              img.slot_mapping.size_bytes(), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    ASSERT_TRUE(c.images_read(stream_).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(download(c.slot_mapping(), 8), want->slot_mapping);
    // Back to padding on the device, for the next round's "nothing was copied".
    ASSERT_EQ(cudaMemset(c.slot_mapping(), 0xff, 8 * sizeof(int64_t)), cudaSuccess);
  }
}

TEST_F(KvCacheDeviceGpu, MemoryFractionFitsInFreeMemory) {
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  KvCacheDeviceOptions o = small();
  o.max_blocks = 0;
  o.memory_fraction = 0.25;
  o.num_layers = 4;
  o.num_kv_heads = 8;
  o.head_dim = 128;
  o.block_size = 16;
  o.max_seq_len = 4096;
  Result<std::unique_ptr<KvCacheDevice>> kv = KvCacheDevice::create(o);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  const double cache_bytes =
      static_cast<double>((*kv)->num_blocks()) * static_cast<double>(KvCacheDevice::block_bytes(o));
  const double quarter = 0.25 * static_cast<double>(free_before);
  EXPECT_LE(cache_bytes, quarter);
  // Within one block and the step buffers (one allocation granule, 2 MiB) of a quarter.
  EXPECT_GE(cache_bytes, quarter - static_cast<double>(KvCacheDevice::block_bytes(o)) - 4e6);
  EXPECT_EQ((*kv)->manager().free_blocks(), (*kv)->num_blocks());
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GE(static_cast<double>(free_before - free_after), cache_bytes);
  // The last block is addressable: zeroed, readable.
  const int64_t tail = (*kv)->layer_bytes() - 16;
  std::vector<char> bytes(16, 1);
  ASSERT_EQ(cudaMemcpy(bytes.data(), static_cast<char*>((*kv)->value_cache(3)) + tail, 16,
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(bytes, std::vector<char>(16, 0));
}

TEST_F(KvCacheDeviceGpu, MemoryFractionTooSmall) {
  KvCacheDeviceOptions o = small();
  o.max_blocks = 0;
  o.memory_fraction = 1e-12;
  EXPECT_TRUE(is_error(KvCacheDevice::create(o).status(), StatusCode::kResourceExhausted,
                       {"memory_fraction", "max_seq_len 16", "needs 4"}));
}

// Bad options fail before any CUDA call, so this part runs without a GPU too.
TEST(KvCacheDeviceOptions, Errors) {
  const auto fails = [](void (*change)(KvCacheDeviceOptions&), std::string needle) {
    KvCacheDeviceOptions o = small();
    change(o);
    return is_error(KvCacheDevice::create(o).status(), StatusCode::kInvalidArgument, {needle});
  };
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.memory_fraction = 0.5; },
                    "exactly one of max_blocks (32) and memory_fraction"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.max_blocks = 0; }, "exactly one"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.dtype = DType::kI32; }, "dtype i32"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.max_blocks = 3; }, "needs 4 blocks"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.head_dim = 0; }, "head_dim 0"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.max_tokens = 0; }, "max_tokens 0"));
  EXPECT_TRUE(fails([](KvCacheDeviceOptions& o) { o.block_size = 3; }, "block_size 3"));
}

}  // namespace
}  // namespace kiln::runtime
