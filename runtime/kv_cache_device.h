// The device half of the paged KV cache: the cache tensors of every layer, and the per-step
// buffers of fixed maximum shape that the attention kernels read (block_tables, context_lens,
// slot_mapping), written from pinned host images before each step. The host logic (which block
// belongs to which sequence) is the KvBlockManager this object owns (kv_cache.h).
//
// Layout (runtime/README.md, "KV cache"):
//   key_cache(l), value_cache(l)  [num_blocks, Hkv, block_size, D] of dtype, per layer l
//   block_tables                  int32 [table_rows, max_blocks_per_seq]
//   context_lens                  int32 [table_rows]
// where table_rows = max(max_sequences, max_tokens): a row per sequence (write_step) or per
// token (write_tokens, the layout generation programs read).
//   slot_mapping                  int64 [max_tokens]; -1: padding, write nothing
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>

#include "cache/dtype.h"
#include "cache/status.h"
#include "runtime/kv_cache.h"

namespace kiln::runtime {

struct KvCacheDeviceOptions {
  int device = 0;
  int64_t num_layers = 0;     // pairs of cache tensors
  int64_t num_kv_heads = 0;   // Hkv
  int64_t head_dim = 0;       // D
  DType dtype = DType::kF16;  // kF32, kF16 or kBF16
  int64_t block_size = 16;
  // Exactly one: a fixed number of blocks, or the fraction of the device's free memory (measured
  // after the step buffers are allocated) that the cache tensors may take.
  int64_t max_blocks = 0;
  double memory_fraction = 0.0;
  int64_t max_sequences = 0;
  int64_t max_seq_len = 0;
  int64_t max_tokens = 0;  // the most tokens one step appends (slot_mapping's length)
};

class KvCacheDevice {
 public:
  // Allocates and zeroes everything (slot_mapping starts all -1). invalid_argument for bad
  // options; resource_exhausted when the memory cannot hold one max_seq_len sequence or the
  // allocation fails.
  static Result<std::unique_ptr<KvCacheDevice>> create(const KvCacheDeviceOptions& o);
  ~KvCacheDevice();
  KvCacheDevice(const KvCacheDevice&) = delete;
  KvCacheDevice& operator=(const KvCacheDevice&) = delete;

  // Bytes one block takes across all layers, keys and values.
  static int64_t block_bytes(const KvCacheDeviceOptions& o);

  KvBlockManager& manager() { return manager_; }
  const KvBlockManager& manager() const { return manager_; }
  int64_t num_blocks() const { return manager_.geometry().num_blocks; }
  int64_t max_tokens() const { return options_.max_tokens; }
  // Bytes of one key_cache (or value_cache) tensor.
  int64_t layer_bytes() const { return layer_bytes_; }
  void* key_cache(int64_t layer) const;
  void* value_cache(int64_t layer) const;
  int32_t* block_tables() const { return block_tables_; }
  int32_t* context_lens() const { return context_lens_; }
  int64_t* slot_mapping() const { return slot_mapping_; }

  // Writes one step: fills the pinned host images with manager().fill_step(batch, rows, tokens)
  // and copies them into the first `rows` rows / `tokens` slots of the device buffers on
  // `stream`. Enqueue it on the stream that then replays the graph (or launches the kernels).
  // On a fill_step error nothing is copied.
  Status write_step(std::span<const SeqTokens> batch, int64_t rows, int64_t tokens,
                    cudaStream_t stream);
  // The per-token layout (KvBlockManager::fill_tokens) for a step padded to `tokens`, copied
  // likewise. Without `copy`, only the host images are filled: a graph that copies
  // token_images(tokens) itself is launched next on `stream`, followed by images_read(stream).
  Status write_tokens(std::span<const SeqTokens> batch, int64_t tokens, cudaStream_t stream,
                      bool copy = true);
  // The pinned host images write_tokens fills for a step padded to `tokens` (at most
  // max_tokens), each the prefix of its device buffer it is copied to; they start as padding.
  KvStepView token_images(int64_t tokens) const;
  // Records, on `stream`, that work enqueued so far has read the host images (a graph copying
  // them): the next write waits for it before refilling them.
  Status images_read(cudaStream_t stream);
  int64_t table_rows() const { return std::max(options_.max_sequences, options_.max_tokens); }

 private:
  KvCacheDevice(const KvCacheDeviceOptions& o, KvBlockManager m)
      : options_(o), manager_(std::move(m)) {}
  Status allocate_step_buffers();
  Status allocate_cache();
  // Copies the filled host images to the device on `stream` and records copied_.
  Status copy_images(const KvStepView& view, cudaStream_t stream);

  KvCacheDeviceOptions options_;
  KvBlockManager manager_;
  int64_t layer_bytes_ = 0;  // one tensor, rounded up to kAlign
  void* cache_ = nullptr;    // all layers: key 0, value 0, key 1, value 1, ...
  int32_t* block_tables_ = nullptr;
  int32_t* context_lens_ = nullptr;
  int64_t* slot_mapping_ = nullptr;
  KvStepView host_;               // pinned images of the three buffers, at their maximum shape
  void* host_block_ = nullptr;    // the pinned allocation behind host_
  cudaEvent_t copied_ = nullptr;  // recorded after the last step's copies
};

}  // namespace kiln::runtime
