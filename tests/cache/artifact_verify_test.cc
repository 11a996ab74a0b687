#include "cache/artifact_verify.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/artifact_publish.h"
#include "cache/cache_layout.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class ArtifactVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = ArtifactStage::begin(tmp_.path(), "k");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    std::string weights(256, '\0');
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 7);
    ASSERT_TRUE((*s)->add_file("weights.bin", bytes_of(weights), schema::FILE_ROLE_WEIGHTS).ok());
    ASSERT_TRUE(
        (*s)->add_file("cubins/m0.sm_90.cubin", bytes_of("ELF-cubin"), schema::FILE_ROLE_CUBIN)
            .ok());
    schema::Manifest m;
    m.set_weights_file("weights.bin");
    m.set_weights_bytes(weights.size());
    auto* c = m.add_modules()->add_cubins();
    c->set_arch("sm_90");
    c->set_path("cubins/m0.sm_90.cubin");
    Result<fs::path> dir = (*s)->publish(m);
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    dir_ = *dir;
  }

  // Rewrites the manifest after `edit`, keeping its header valid.
  template <typename F>
  void edit_manifest(F edit) {
    Result<schema::Manifest> m = manifest_read(dir_ / kManifestFileName);
    ASSERT_TRUE(m.ok());
    edit(*m);
    write_bytes(dir_ / kManifestFileName, manifest_encode(*m));
  }

  Status verify() {
    Result<schema::Manifest> r = artifact_verify(dir_);
    return r.ok() ? Status::ok_status() : r.status();
  }

  static bool contains(const Status& s, const std::string& needle) {
    return s.message().find(needle) != std::string::npos;
  }

  TempDir tmp_;
  fs::path dir_;
};

TEST_F(ArtifactVerifyTest, FreshArtifactVerifies) {
  Result<schema::Manifest> r = artifact_verify(dir_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->files_size(), 2);
  EXPECT_EQ(r->key(), "k");
}

TEST_F(ArtifactVerifyTest, RelocatedArtifactVerifies) {
  const fs::path moved = tmp_.path() / "elsewhere";
  fs::rename(dir_, moved);
  dir_ = moved;
  EXPECT_TRUE(verify().ok()) << verify().to_string();
}

TEST_F(ArtifactVerifyTest, MissingManifest) {
  fs::remove(dir_ / kManifestFileName);
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(s, (dir_ / kManifestFileName).string())) << s.message();
}

TEST_F(ArtifactVerifyTest, EveryFlippedBitInADataFileIsDetected) {
  const fs::path p = dir_ / "weights.bin";
  const std::string orig = read_bytes(p);
  for (std::size_t bit = 0; bit < orig.size() * 8; ++bit) {
    std::string b = orig;
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
    write_bytes(p, b);
    Status s = verify();
    ASSERT_EQ(s.code(), StatusCode::kDataLoss) << "bit " << bit << ": " << s.to_string();
    ASSERT_TRUE(contains(s, p.string() + ": XXH3 ")) << s.message();
  }
  write_bytes(p, orig);
  EXPECT_TRUE(verify().ok());
}

TEST_F(ArtifactVerifyTest, FlippedBitsInTheManifestAreDetected) {
  const fs::path p = dir_ / kManifestFileName;
  const std::string orig = read_bytes(p);
  for (std::size_t bit = 0; bit < orig.size() * 8; ++bit) {
    if (bit >= kManifestHeaderBytes * 8 && bit % 5 != 0) continue;  // all header bits, 1/5 after
    std::string b = orig;
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
    write_bytes(p, b);
    EXPECT_FALSE(verify().ok()) << "manifest bit " << bit;
  }
}

TEST_F(ArtifactVerifyTest, TruncatedDataFile) {
  const fs::path p = dir_ / "cubins/m0.sm_90.cubin";
  write_bytes(p, "ELF");
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s, p.string() + ": size 3 bytes, manifest says 9")) << s.message();
}

TEST_F(ArtifactVerifyTest, MissingDataFile) {
  fs::remove(dir_ / "weights.bin");
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(s, (dir_ / "weights.bin").string())) << s.message();
}

TEST_F(ArtifactVerifyTest, SymlinkEntryIsRejectedEvenWithTheRightContents) {
  const fs::path p = dir_ / "weights.bin";
  const fs::path outside = tmp_.path() / "outside.bin";
  fs::copy_file(p, outside);
  fs::remove(p);
  fs::create_symlink(outside, p);
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s, "symlink")) << s.message();
}

TEST_F(ArtifactVerifyTest, SymlinkedParentDirectoryIsRejected) {
  const fs::path outside = tmp_.path() / "outside";
  fs::rename(dir_ / "cubins", outside);
  fs::create_directory_symlink(outside, dir_ / "cubins");
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s, "symlink")) << s.message();
}

TEST_F(ArtifactVerifyTest, DirectoryInPlaceOfAFile) {
  fs::remove(dir_ / "weights.bin");
  fs::create_directory(dir_ / "weights.bin");
  EXPECT_EQ(verify().code(), StatusCode::kDataLoss);
}

TEST_F(ArtifactVerifyTest, UnsafeManifestPathsAreRejected) {
  for (const char* bad : {"../x", "/abs", "a//b", "a/./b", "a\\b", "", "a/.."}) {
    edit_manifest([&](schema::Manifest& m) { m.mutable_files(1)->set_path(bad); });
    Status s = verify();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << bad;
    EXPECT_TRUE(contains(s, "unsafe file path '" + std::string(bad) + "'")) << s.message();
  }
}

// The block digests must describe the file too: one changed is caught by verify (naming the
// block), a list of the wrong length or block size is refused before any file is read.
TEST_F(ArtifactVerifyTest, BlockDigestsAreChecked) {
  ASSERT_TRUE(verify().ok());
  edit_manifest([](schema::Manifest& m) { m.mutable_files(0)->set_block_xxh3(0, 1); });
  Status s = verify();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s, "weights.bin: block 0 (bytes from 0)")) << s.message();

  edit_manifest([](schema::Manifest& m) { m.mutable_files(0)->add_block_xxh3(2); });
  s = verify();
  EXPECT_TRUE(contains(s,
                       "file 'weights.bin': block_xxh3 has 2 digests, but 256 bytes in blocks "
                       "of 4194304 need 1"))
      << s.message();
  edit_manifest([](schema::Manifest& m) { m.mutable_files(0)->set_block_bytes(3000); });
  s = verify();
  EXPECT_TRUE(contains(s, "block_bytes 3000 is not a power of two")) << s.message();
}

TEST_F(ArtifactVerifyTest, DuplicateEntry) {
  edit_manifest([](schema::Manifest& m) { *m.add_files() = m.files(0); });
  Status s = verify();
  EXPECT_TRUE(contains(s, "'weights.bin' is listed more than once")) << s.message();
}

TEST_F(ArtifactVerifyTest, ManifestListingItself) {
  edit_manifest([](schema::Manifest& m) { m.mutable_files(0)->set_path("manifest.kiln"); });
  EXPECT_FALSE(verify().ok());
}

TEST_F(ArtifactVerifyTest, WeightsFileMustBeListed) {
  edit_manifest([](schema::Manifest& m) { m.set_weights_file("other.bin"); });
  Status s = verify();
  EXPECT_TRUE(contains(s, "weights_file 'other.bin' is not listed")) << s.message();
}

TEST_F(ArtifactVerifyTest, CubinMustBeListed) {
  edit_manifest(
      [](schema::Manifest& m) { m.mutable_modules(0)->mutable_cubins(0)->set_path("x.cubin"); });
  Status s = verify();
  EXPECT_TRUE(contains(s, "cubin 'x.cubin' (sm_90) is not listed")) << s.message();
}

TEST_F(ArtifactVerifyTest, WrongRecordedHash) {
  edit_manifest([](schema::Manifest& m) { m.mutable_files(0)->set_xxh3(1); });
  Status s = verify();
  EXPECT_TRUE(contains(s, "does not match the manifest's 0x0000000000000001")) << s.message();
}

}  // namespace
}  // namespace kiln::cache
