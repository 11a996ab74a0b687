#include "cache/cache_layout.h"

#include <gtest/gtest.h>

#include <string>

#include "cache/manifest_io.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_bytes;

// An artifact directory for listing purposes: only the manifest's presence matters here.
fs::path make_artifact(const fs::path& root, const std::string& key) {
  const fs::path d = artifact_dir(root, key);
  fs::create_directories(d);
  write_bytes(d / kManifestFileName, "x");
  return d;
}

TEST(CacheLayout, Paths) {
  EXPECT_EQ(cache_version_dir("/c"), fs::path("/c/kiln-v2"));
  EXPECT_EQ(artifact_dir("/c", "abc"), fs::path("/c/kiln-v2/abc"));
  EXPECT_EQ(artifact_dir("rel", "abc"), fs::path("rel/kiln-v2/abc"));
}

TEST(CacheLayout, SafePaths) {
  for (const char* ok : {"weights.bin", "a/b", "cubins/m0.sm_90.cubin", "a/b/c.d", "..a", "a..",
                         ".hidden", "a/...", "x y"}) {
    EXPECT_TRUE(artifact_path_safe(ok)) << ok;
  }
}

TEST(CacheLayout, UnsafePaths) {
  using namespace std::string_literals;
  for (const std::string& bad : {"../x"s, "/abs"s, "a//b"s, "a/./b"s, "a\\b"s, ""s, "a/.."s, ".."s,
                                 "."s, "./a"s, "a/"s, "/"s, "a/../b"s, "a\0b"s, "..\\x"s, "//x"s}) {
    EXPECT_FALSE(artifact_path_safe(bad)) << bad;
  }
}

TEST(CacheLayout, ListSkipsHiddenIncompleteAndFiles) {
  TempDir tmp;
  make_artifact(tmp.path(), "bbb");
  make_artifact(tmp.path(), "aaa");
  make_artifact(tmp.path(), "ccc");
  const fs::path v = cache_version_dir(tmp.path());
  // Leftovers of a crashed publish and a lock file.
  fs::create_directories(v / ".staging-x");
  write_bytes(v / ".staging-x" / kManifestFileName, "x");
  fs::create_directories(v / ".trash-ddd-1234");
  write_bytes(v / ".trash-ddd-1234" / kManifestFileName, "x");
  write_bytes(v / ".lock-aaa", "");
  fs::create_directories(v / "no-manifest");  // not an artifact
  write_bytes(v / "stray-file", "x");
  // Another format version's directory is not listed.
  fs::create_directories(tmp.path() / "kiln-v1" / "eee");
  write_bytes(tmp.path() / "kiln-v1" / "eee" / kManifestFileName, "x");

  Result<std::vector<fs::path>> l = cache_list(tmp.path());
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  ASSERT_EQ(l->size(), 3u);
  EXPECT_EQ((*l)[0], v / "aaa");
  EXPECT_EQ((*l)[1], v / "bbb");
  EXPECT_EQ((*l)[2], v / "ccc");
}

TEST(CacheLayout, ListOfEmptyOrMissingRootIsEmpty) {
  TempDir tmp;
  Result<std::vector<fs::path>> l = cache_list(tmp.path());
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->empty());
  Result<std::vector<fs::path>> m = cache_list(tmp.path() / "missing");
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->empty());
}

TEST(CacheLayout, ResolveArtifactDirItself) {
  TempDir tmp;
  const fs::path a = make_artifact(tmp.path(), "k1");
  make_artifact(tmp.path(), "k2");
  Result<fs::path> r = artifact_resolve(a);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, a);
}

TEST(CacheLayout, ResolveRootWithOneArtifact) {
  TempDir tmp;
  const fs::path a = make_artifact(tmp.path(), "k1");
  fs::create_directories(cache_version_dir(tmp.path()) / ".staging-k2-0");
  write_bytes(cache_version_dir(tmp.path()) / ".staging-k2-0" / kManifestFileName, "x");
  Result<fs::path> r = artifact_resolve(tmp.path());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, a);
}

TEST(CacheLayout, ResolveRootWithNoArtifact) {
  TempDir tmp;
  Result<fs::path> r = artifact_resolve(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string d = tmp.path().string();
  EXPECT_EQ(r.status().message(), "no kiln artifact in " + d + ": expected " + d +
                                      "/manifest.kiln or " + d + "/kiln-v2/<key>/manifest.kiln");
}

TEST(CacheLayout, ResolveRootWithTwoArtifacts) {
  TempDir tmp;
  make_artifact(tmp.path(), "k1");
  make_artifact(tmp.path(), "k2");
  Result<fs::path> r = artifact_resolve(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("k1, k2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pass one artifact directory"), std::string::npos) << msg;
}

TEST(CacheLayout, ResolveMissingDir) {
  TempDir tmp;
  Result<fs::path> r = artifact_resolve(tmp.path() / "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find((tmp.path() / "nope").string()), std::string::npos);
}

}  // namespace
}  // namespace kiln::cache
