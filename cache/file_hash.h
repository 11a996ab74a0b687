// Fast content hashes (XXH3) for artifact integrity and cache keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"

namespace kiln::cache {

uint64_t hash64(const void* data, std::size_t size);      // XXH3-64
std::string hash128_hex(std::string_view data);           // XXH3-128, 32 lowercase hex digits

struct FileDigest {
  uint64_t size = 0;
  uint64_t xxh3 = 0;             // XXH3-64 of the whole file
  std::vector<uint64_t> blocks;  // with block_bytes: each piece's XXH3-64 (cache/file_blocks.h)
};
// Streams the file (constant memory); the error names the path. Only a regular file is read
// (the open never blocks on a FIFO).
Result<FileDigest> file_digest(const std::filesystem::path& path);
// The same for `rel` opened beneath `dir` with no symlink on the way (cache/open_beneath.h): an
// artifact file, opened in the same step that checks it stays inside the artifact.
Result<FileDigest> file_digest_beneath(const std::filesystem::path& dir,
                                       const std::filesystem::path& rel, uint64_t block_bytes = 0);

}  // namespace kiln::cache
