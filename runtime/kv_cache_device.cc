#include "runtime/kv_cache_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "runtime/cuda_check.h"

namespace kiln::runtime {

namespace {

using std::to_string;

constexpr int64_t kAlign = 256;  // every tensor and buffer starts at a multiple of this
constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max();

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

Status check_options(const KvCacheDeviceOptions& o) {
  const std::string at = "KV cache: ";
  if (o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16)
    return invalid_argument(at + "dtype " + std::string(dtype_name(o.dtype)) +
                            " is not one of f32, f16, bf16");
  for (auto [name, v] : {std::pair{"num_layers", o.num_layers},
                         {"num_kv_heads", o.num_kv_heads},
                         {"head_dim", o.head_dim},
                         {"max_sequences", o.max_sequences},
                         {"max_tokens", o.max_tokens}})
    if (v < 1 || v > kMaxExtent)
      return invalid_argument(at + name + " " + to_string(v) + " is outside [1, " +
                              to_string(kMaxExtent) + "]");
  if ((o.max_blocks > 0) == (o.memory_fraction > 0.0))
    return invalid_argument(at + "give exactly one of max_blocks (" + to_string(o.max_blocks) +
                            ") and memory_fraction (" + to_string(o.memory_fraction) + ")");
  if (o.max_blocks < 0 || !(o.memory_fraction >= 0.0 && o.memory_fraction <= 1.0))
    return invalid_argument(at + "max_blocks " + to_string(o.max_blocks) +
                            " must be positive and memory_fraction " +
                            to_string(o.memory_fraction) + " in (0, 1]");
  // Keep every byte count below 2^62 so that the sizes below cannot overflow.
  const double per_block = 2.0 * static_cast<double>(o.num_layers) *
                           static_cast<double>(o.num_kv_heads) * static_cast<double>(o.block_size) *
                           static_cast<double>(o.head_dim) *
                           static_cast<double>(dtype_size(o.dtype));
  const double tables = static_cast<double>(std::max(o.max_sequences, o.max_tokens)) *
                        static_cast<double>(o.max_seq_len / std::max<int64_t>(o.block_size, 1) + 1);
  if (per_block * static_cast<double>(std::max<int64_t>(o.max_blocks, 1)) > 0x1p62 ||
      tables > 0x1p40)
    return invalid_argument(at +
                            "too large: the cache would exceed 2^62 bytes or the block "
                            "tables 2^40 entries");
  return Status::ok_status();
}

}  // namespace

int64_t KvCacheDevice::block_bytes(const KvCacheDeviceOptions& o) {
  return 2 * o.num_layers * o.num_kv_heads * o.block_size * o.head_dim *
         static_cast<int64_t>(dtype_size(o.dtype));
}

Result<std::unique_ptr<KvCacheDevice>> KvCacheDevice::create(const KvCacheDeviceOptions& o) {
  KILN_RETURN_IF_ERROR(check_options(o));
  KvCacheGeometry g{o.max_blocks, o.block_size, o.max_sequences, o.max_seq_len};
  // With memory_fraction the block count is known only after measuring; check the rest of the
  // geometry now with the smallest cache that holds one sequence.
  if (o.max_blocks == 0) g.num_blocks = std::max<int64_t>(1, g.max_blocks_per_seq());
  KILN_ASSIGN_OR_RETURN(KvBlockManager m, KvBlockManager::create(g));
  DeviceGuard guard(o.device);
  KILN_RETURN_IF_ERROR(guard.status());
  std::unique_ptr<KvCacheDevice> kv(new KvCacheDevice(o, std::move(m)));
  KILN_RETURN_IF_ERROR(kv->allocate_step_buffers());
  KILN_RETURN_IF_ERROR(kv->allocate_cache());
  return kv;
}

KvCacheDevice::~KvCacheDevice() {
  DeviceGuard guard(options_.device);
  if (copied_ != nullptr) (void)cudaEventSynchronize(copied_);
  if (copied_ != nullptr) (void)cudaEventDestroy(copied_);
  if (host_block_ != nullptr) (void)cudaFreeHost(host_block_);
  for (void* p : {static_cast<void*>(block_tables_), cache_}) (void)cudaFree(p);
  (void)cudaGetLastError();
}

// The three step buffers in one device allocation and one pinned host allocation, each part
// aligned. Device contents start as an all-padding step: block tables 0, lengths 0, slots -1.
Status KvCacheDevice::allocate_step_buffers() {
  const int64_t rows = table_rows();
  const int64_t width = manager_.geometry().max_blocks_per_seq();
  const int64_t bt = align_up(rows * width * 4), cl = align_up(rows * 4),
                sm = align_up(options_.max_tokens * 8);
  const size_t total = static_cast<size_t>(bt + cl + sm);
  void* dev = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&dev, total),
                "KV cache: cudaMalloc of the step buffers (" + to_string(total) + " bytes)");
  auto* base = static_cast<char*>(dev);
  block_tables_ = reinterpret_cast<int32_t*>(base);
  context_lens_ = reinterpret_cast<int32_t*>(base + bt);
  slot_mapping_ = reinterpret_cast<int64_t*>(base + bt + cl);
  KILN_CUDA_TRY(cudaMemset(base, 0, static_cast<size_t>(bt + cl)), "KV cache: zeroing the tables");
  KILN_CUDA_TRY(cudaMemset(slot_mapping_, 0xff, static_cast<size_t>(sm)),
                "KV cache: setting the slots to -1");

  KILN_CUDA_TRY(cudaMallocHost(&host_block_, total),
                "KV cache: cudaMallocHost of the step images (" + to_string(total) + " bytes)");
  auto* h = static_cast<char*>(host_block_);
  host_.block_tables = {reinterpret_cast<int32_t*>(h), static_cast<size_t>(rows * width)};
  host_.context_lens = {reinterpret_cast<int32_t*>(h + bt), static_cast<size_t>(rows)};
  host_.slot_mapping = {reinterpret_cast<int64_t*>(h + bt + cl),
                        static_cast<size_t>(options_.max_tokens)};
  // The images start as the device buffers do: a graph that copies them (token_images) before
  // any step is filled then replays an all-padding step.
  std::memset(h, 0, static_cast<size_t>(bt + cl));
  std::memset(h + bt + cl, 0xff, static_cast<size_t>(sm));
  KILN_CUDA_TRY(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming),
                "KV cache: cudaEventCreate");
  return Status::ok_status();
}

Status KvCacheDevice::allocate_cache() {
  const int64_t per_block = block_bytes(options_);
  const int64_t tensors = 2 * options_.num_layers;
  int64_t blocks = options_.max_blocks;
  if (blocks == 0) {
    size_t free = 0, total = 0;
    KILN_CUDA_TRY(cudaMemGetInfo(&free, &total), "KV cache: cudaMemGetInfo");
    // Each tensor is rounded up to kAlign: leave that much of the budget for it.
    const double budget = std::floor(static_cast<double>(free) * options_.memory_fraction) -
                          static_cast<double>(tensors * kAlign);
    blocks = budget <= 0 ? 0 : static_cast<int64_t>(budget / static_cast<double>(per_block));
    blocks = std::min(blocks, kMaxExtent);
    const int64_t one_seq = manager_.geometry().max_blocks_per_seq();
    if (blocks < one_seq)
      return resource_exhausted("KV cache: memory_fraction " + to_string(options_.memory_fraction) +
                                " of the " + to_string(free) + " free bytes holds " +
                                to_string(blocks) + " blocks of " + to_string(per_block) +
                                " bytes; one sequence of max_seq_len " +
                                to_string(options_.max_seq_len) + " needs " + to_string(one_seq));
    KvCacheGeometry g = manager_.geometry();
    g.num_blocks = blocks;
    KILN_ASSIGN_OR_RETURN(manager_, KvBlockManager::create(g));
  }
  layer_bytes_ = align_up(blocks * (per_block / tensors));
  const size_t total = static_cast<size_t>(layer_bytes_ * tensors);
  KILN_CUDA_TRY(cudaMalloc(&cache_, total), "KV cache: cudaMalloc of " + to_string(blocks) +
                                                " blocks (" + to_string(total) + " bytes)");
  // Zeroed so that padding lanes of a block that attention reads but masks are finite.
  KILN_CUDA_TRY(cudaMemset(cache_, 0, total), "KV cache: zeroing the cache");
  return Status::ok_status();
}

void* KvCacheDevice::key_cache(int64_t layer) const {
  if (layer < 0 || layer >= options_.num_layers) return nullptr;
  return static_cast<char*>(cache_) + 2 * layer * layer_bytes_;
}

void* KvCacheDevice::value_cache(int64_t layer) const {
  if (layer < 0 || layer >= options_.num_layers) return nullptr;
  return static_cast<char*>(cache_) + (2 * layer + 1) * layer_bytes_;
}

// Why copies on the replaying stream, outside the graphs, are correct with CUDA graph replay:
//  - A captured graph keeps the kernel arguments it was captured with: the device addresses of
//    these fixed-maximum-shape buffers. Only their contents change from step to step, so one
//    graph per padded batch size serves every step (padding rows: context_len 0, slot -1).
//  - The copies are enqueued on `stream` right before the replay (or the eager launches), so
//    stream order completes them before any kernel of this step reads the buffers, and starts
//    them only after every kernel of the previous step (which still reads the old values) has
//    finished. That holds in every mode: FULL, PIECEWISE (attention eager between graphs) and
//    NONE. A decode graph may instead hold copy nodes from the fixed host images
//    (token_images; write_tokens without `copy`): as ordered, and no stream operations of their
//    own; the eager paths keep these copies.
//  - The source is pinned memory, so the copy is a true asynchronous DMA; the host must then
//    not rewrite the images while the previous step's copy may still be reading them, so the
//    images are refilled only after the event recorded behind the last copies has completed.
Status KvCacheDevice::write_step(std::span<const SeqTokens> batch, int64_t rows, int64_t tokens,
                                 cudaStream_t stream) {
  if (tokens < 0 || tokens > options_.max_tokens)
    return invalid_argument("KV step: padded tokens " + to_string(tokens) + " is outside [0, " +
                            "max_tokens " + to_string(options_.max_tokens) + "]");
  if (rows < 0 || rows > options_.max_sequences)
    return invalid_argument("KV step: padded rows " + to_string(rows) + " is outside [0, " +
                            "max_sequences " + to_string(options_.max_sequences) + "]");
  KILN_CUDA_TRY(cudaEventSynchronize(copied_), "KV step: waiting for the previous step's copy");
  const int64_t width = manager_.geometry().max_blocks_per_seq();
  const KvStepView view{host_.block_tables.first(static_cast<size_t>(rows * width)),
                        host_.context_lens.first(static_cast<size_t>(rows)),
                        host_.slot_mapping.first(static_cast<size_t>(tokens))};
  KILN_RETURN_IF_ERROR(manager_.fill_step(batch, rows, tokens, view));
  return copy_images(view, stream);
}

KvStepView KvCacheDevice::token_images(int64_t tokens) const {
  const auto t = static_cast<size_t>(std::clamp<int64_t>(tokens, 0, options_.max_tokens));
  const auto width = static_cast<size_t>(manager_.geometry().max_blocks_per_seq());
  return KvStepView{host_.block_tables.first(t * width), host_.context_lens.first(t),
                    host_.slot_mapping.first(t)};
}

Status KvCacheDevice::write_tokens(std::span<const SeqTokens> batch, int64_t tokens,
                                   cudaStream_t stream, bool copy) {
  if (tokens < 0 || tokens > options_.max_tokens)
    return invalid_argument("KV step: padded tokens " + to_string(tokens) + " is outside [0, " +
                            "max_tokens " + to_string(options_.max_tokens) + "]");
  KILN_CUDA_TRY(cudaEventSynchronize(copied_), "KV step: waiting for the previous step's copy");
  const KvStepView view = token_images(tokens);
  KILN_RETURN_IF_ERROR(manager_.fill_tokens(batch, tokens, view));
  return copy ? copy_images(view, stream) : Status::ok_status();
}

Status KvCacheDevice::images_read(cudaStream_t stream) {
  KILN_CUDA_TRY(cudaEventRecord(copied_, stream), "KV step: cudaEventRecord");
  return Status::ok_status();
}

Status KvCacheDevice::copy_images(const KvStepView& view, cudaStream_t stream) {
  const auto copy = [&](void* dst, const void* src, size_t bytes, const char* what) -> Status {
    if (bytes == 0) return Status::ok_status();
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream),
                  std::string("KV step: copying ") + what + " (" + to_string(bytes) +
                      " bytes) to the device");
    return Status::ok_status();
  };
  KILN_RETURN_IF_ERROR(copy(block_tables_, view.block_tables.data(), view.block_tables.size_bytes(),
                            "block_tables"));
  KILN_RETURN_IF_ERROR(copy(context_lens_, view.context_lens.data(), view.context_lens.size_bytes(),
                            "context_lens"));
  KILN_RETURN_IF_ERROR(copy(slot_mapping_, view.slot_mapping.data(), view.slot_mapping.size_bytes(),
                            "slot_mapping"));
  return images_read(stream);
}

}  // namespace kiln::runtime
