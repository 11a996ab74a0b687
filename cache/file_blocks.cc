#include "cache/file_blocks.h"

#include <algorithm>

#include "cache/file_hash.h"

namespace kiln::cache {

std::vector<uint64_t> block_hashes(const void* data, std::size_t size, uint64_t block_bytes) {
  std::vector<uint64_t> out;
  out.reserve(block_count(size, block_bytes));
  const auto* p = static_cast<const uint8_t*>(data);
  for (uint64_t off = 0; off < size; off += block_bytes)
    out.push_back(hash64(p + off, std::min<uint64_t>(block_bytes, size - off)));
  return out;
}

std::string file_blocks_problem(const schema::FileEntry& e) {
  const uint64_t b = e.block_bytes();
  if (b == 0) {
    if (e.block_xxh3_size() == 0) return "";
    return "block_xxh3 has " + std::to_string(e.block_xxh3_size()) +
           " digests but block_bytes is 0";
  }
  if ((b & (b - 1)) != 0 || b < kMinBlockBytes || b > kMaxBlockBytes)
    return "block_bytes " + std::to_string(b) + " is not a power of two in [" +
           std::to_string(kMinBlockBytes) + ", " + std::to_string(kMaxBlockBytes) + "]";
  const uint64_t want = block_count(e.size(), b);
  if (static_cast<uint64_t>(e.block_xxh3_size()) != want)
    return "block_xxh3 has " + std::to_string(e.block_xxh3_size()) + " digests, but " +
           std::to_string(e.size()) + " bytes in blocks of " + std::to_string(b) + " need " +
           std::to_string(want);
  return "";
}

}  // namespace kiln::cache
