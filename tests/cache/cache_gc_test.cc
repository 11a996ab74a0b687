#include "cache/cache_gc.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "cache/artifact_verify.h"
#include "cache/cache_index.h"
#include "cache/cache_scan.h"
#include "cache/manifest_io.h"
#include "tests/cache/sample_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::leftovers;
using testing::sample_publish;
using testing::TempDir;
using testing::write_bytes;

const std::string kGood = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const std::string kBad = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

// A stage whose process died: created in a child that is then SIGKILLed.
fs::path dead_stage(const fs::path& root) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    auto s = ArtifactStage::begin(root, kGood);
    if (!s.ok()) ::_exit(1);
    const std::string name = (*s)->staging_dir().filename().string();
    if (::write(fds[1], name.data(), name.size()) < 0) ::_exit(1);
    ::close(fds[1]);
    ::raise(SIGKILL);
  }
  ::close(fds[1]);
  char buf[256];
  const ssize_t n = ::read(fds[0], buf, sizeof(buf));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_GT(n, 0);
  return cache_version_dir(root) / std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

class CacheGcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sample_publish(root(), kGood, "good").ok());
    ASSERT_TRUE(sample_publish(root(), kBad, "bad").ok());
    write_bytes(artifact_dir(root(), kBad) / "kernels/module0.sm_90.cubin", "flipped");
  }
  fs::path root() const { return tmp_.path(); }
  fs::path vdir() const { return cache_version_dir(root()); }
  TempDir tmp_;
};

TEST_F(CacheGcTest, RemovesCorruptEntriesAndDeadLeftoversKeepsLiveOnes) {
  const fs::path dead = dead_stage(root());
  ASSERT_TRUE(fs::is_directory(dead)) << dead;
  auto live = ArtifactStage::begin(root(), kGood);  // a compile still running in this process
  ASSERT_TRUE(live.ok());
  fs::create_directories(vdir() / ".trash-x-1");
  write_bytes(vdir() / ".index.json.tmp-1", "{");
  fs::create_directories(vdir() / "no-manifest");  // e.g. a half-done copy by hand

  Result<CacheScan> scan = cache_scan(root(), ScanDepth::kVerify);
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->leftovers.size(), 4u);
  int live_stages = 0;
  for (const Leftover& l : scan->leftovers) live_stages += l.live;
  EXPECT_EQ(live_stages, 1);

  Result<GcReport> dry = cache_gc(root(), true);
  ASSERT_TRUE(dry.ok()) << dry.status().to_string();
  // dead stage, trash, index temp, corrupt entry, no-manifest, and kBad's index entry
  EXPECT_EQ(dry->removed.size(), 6u);
  EXPECT_TRUE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(artifact_dir(root(), kBad)));

  Result<GcReport> gc = cache_gc(root(), false);
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(gc->intact, 1);
  EXPECT_EQ(gc->removed.size(), 6u);
  ASSERT_EQ(gc->kept.size(), 1u);
  EXPECT_EQ(gc->kept[0].name, "kiln-v2/" + (*live)->staging_dir().filename().string());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(artifact_dir(root(), kBad)));
  EXPECT_FALSE(fs::exists(vdir() / "no-manifest"));
  EXPECT_TRUE(fs::is_directory((*live)->staging_dir()));
  EXPECT_TRUE(artifact_verify(artifact_dir(root(), kGood)).ok());
  ASSERT_EQ(leftovers(root()).size(), 1u);  // the live stage

  Result<std::vector<IndexEntry>> index = cache_index_read(root());
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(index->size(), 1u);
  EXPECT_EQ((*index)[0].key, kGood);
  EXPECT_FALSE((*index)[0].created.empty());  // kept from the old index
}

TEST_F(CacheGcTest, IndexEntriesWithoutADirectoryGoAndMissingOnesAreAdded) {
  fs::remove_all(artifact_dir(root(), kBad));
  fs::remove(vdir() / kIndexFileName);
  ASSERT_TRUE(cache_index_upsert(root(), {kBad, "gone", {}, 1, ""}, false).ok());
  Result<GcReport> gc = cache_gc(root(), false);
  ASSERT_TRUE(gc.ok());
  ASSERT_EQ(gc->removed.size(), 1u);
  EXPECT_EQ(gc->removed[0].name, "index: " + kBad);
  Result<std::vector<IndexEntry>> index = cache_index_read(root());
  ASSERT_TRUE(index.ok());
  ASSERT_EQ(index->size(), 1u);
  EXPECT_EQ((*index)[0].key, kGood);
}

TEST_F(CacheGcTest, EntryBeingRepublishedIsSkipped) {
  Result<UniqueFd> key_lock =
      lock_file(vdir() / (".lock-" + kBad), LockMode::kExclusive, "test");  // a publisher
  ASSERT_TRUE(key_lock.ok());
  Result<GcReport> gc = cache_gc(root(), false);
  ASSERT_TRUE(gc.ok());
  ASSERT_EQ(gc->kept.size(), 1u);
  EXPECT_EQ(gc->kept[0].name, "kiln-v2/" + kBad);
  EXPECT_TRUE(fs::exists(artifact_dir(root(), kBad)));
}

TEST_F(CacheGcTest, MovedEntryIsCorrupt) {
  fs::rename(artifact_dir(root(), kBad), artifact_dir(root(), "cccccccccccccccccccccccccccccccc"));
  fs::rename(artifact_dir(root(), kGood), artifact_dir(root(), kBad));
  Result<CacheScan> scan = cache_scan(root(), ScanDepth::kManifest);
  ASSERT_TRUE(scan.ok());
  ASSERT_EQ(scan->entries.size(), 2u);
  EXPECT_NE(scan->entries[0].status.message().find("differs from the manifest's key"),
            std::string::npos)
      << scan->entries[0].status.message();
}

// gc in a forked child, so a gc that blocks (on a FIFO manifest) fails the test instead of
// hanging it: the child is killed by alarm() after 10 s. Returns the child's wait status.
int gc_in_child(const fs::path& root) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(10);
    ::_exit(cache_gc(root, false).ok() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Tests run as root, so chmod cannot make a manifest unreadable; a directory (EISDIR) or a FIFO
// where the manifest should be makes the read fail without the entry being corrupt.
TEST_F(CacheGcTest, KeepsEntriesWhoseManifestCannotBeReadRemovesCorruptOnes) {
  const std::string dir_key = "dddddddddddddddddddddddddddddddd";
  const std::string fifo_key = "ffffffffffffffffffffffffffffffff";
  ASSERT_TRUE(sample_publish(root(), dir_key, "d").ok());
  ASSERT_TRUE(sample_publish(root(), fifo_key, "f").ok());
  const fs::path dir_manifest = artifact_dir(root(), dir_key) / kManifestFileName;
  const fs::path fifo_manifest = artifact_dir(root(), fifo_key) / kManifestFileName;
  fs::remove(dir_manifest);
  fs::create_directory(dir_manifest);
  fs::remove(fifo_manifest);
  ASSERT_EQ(::mkfifo(fifo_manifest.c_str(), 0600), 0);

  const int status = gc_in_child(root());  // must not block on the FIFO
  ASSERT_TRUE(WIFEXITED(status)) << "gc blocked or crashed (wait status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);

  Result<GcReport> gc = cache_gc(root(), false);
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_EQ(gc->intact, 1);
  ASSERT_EQ(gc->kept.size(), 2u);
  EXPECT_EQ(gc->kept[0].name, "kiln-v2/" + dir_key);
  EXPECT_EQ(gc->kept[0].reason.rfind("cannot read: " + dir_manifest.string(), 0), 0u)
      << gc->kept[0].reason;
  EXPECT_NE(gc->kept[0].reason.find("a directory"), std::string::npos) << gc->kept[0].reason;
  EXPECT_EQ(gc->kept[1].name, "kiln-v2/" + fifo_key);
  EXPECT_NE(gc->kept[1].reason.find("a FIFO"), std::string::npos) << gc->kept[1].reason;
  EXPECT_TRUE(fs::is_directory(dir_manifest));
  EXPECT_TRUE(fs::exists(fifo_manifest));
  EXPECT_TRUE(fs::exists(artifact_dir(root(), dir_key) / "weights.bin"));
  // The truly corrupt entry went (in the child's run), the intact one stayed.
  EXPECT_FALSE(fs::exists(artifact_dir(root(), kBad)));
  EXPECT_TRUE(artifact_verify(artifact_dir(root(), kGood)).ok());
  // The unreadable entries keep their index lines.
  Result<std::vector<IndexEntry>> index = cache_index_read(root());
  ASSERT_TRUE(index.ok());
  std::set<std::string> keys;
  for (const IndexEntry& x : *index) keys.insert(x.key);
  EXPECT_EQ(keys, (std::set<std::string>{kGood, dir_key, fifo_key}));
}

// Running out of file descriptors (EMFILE) at any step never costs an intact entry: gc runs in
// a child whose RLIMIT_NOFILE leaves it 0, 1, 2, ... free descriptors, so each open in turn fails.
TEST_F(CacheGcTest, EmfileAtAnyStepKeepsIntactEntries) {
  int kept_unreadable_runs = 0;
  for (int spare = 0; spare <= 24; ++spare) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ::alarm(10);
      int open_fds = 0;
      for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++open_fds;
      const rlim_t n = static_cast<rlim_t>(open_fds + spare);
      const rlimit lim{n, n};
      if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) ::_exit(2);
      Result<GcReport> gc = cache_gc(root(), false);
      char unreadable = 0;
      if (gc.ok())
        for (const GcItem& k : gc->kept) unreadable |= k.reason.rfind("cannot read:", 0) == 0;
      if (::write(fds[1], &unreadable, 1) != 1) ::_exit(3);
      ::_exit(0);
    }
    ::close(fds[1]);
    char unreadable = 0;
    const ssize_t got = ::read(fds[0], &unreadable, 1);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && got == 1)
        << "spare " << spare << ": wait status " << status;
    kept_unreadable_runs += unreadable;
    Result<schema::Manifest> good = artifact_verify(artifact_dir(root(), kGood));
    ASSERT_TRUE(good.ok()) << "with " << spare << " spare descriptors gc lost the intact entry: "
                           << good.status().to_string();
  }
  // Some limit made a read fail partway and that entry was kept as unreadable, not removed.
  EXPECT_GT(kept_unreadable_runs, 0);
}

TEST(CacheGcClassify, IoErrorsAreUnreadableEverythingElseIsCorrupt) {
  EXPECT_TRUE(gc_cannot_read(io_error("m: cannot open: Permission denied")));
  EXPECT_FALSE(gc_cannot_read(data_loss("m: bad magic")));
  EXPECT_FALSE(gc_cannot_read(not_found("m: no such file")));
  EXPECT_FALSE(gc_cannot_read(Status::ok_status()));
}

TEST_F(CacheGcTest, EmptyOrMissingCacheIsFine) {
  TempDir other;
  Result<GcReport> gc = cache_gc(other.path() / "missing", false);
  ASSERT_TRUE(gc.ok());
  EXPECT_TRUE(gc->removed.empty());
}

TEST(CacheScan, EntriesOfArtifactRootAndVersionDir) {
  TempDir tmp;
  const fs::path a = sample_publish(tmp.path(), kGood, "a").value();
  ASSERT_TRUE(sample_publish(tmp.path(), kBad, "b").ok());
  for (const fs::path& dir : {tmp.path(), cache_version_dir(tmp.path()),
                              fs::path(cache_version_dir(tmp.path()).string() + "/")}) {
    Result<std::vector<ScannedEntry>> e = cache_entries(dir, ScanDepth::kVerify);
    ASSERT_TRUE(e.ok()) << dir;
    EXPECT_EQ(e->size(), 2u) << dir;
  }
  Result<std::vector<ScannedEntry>> one = cache_entries(a, ScanDepth::kVerify);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_TRUE((*one)[0].status.ok());
  // Another format version only: the message says so.
  TempDir other;
  fs::create_directories(other.path() / "kiln-v1" / "x");
  Result<std::vector<ScannedEntry>> none = cache_entries(other.path(), ScanDepth::kVerify);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("kiln-v1"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace kiln::cache
