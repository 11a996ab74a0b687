#include "runtime/weights_upload.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "runtime/cuda_check.h"

namespace kiln::runtime {
namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;  // small enough to be cache-hot when hashed
constexpr size_t kSlots = 4;                     // chunks in flight

Status digest_check(uint64_t got, uint64_t want, const std::string& label) {
  if (got == want) return Status::ok_status();
  return data_loss("'" + label +
                   "' does not match its XXH3-64 in the manifest (changed after verification?)");
}

// The pinned ring and what it needs; the destructor waits for every copy still in flight
// before releasing the buffers they read.
struct StagingRing {
  char* pinned = nullptr;
  cudaStream_t stream = nullptr;
  std::array<cudaEvent_t, kSlots> done{};
  XXH3_state_t* hash = nullptr;

  ~StagingRing() {
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (cudaEvent_t e : done)
      if (e != nullptr) (void)cudaEventDestroy(e);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
    if (pinned != nullptr) (void)cudaFreeHost(pinned);
    if (hash != nullptr) XXH3_freeState(hash);
    (void)cudaGetLastError();
  }
};

using UploadProgress = std::function<void(int64_t, int64_t)>;

Status upload_direct(const FileMap& map, void* device, bool verify, uint64_t xxh3,
                     const std::string& label, const UploadProgress& progress) {
  if (verify) KILN_RETURN_IF_ERROR(digest_check(XXH3_64bits(map.data(), map.size()), xxh3, label));
  KILN_CUDA_TRY(cudaMemcpy(device, map.data(), map.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy of weights '" + label + "' to the device");
  const auto size = static_cast<int64_t>(map.size());
  if (progress) progress(size, size);
  return Status::ok_status();
}

Status upload_pinned(const FileMap& map, void* device, bool verify, uint64_t xxh3,
                     const std::string& label, const UploadProgress& progress) {
  const size_t size = map.size();
  const size_t chunk = std::min(size, kChunkBytes);
  const size_t slots = std::min(kSlots, (size + chunk - 1) / chunk);
  const std::string what = "uploading weights '" + label + "' through pinned staging";
  StagingRing ring;
  void* pinned = nullptr;
  KILN_CUDA_TRY(cudaHostAlloc(&pinned, chunk * slots, cudaHostAllocDefault),
                what + " (cudaHostAlloc of " + std::to_string(chunk * slots) + " bytes)");
  ring.pinned = static_cast<char*>(pinned);
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&ring.stream, cudaStreamNonBlocking),
                what + " (cudaStreamCreateWithFlags)");
  for (size_t i = 0; i < slots; ++i)
    KILN_CUDA_TRY(cudaEventCreateWithFlags(&ring.done[i], cudaEventDisableTiming),
                  what + " (cudaEventCreateWithFlags)");
  if (verify) {
    ring.hash = XXH3_createState();
    if (ring.hash == nullptr || XXH3_64bits_reset(ring.hash) != XXH_OK)
      return resource_exhausted(what + ": cannot create an XXH3 state");
  }
  auto* dst = static_cast<char*>(device);
  size_t index = 0;
  for (size_t offset = 0; offset < size; offset += chunk, ++index) {
    const size_t slot = index % slots;
    const size_t n = std::min(chunk, size - offset);
    char* buf = ring.pinned + slot * chunk;
    if (index >= slots)  // the previous upload from this slot must be done before it is reused
      KILN_CUDA_TRY(cudaEventSynchronize(ring.done[slot]), what + " (cudaEventSynchronize)");
    std::memcpy(buf, map.data() + offset, n);
    if (ring.hash != nullptr && XXH3_64bits_update(ring.hash, buf, n) != XXH_OK)
      return internal_error(what + ": XXH3 update failed");
    KILN_CUDA_TRY(cudaMemcpyAsync(dst + offset, buf, n, cudaMemcpyHostToDevice, ring.stream),
                  what + " (cudaMemcpyAsync at offset " + std::to_string(offset) + ")");
    KILN_CUDA_TRY(cudaEventRecord(ring.done[slot], ring.stream), what + " (cudaEventRecord)");
    // Counted when queued: the slot's reuse (or the final synchronize) waits for the copy.
    if (progress) progress(static_cast<int64_t>(offset + n), static_cast<int64_t>(size));
  }
  KILN_CUDA_TRY(cudaStreamSynchronize(ring.stream), what + " (cudaStreamSynchronize)");
  if (ring.hash != nullptr)
    KILN_RETURN_IF_ERROR(digest_check(XXH3_64bits_digest(ring.hash), xxh3, label));
  return Status::ok_status();
}

}  // namespace

WeightsUpload weights_upload_choose(WeightsUpload requested, uint64_t bytes) {
  if (requested != WeightsUpload::kAuto) return requested;
  return bytes >= kPinnedStagingMinBytes ? WeightsUpload::kPinnedStaging : WeightsUpload::kDirect;
}

Status weights_upload(const FileMap& map, void* device, WeightsUpload strategy, bool verify,
                      uint64_t xxh3, const std::string& label, const UploadProgress& progress) {
  if (map.size() == 0) return Status::ok_status();
  switch (strategy) {
    case WeightsUpload::kDirect:
      return upload_direct(map, device, verify, xxh3, label, progress);
    case WeightsUpload::kPinnedStaging:
      return upload_pinned(map, device, verify, xxh3, label, progress);
    default:
      return internal_error("weights_upload: strategy not resolved (auto)");
  }
}

}  // namespace kiln::runtime
