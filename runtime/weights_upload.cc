#include "runtime/weights_upload.h"

#include <xxhash.h>

#include "runtime/cuda_check.h"
#include "runtime/weights_readers.h"

namespace kiln::runtime {
namespace {

using UploadProgress = std::function<void(int64_t, int64_t)>;

Status upload_direct(const FileMap& map, void* device, bool verify, uint64_t xxh3,
                     const std::string& label, const UploadProgress& progress) {
  if (verify && XXH3_64bits(map.data(), map.size()) != xxh3)
    return data_loss("'" + label +
                     "' does not match its XXH3-64 in the manifest (changed after verification?)");
  KILN_CUDA_TRY(cudaMemcpy(device, map.data(), map.size(), cudaMemcpyHostToDevice),
                "cudaMemcpy of weights '" + label + "' to the device");
  const auto size = static_cast<int64_t>(map.size());
  if (progress) progress(size, size);
  return Status::ok_status();
}

}  // namespace

WeightsUpload weights_upload_choose(WeightsUpload requested, const schema::FileEntry& entry,
                                    bool verify) {
  WeightsUpload w = requested;
  if (w == WeightsUpload::kAuto)
    w = entry.size() >= kPinnedStagingMinBytes ? WeightsUpload::kPinnedStaging
                                               : WeightsUpload::kDirect;
  if (w == WeightsUpload::kPinnedStaging && verify && entry.block_bytes() == 0)
    w = WeightsUpload::kDirect;
  return w;
}

Status weights_upload(const FileMap& map, void* device, WeightsUpload strategy, bool verify,
                      const schema::FileEntry& entry, const std::string& label,
                      const UploadProgress& progress) {
  if (map.size() == 0) return Status::ok_status();
  switch (strategy) {
    case WeightsUpload::kDirect:
      return upload_direct(map, device, verify, entry.xxh3(), label, progress);
    case WeightsUpload::kPinnedStaging:
      return weights_upload_readers(map, device, entry, verify, label, progress);
    default:
      return internal_error("weights_upload: strategy not resolved (auto)");
  }
}

}  // namespace kiln::runtime
