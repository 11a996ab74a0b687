// The fast weights upload: several threads each take the next block of the weights file and
// pread it, 512 KiB at a time, into a small ring of pinned buffers of their own; each piece is
// hashed while it is in the core's cache and its copy to the device queued on the thread's own
// stream; the block's XXH3-64 is then checked against the manifest's block digest
// (cache/file_blocks.h). A stream hash runs on one core at about 8 GB/s from memory; readers in
// parallel go as fast as the page cache and the PCIe link.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cache/status.h"
#include "runtime/file_map.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// Readers for a file of `bytes` in blocks of `block_bytes`: one per core, at most 12, at most
// one per block.
int weights_reader_count(uint64_t bytes, uint64_t block_bytes);

// Copies all of `map` to `device` in `entry.block_bytes()` blocks (4 MiB when it has none) and
// returns when every copy is complete. With `verify`, each block must match the entry's
// block_xxh3 (data_loss naming `label`, the block and its offset); `verify` needs block digests.
// `progress` (may be empty) hears the bytes queued so far, on the calling thread.
Status weights_upload_readers(const FileMap& map, void* device, const schema::FileEntry& entry,
                              bool verify, const std::string& label,
                              const std::function<void(int64_t, int64_t)>& progress);

}  // namespace kiln::runtime
