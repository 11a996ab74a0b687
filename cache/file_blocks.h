// Block digests of an artifact file: the XXH3-64 of each fixed-size piece, in order, recorded
// beside the whole file's XXH3-64 (schema::FileEntry block_bytes / block_xxh3). A stream hash
// can only be computed front to back on one core (about 8 GB/s from memory); per-block digests
// let the runtime hash each piece on the thread that read it, while it is still in cache, and so
// verify the weights at the speed it can read and upload them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "schemas/manifest.pb.h"

namespace kiln::cache {

// What the compiler records for the weights file: 4 MiB pieces (one staging buffer each).
inline constexpr uint64_t kWeightsBlockBytes = uint64_t{4} << 20;
// What a manifest may say: a power of two in [kMinBlockBytes, kMaxBlockBytes].
inline constexpr uint64_t kMinBlockBytes = uint64_t{4} << 10;
inline constexpr uint64_t kMaxBlockBytes = uint64_t{256} << 20;

// The XXH3-64 of each `block_bytes` piece of `data` (the last may be shorter; none when size is
// 0). `block_bytes` must be non-zero.
std::vector<uint64_t> block_hashes(const void* data, std::size_t size, uint64_t block_bytes);

// Pieces a file of `size` bytes has at `block_bytes` (non-zero).
inline uint64_t block_count(uint64_t size, uint64_t block_bytes) {
  return size / block_bytes + (size % block_bytes != 0 ? 1 : 0);
}

// Whether `e`'s block digests are well formed: none (block_bytes 0, no digests), or block_bytes a
// power of two in range and exactly one digest per piece of `e.size()`. Returns "" when they
// are, else what is wrong (the caller names the file).
std::string file_blocks_problem(const schema::FileEntry& e);

}  // namespace kiln::cache
