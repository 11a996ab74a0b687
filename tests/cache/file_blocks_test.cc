#include "cache/file_blocks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/file_hash.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  return s;
}

TEST(FileBlocks, EachBlockIsTheHashOfItsPiece) {
  const std::string s = pattern(10'000);
  const std::vector<uint64_t> h = block_hashes(s.data(), s.size(), 4096);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], hash64(s.data(), 4096));
  EXPECT_EQ(h[1], hash64(s.data() + 4096, 4096));
  EXPECT_EQ(h[2], hash64(s.data() + 8192, 10'000 - 8192));  // the short last block
  EXPECT_TRUE(block_hashes(s.data(), 0, 4096).empty());
  EXPECT_EQ(block_count(0, 4096), 0u);
  EXPECT_EQ(block_count(8192, 4096), 2u);
  EXPECT_EQ(block_count(8193, 4096), 3u);
}

// The streamed file digest cuts the same blocks, also where they do not line up with its reads
// (1 MiB): blocks smaller than a read, larger, and a file ending mid-block.
TEST(FileBlocks, FileDigestGivesTheSameBlocks) {
  testing::TempDir tmp;
  for (const auto& [size, block] : std::vector<std::pair<std::size_t, uint64_t>>{
           {(1u << 20) + 100, 64u << 10}, {(7u << 19), 2u << 20}, {4096, 4096}, {0, 4096}}) {
    SCOPED_TRACE(std::to_string(size) + " bytes in blocks of " + std::to_string(block));
    const std::string s = pattern(size);
    testing::write_bytes(tmp.path() / "f.bin", s);
    Result<FileDigest> d = file_digest_beneath(tmp.path(), "f.bin", block);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->xxh3, hash64(s.data(), s.size()));
    EXPECT_EQ(d->blocks, block_hashes(s.data(), s.size(), block));
    Result<FileDigest> plain = file_digest_beneath(tmp.path(), "f.bin");
    ASSERT_TRUE(plain.ok());
    EXPECT_TRUE(plain->blocks.empty());
    EXPECT_EQ(plain->xxh3, d->xxh3);
  }
}

TEST(FileBlocks, ProblemsAreNamed) {
  schema::FileEntry e;
  e.set_size(10'000);
  EXPECT_EQ(file_blocks_problem(e), "");  // no block digests at all
  e.add_block_xxh3(1);
  EXPECT_EQ(file_blocks_problem(e), "block_xxh3 has 1 digests but block_bytes is 0");
  e.set_block_bytes(4096);
  EXPECT_EQ(file_blocks_problem(e),
            "block_xxh3 has 1 digests, but 10000 bytes in blocks of 4096 need 3");
  e.add_block_xxh3(2);
  e.add_block_xxh3(3);
  EXPECT_EQ(file_blocks_problem(e), "");
  for (uint64_t bad : {uint64_t{2048}, uint64_t{6000}, kMaxBlockBytes * 2}) {
    e.set_block_bytes(bad);
    EXPECT_NE(file_blocks_problem(e).find("is not a power of two in [4096, 268435456]"),
              std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace kiln::cache
