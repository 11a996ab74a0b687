#include "cache/cache_index.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/manifest_io.h"
#include "tests/cache/sample_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::sample_publish;
using testing::TempDir;
using testing::write_bytes;

const std::string kA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fs::path index_path(const fs::path& root) { return cache_version_dir(root) / kIndexFileName; }

TEST(CacheIndex, PublishAddsEntriesSideBySide) {
  TempDir tmp;
  ASSERT_TRUE(sample_publish(tmp.path(), kB, "modelb").ok());
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "modela").ok());
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  ASSERT_EQ(index->size(), 2u);
  EXPECT_EQ((*index)[0].key, kA);  // sorted by key
  EXPECT_EQ((*index)[0].model, "modela");
  EXPECT_EQ((*index)[1].key, kB);
  EXPECT_EQ((*index)[0].targets, (std::vector<std::string>{"sm_80", "sm_90"}));
  const uintmax_t manifest = fs::file_size(artifact_dir(tmp.path(), kA) / kManifestFileName);
  EXPECT_GT((*index)[0].bytes, manifest + 64 * 1024);
  EXPECT_EQ((*index)[0].created.size(), 20u) << (*index)[0].created;  // 2026-11-22T05:32:03Z
  // No absolute paths: the index stays valid when the cache is copied elsewhere.
  EXPECT_EQ(testing::read_bytes(index_path(tmp.path())).find(tmp.path().string()),
            std::string::npos);
  for (const auto& e : fs::directory_iterator(cache_version_dir(tmp.path())))
    EXPECT_NE(e.path().filename().string().rfind(".index.json.tmp", 0), 0u) << e.path();
}

TEST(CacheIndex, RepublishingAnExistingKeyKeepsOneEntry) {
  TempDir tmp;
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "first").ok());
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "second").ok());  // the first one is kept
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(index->size(), 1u);
  EXPECT_EQ((*index)[0].model, "first");
}

TEST(CacheIndex, MissingIndexIsNotFoundAndRebuiltOnPublish) {
  TempDir tmp;
  EXPECT_EQ(cache_index_read(tmp.path()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "a").ok());
  fs::remove(index_path(tmp.path()));
  ASSERT_TRUE(sample_publish(tmp.path(), kB, "b").ok());
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(index->size(), 2u);  // kA came back from the scan
  EXPECT_EQ((*index)[0].key, kA);
  EXPECT_TRUE((*index)[0].created.empty());  // unknown after a rebuild
}

TEST(CacheIndex, CorruptIndexNamesTheFileAndIsRebuiltOnPublish) {
  TempDir tmp;
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "a").ok());
  for (const char* bad : {"{not json", "[]", R"({"format_version": 1, "entries": [{"key": 3}]})",
                          R"({"format_version": 99, "entries": []})"}) {
    write_bytes(index_path(tmp.path()), bad);
    Result<std::vector<IndexEntry>> r = cache_index_read(tmp.path());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(r.status().message().find(index_path(tmp.path()).string()), std::string::npos)
        << r.status().message();
  }
  ASSERT_TRUE(sample_publish(tmp.path(), kB, "b").ok());
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->size(), 2u);
}

TEST(CacheIndex, FifoIndexIsAnErrorWithoutBlockingAndIsRebuiltOnPublish) {
  TempDir tmp;
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "a").ok());
  fs::remove(index_path(tmp.path()));
  ASSERT_EQ(::mkfifo(index_path(tmp.path()).c_str(), 0600), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(10);  // a read that blocks on the FIFO fails the test instead of hanging it
    const Result<std::vector<IndexEntry>> r = cache_index_read(tmp.path());
    ::_exit(!r.ok() && r.status().code() == StatusCode::kIoError ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "cache_index_read blocked (wait status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(sample_publish(tmp.path(), kB, "b").ok());
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->size(), 2u);
}

TEST(CacheIndex, FromScanSkipsUnreadableManifests) {
  TempDir tmp;
  ASSERT_TRUE(sample_publish(tmp.path(), kA, "a").ok());
  ASSERT_TRUE(sample_publish(tmp.path(), kB, "b").ok());
  write_bytes(artifact_dir(tmp.path(), kB) / kManifestFileName, "garbage");
  std::vector<IndexEntry> entries = cache_index_from_scan(tmp.path());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key, kA);
}

}  // namespace
}  // namespace kiln::cache
