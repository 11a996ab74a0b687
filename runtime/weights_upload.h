// Moving the memory-mapped weights file to the device, by one of two strategies (see
// kiln::WeightsUpload), hashing the bytes on the way when asked — so what reaches the device is
// exactly what was checked against the manifest, in one pass over the file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cache/status.h"
#include "kiln/model.h"
#include "runtime/file_map.h"

namespace kiln::runtime {

// kAuto → kDirect below this many bytes, kPinnedStaging from here on. Small files are not worth
// pinning a staging ring for; `kiln bench --compare-upload` times both on a real GPU.
inline constexpr uint64_t kPinnedStagingMinBytes = uint64_t{64} << 20;

// kAuto resolved by size; the other strategies are returned as given.
WeightsUpload weights_upload_choose(WeightsUpload requested, uint64_t bytes);

// Copies all of `map` to `device` (at least map.size() bytes) with `strategy` (not kAuto) and
// returns when the copy is complete. With `verify`, the XXH3-64 of the bytes uploaded must equal
// `xxh3` (data_loss naming `label` otherwise).
// `progress` (may be empty) hears the bytes copied so far after each chunk.
Status weights_upload(const FileMap& map, void* device, WeightsUpload strategy, bool verify,
                      uint64_t xxh3, const std::string& label,
                      const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace kiln::runtime
