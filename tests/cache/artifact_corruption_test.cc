// A real artifact (weights, a cubin per module and arch, the sources, the manifest) damaged every
// way the issue names: truncated at every offset and random bit flips, in one file of each kind
// (the manifest, the weights, the first module's first cubin and its source), unsafe paths in
// the manifest, a format version too new or too old. Verify and the load plan must refuse each
// with the file named; the compiler must treat the damage as a miss and rebuild.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <random>

#include "cache/manifest_io.h"
#include "tests/cache/example_compile.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::example_request;
using testing::load_plan;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto out = compiler::compile_model(example_request(tmp_.path(), {"sm_80", "sm_90"}));
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    dir_ = out->artifact_dir;
    Result<schema::Manifest> m = artifact_verify(dir_);
    ASSERT_TRUE(m.ok());
    files_.push_back(std::string(kManifestFileName));
    modules_ = m->modules_size();
    for (const auto& f : m->files()) {
      ++files_per_role_[f.role()];
      if (roles_.insert(f.role()).second) files_.push_back(f.path());  // the first of its kind
    }
  }

  // Verify must fail and name `file`; so must the load plan (checked when `with_load_plan`).
  void expect_refused(const std::string& file, const std::string& what,
                      bool with_load_plan = true) {
    Result<schema::Manifest> v = artifact_verify(dir_);
    ASSERT_FALSE(v.ok()) << file << ": " << what;
    ASSERT_NE(v.status().message().find((dir_ / file).string()), std::string::npos)
        << what << ": " << v.status().message();
    if (with_load_plan) {
      ASSERT_FALSE(load_plan(dir_).ok()) << file << ": " << what;
    }
  }

  TempDir tmp_;
  fs::path dir_;
  std::vector<std::string> files_;  // the manifest and one file of each kind
  std::set<int> roles_;
  std::map<int, int> files_per_role_;
  int modules_ = 0;
};

TEST_F(CorruptionTest, EveryFileKindIsPresent) {
  EXPECT_EQ(roles_, (std::set<int>{schema::FILE_ROLE_WEIGHTS, schema::FILE_ROLE_CUBIN,
                                   schema::FILE_ROLE_SOURCE}));
  EXPECT_EQ(files_.size(), 4u);  // manifest, weights, a cubin, a source
  EXPECT_GE(modules_, 2);        // a module per kernel
  EXPECT_EQ(files_per_role_[schema::FILE_ROLE_CUBIN], 2 * modules_);  // sm_80 and sm_90 each
  EXPECT_EQ(files_per_role_[schema::FILE_ROLE_SOURCE], modules_);
}

TEST_F(CorruptionTest, TruncationAtEveryOffsetOfEveryFileIsDetected) {
  for (const std::string& file : files_) {
    const fs::path p = dir_ / file;
    const std::string orig = read_bytes(p);
    ASSERT_FALSE(orig.empty()) << file;
    // Shrink one byte at a time down to empty: every length below the real one.
    for (std::size_t len = orig.size(); len-- > 0;) {
      ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(len)), 0);
      expect_refused(file, "truncated to " + std::to_string(len) + " bytes", len % 61 == 0);
      if (::testing::Test::HasFatalFailure()) return;
    }
    write_bytes(p, orig);
    ASSERT_TRUE(load_plan(dir_).ok()) << file;
  }
}

TEST_F(CorruptionTest, RandomBitFlipsInEveryFileAreDetected) {
  std::mt19937_64 rng(20261122);
  for (const std::string& file : files_) {
    const fs::path p = dir_ / file;
    const std::string orig = read_bytes(p);
    std::uniform_int_distribution<std::size_t> bit(0, orig.size() * 8 - 1);
    for (int i = 0; i < 200; ++i) {
      const std::size_t b = bit(rng);
      std::string bad = orig;
      bad[b / 8] = static_cast<char>(bad[b / 8] ^ (1 << (b % 8)));
      write_bytes(p, bad);
      expect_refused(file, "bit " + std::to_string(b) + " flipped");
      if (::testing::Test::HasFatalFailure()) return;
    }
    write_bytes(p, orig);
  }
  EXPECT_TRUE(load_plan(dir_).ok());
}

// The same flips in the manifest's payload, but behind a header whose checksum matches them
// (cache::manifest_frame, as someone re-encoding a manifest would write it): the damage now gets
// past the checksum to the protobuf parser and the validator. Each flip must end in a clean
// refusal that names the artifact (its path or key) or the manifest field (never a crash: the
// sanitizer build runs this too) or in a manifest that still validates (a flipped bit in a name or
// a diagnostic string). Both the parser and the validator must be seen refusing, and most flips
// must be refused.
TEST_F(CorruptionTest, BitFlipsBehindAValidChecksumReachTheParserAndValidator) {
  const fs::path p = dir_ / kManifestFileName;
  const std::string orig = read_bytes(p);
  const std::string payload = orig.substr(kManifestHeaderBytes);
  std::mt19937_64 rng(20261127);
  std::uniform_int_distribution<std::size_t> bit(0, payload.size() * 8 - 1);
  int refused = 0, by_parser = 0, by_validator = 0;
  constexpr int kFlips = 400;
  for (int i = 0; i < kFlips; ++i) {
    const std::size_t b = bit(rng);
    std::string bad = payload;
    bad[b / 8] = static_cast<char>(bad[b / 8] ^ (1 << (b % 8)));
    write_bytes(p, manifest_frame(bad));
    Result<schema::Manifest> r = load_plan(dir_);
    if (r.ok()) continue;
    ++refused;
    const std::string& msg = r.status().message();
    EXPECT_EQ(msg.find("checksum"), std::string::npos) << "bit " << b << ": " << msg;
    if (msg.find("not a valid kiln.schema.Manifest") != std::string::npos) ++by_parser;
    if (msg.starts_with("manifest: ")) ++by_validator;
    if (!msg.starts_with("manifest: ")) {
      EXPECT_NE(msg.find(dir_.filename().string()), std::string::npos)
          << "bit " << b << ": " << msg;
    }
  }
  write_bytes(p, orig);
  EXPECT_TRUE(load_plan(dir_).ok());
  EXPECT_GT(by_parser, 0);
  EXPECT_GT(by_validator, 0);
  EXPECT_GT(refused, kFlips / 2) << "parser " << by_parser << ", validator " << by_validator;
}

// Rewrites the manifest after `edit`, with a valid header and checksum.
template <typename F>
void edit_manifest(const fs::path& dir, F edit) {
  Result<schema::Manifest> m = manifest_read(dir / kManifestFileName);
  ASSERT_TRUE(m.ok());
  edit(*m);
  write_bytes(dir / kManifestFileName, manifest_encode(*m));
}

TEST_F(CorruptionTest, ManifestPathsThatEscapeAreRejected) {
  const std::string orig = read_bytes(dir_ / kManifestFileName);
  for (const char* bad : {"../weights.bin", "../../etc/passwd", "/etc/passwd", "kernels/../../x",
                          "./weights.bin", "kernels//module0.sm_90.cubin"}) {
    edit_manifest(dir_, [&](schema::Manifest& m) { m.mutable_files(0)->set_path(bad); });
    Result<schema::Manifest> v = artifact_verify(dir_);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(v.status().message().find("unsafe file path '" + std::string(bad) + "'"),
              std::string::npos)
        << v.status().message();
    EXPECT_FALSE(load_plan(dir_).ok()) << bad;
  }
  // A weights_file or cubin path outside the listed files is refused as well.
  write_bytes(dir_ / kManifestFileName, orig);
  edit_manifest(dir_, [](schema::Manifest& m) { m.set_weights_file("../weights.bin"); });
  EXPECT_FALSE(load_plan(dir_).ok());
  write_bytes(dir_ / kManifestFileName, orig);
  edit_manifest(dir_, [](schema::Manifest& m) {
    m.mutable_modules(0)->mutable_cubins(0)->set_path("../../x.cubin");
  });
  EXPECT_FALSE(load_plan(dir_).ok());
}

// Rewrites the header's format version (the payload keeps its own).
void set_header_version(const fs::path& manifest, uint32_t v) {
  std::string b = read_bytes(manifest);
  for (int i = 0; i < 4; ++i) b[8 + i] = static_cast<char>((v >> (8 * i)) & 0xff);
  write_bytes(manifest, b);
}

TEST_F(CorruptionTest, FormatVersionTooNewOrTooOldIsRefusedAndRebuilt) {
  const fs::path mpath = dir_ / kManifestFileName;
  for (const auto& [version, words] : std::vector<std::pair<uint32_t, std::string>>{
           {kFormatVersion + 1, "newer kiln (format " + std::to_string(kFormatVersion + 1) + ")"},
           {kFormatVersion - 1,
            "older kiln (format " + std::to_string(kFormatVersion - 1) + ")"}}) {
    set_header_version(mpath, version);
    Result<schema::Manifest> plan = load_plan(dir_);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(plan.status().message().find(words), std::string::npos) << plan.status().message();
    EXPECT_NE(plan.status().message().find(mpath.string()), std::string::npos);
    // The compiler does not reuse it: a miss, rebuilt in place.
    auto again = compiler::compile_model(example_request(tmp_.path(), {"sm_80", "sm_90"}));
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_FALSE(again->cache_hit);
    EXPECT_EQ(again->artifact_dir, dir_);
    EXPECT_TRUE(load_plan(dir_).ok());
  }
}

TEST_F(CorruptionTest, CorruptCubinIsAMissForTheCompiler) {
  const fs::path cubin = dir_ / "kernels/module0.sm_90.cubin";
  std::string b = read_bytes(cubin);
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10);
  write_bytes(cubin, b);
  auto again = compiler::compile_model(example_request(tmp_.path(), {"sm_80", "sm_90"}));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(again->cache_hit);
  EXPECT_TRUE(load_plan(dir_).ok());
}

}  // namespace
}  // namespace kiln::cache
