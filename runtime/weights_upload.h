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
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// kAuto → kDirect below this many bytes, kPinnedStaging from here on. Small files are not worth
// starting reader threads and pinning buffers for; `kiln bench --compare-upload` times both on a
// real GPU (tools/bench/load_bench.py).
inline constexpr uint64_t kPinnedStagingMinBytes = uint64_t{64} << 20;

// The strategy that runs for the weights file `entry` (of `bytes` bytes): kAuto resolved by
// size; kPinnedStaging verifies block by block, so an artifact without block digests that is
// to be verified goes kDirect (hashed whole, then copied). The others are returned as given.
WeightsUpload weights_upload_choose(WeightsUpload requested, const schema::FileEntry& entry,
                                    bool verify);

// Copies all of `map` to `device` (at least map.size() bytes) with `strategy` (as chosen by
// weights_upload_choose) and returns when the copy is complete. With `verify`, the bytes
// uploaded must match `entry`, the manifest's FileEntry of the file (kDirect: its whole-file
// XXH3-64; kPinnedStaging: its block digests, runtime/weights_readers.h), data_loss naming
// `label` otherwise. `progress` (may be empty) hears the bytes copied so far.
Status weights_upload(const FileMap& map, void* device, WeightsUpload strategy, bool verify,
                      const schema::FileEntry& entry, const std::string& label,
                      const std::function<void(int64_t, int64_t)>& progress = nullptr);

}  // namespace kiln::runtime
