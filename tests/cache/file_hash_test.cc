#include "cache/file_hash.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

using testing::TempDir;
using testing::write_bytes;

// Reference values of the XXH3 specification for the empty input (seed 0).
TEST(FileHash, KnownEmptyValues) {
  EXPECT_EQ(hash64("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(hash128_hex(""), "99aa06d3014798d86001c324468d497f");
}

TEST(FileHash, Hash128IsLowercaseHexAndContentSensitive) {
  const std::string a = hash128_hex("hello");
  ASSERT_EQ(a.size(), 32u);
  for (char c : a) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << a;
  EXPECT_EQ(a, hash128_hex("hello"));
  EXPECT_NE(a, hash128_hex("hellp"));
  EXPECT_NE(hash64("hello", 5), hash64("hellp", 5));
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  uint32_t x = 12345;
  for (auto& c : s) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

// Sizes around the 1 MiB read chunk: streaming must agree with the one-shot hash.
TEST(FileHash, FileDigestMatchesOneShotHash) {
  TempDir tmp;
  const std::size_t mib = std::size_t{1} << 20;
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{240}, mib - 1, mib, mib + 1, 3 * mib + 17}) {
    const std::string data = pattern(n);
    const auto p = tmp.path() / ("f" + std::to_string(n));
    write_bytes(p, data);
    Result<FileDigest> d = file_digest(p);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->size, n);
    EXPECT_EQ(d->xxh3, hash64(data.data(), data.size())) << n;
  }
}

TEST(FileHash, MissingFileNamesPath) {
  TempDir tmp;
  const auto p = tmp.path() / "nope.bin";
  Result<FileDigest> d = file_digest(p);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find(p.string()), std::string::npos) << d.status().message();
}

TEST(FileHash, DirectoryIsAnError) {
  TempDir tmp;
  Result<FileDigest> d = file_digest(tmp.path());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find(tmp.path().string()), std::string::npos);
}

}  // namespace
}  // namespace kiln::cache
