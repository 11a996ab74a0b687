#include "cache/artifact_publish.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "cache/file_blocks.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

const std::string kKey = "0123456789abcdef0123456789abcdef";

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

schema::Manifest manifest_for(const std::string& model_name) {
  schema::Manifest m;
  m.set_model_name(model_name);
  m.set_weights_file("weights.bin");
  auto* cubin = m.add_modules()->add_cubins();
  cubin->set_arch("sm_90");
  cubin->set_path("cubins/m0.sm_90.cubin");
  return m;
}

// Stages weights.bin and one cubin whose contents depend on `tag`.
Status stage_files(ArtifactStage& s, const std::string& tag) {
  KILN_RETURN_IF_ERROR(
      s.add_file("weights.bin", bytes_of(std::string(4096, 'w') + tag), schema::FILE_ROLE_WEIGHTS));
  return s.add_file("cubins/m0.sm_90.cubin", bytes_of("cubin-" + tag), schema::FILE_ROLE_CUBIN);
}

// Names in the version directory other than published artifacts and lock files.
std::vector<std::string> leftovers(const fs::path& root) {
  std::vector<std::string> out;
  const fs::path v = cache_version_dir(root);
  if (!fs::exists(v)) return out;
  for (const auto& e : fs::directory_iterator(v)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".staging-", 0) == 0 || n.rfind(".trash-", 0) == 0) out.push_back(n);
  }
  return out;
}

TEST(ArtifactPublish, BeginCreatesHiddenStage) {
  TempDir tmp;
  const fs::path root = tmp.path() / "new" / "cache";  // created on demand
  auto s = ArtifactStage::begin(root, kKey);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const fs::path stage = (*s)->staging_dir();
  EXPECT_TRUE(fs::is_directory(stage));
  EXPECT_EQ(stage.parent_path(), cache_version_dir(root));
  EXPECT_EQ(stage.filename().string().rfind(".staging-" + kKey + "-", 0), 0u) << stage;
  auto s2 = ArtifactStage::begin(root, kKey);
  ASSERT_TRUE(s2.ok());
  EXPECT_NE((*s2)->staging_dir(), stage);
}

TEST(ArtifactPublish, UnwritableRootNamesThePath) {
  TempDir tmp;
  const fs::path file = tmp.path() / "file";
  write_bytes(file, "x");
  for (const fs::path& root : {file, file / "sub"}) {
    auto s = ArtifactStage::begin(root, kKey);
    ASSERT_FALSE(s.ok()) << root;
    EXPECT_NE(s.status().message().find(root.string()), std::string::npos) << s.status().message();
  }
}

TEST(ArtifactPublish, RejectsBadKeys) {
  TempDir tmp;
  for (const char* key : {"", "a/b", "..", ".hidden", "../x", "a\\b"}) {
    auto s = ArtifactStage::begin(tmp.path(), key);
    EXPECT_FALSE(s.ok()) << key;
  }
}

TEST(ArtifactPublish, AddFileRejectsUnsafeReservedAndDuplicatePaths) {
  TempDir tmp;
  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ArtifactStage& st = **s;
  for (const char* bad : {"../x", "/abs", "a//b", "a/./b", "a\\b", "", "a/.."}) {
    Status r = st.add_file(bad, bytes_of("x"), schema::FILE_ROLE_SOURCE);
    EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "x"));
  EXPECT_FALSE(st.add_file("manifest.kiln", bytes_of("x"), schema::FILE_ROLE_SOURCE).ok());
  ASSERT_TRUE(st.add_file("a.txt", bytes_of("x"), schema::FILE_ROLE_SOURCE).ok());
  Status dup = st.add_file("a.txt", bytes_of("y"), schema::FILE_ROLE_SOURCE);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("a.txt"), std::string::npos) << dup.message();
  EXPECT_EQ(read_bytes(st.staging_dir() / "a.txt"), "x");
}

TEST(ArtifactPublish, EndToEndThenVerify) {
  TempDir tmp;
  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(stage_files(**s, "A").ok());
  ASSERT_TRUE((*s)->add_file("empty.txt", {}, schema::FILE_ROLE_SOURCE).ok());
  schema::Manifest m = manifest_for("mlp");
  auto* bogus = m.add_files();  // replaced by publish
  bogus->set_path("bogus");
  Result<fs::path> dir = (*s)->publish(m);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  EXPECT_EQ(*dir, artifact_dir(tmp.path(), kKey));
  EXPECT_TRUE(leftovers(tmp.path()).empty());

  Result<schema::Manifest> v = artifact_verify(*dir);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->key(), kKey);
  EXPECT_EQ(v->format_version(), kFormatVersion);
  EXPECT_EQ(v->model_name(), "mlp");
  ASSERT_EQ(v->files_size(), 3);
  EXPECT_EQ(v->files(0).path(), "weights.bin");
  EXPECT_EQ(v->files(0).size(), 4097u);
  EXPECT_EQ(v->files(0).role(), schema::FILE_ROLE_WEIGHTS);
  const std::string w = read_bytes(*dir / "weights.bin");
  EXPECT_EQ(v->files(0).xxh3(), hash64(w.data(), w.size()));
  // The weights also carry their block digests (one 4 MiB block here); other files none.
  EXPECT_EQ(v->files(0).block_bytes(), kWeightsBlockBytes);
  ASSERT_EQ(v->files(0).block_xxh3_size(), 1);
  EXPECT_EQ(v->files(0).block_xxh3(0), hash64(w.data(), w.size()));
  EXPECT_EQ(v->files(1).block_bytes(), 0u);
  EXPECT_EQ(v->files(1).block_xxh3_size(), 0);
  EXPECT_EQ(v->files(1).path(), "cubins/m0.sm_90.cubin");
  EXPECT_EQ(v->files(1).role(), schema::FILE_ROLE_CUBIN);
  EXPECT_EQ(v->files(2).size(), 0u);

  Result<std::vector<fs::path>> l = cache_list(tmp.path());
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0], *dir);
  // Publishing twice, or adding files afterwards, is refused.
  EXPECT_FALSE((*s)->publish(m).ok());
  EXPECT_FALSE((*s)->add_file("late", bytes_of("x"), schema::FILE_ROLE_SOURCE).ok());
  s->reset();  // the destructor must not touch the published artifact
  EXPECT_TRUE(artifact_verify(*dir).ok());
}

TEST(ArtifactPublish, StageDestroyedWithoutPublishLeavesNothing) {
  TempDir tmp;
  {
    auto s = ArtifactStage::begin(tmp.path(), kKey);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(stage_files(**s, "A").ok());
  }
  EXPECT_TRUE(leftovers(tmp.path()).empty());  // only the (empty) lock file remains
  EXPECT_TRUE(cache_list(tmp.path()).value().empty());
}

TEST(ArtifactPublish, UnlistedReferencesAreRefusedBeforeRename) {
  TempDir tmp;
  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->add_file("weights.bin", bytes_of("w"), schema::FILE_ROLE_WEIGHTS).ok());
  Result<fs::path> r = (*s)->publish(manifest_for("mlp"));  // its cubin was never added
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cubins/m0.sm_90.cubin"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(artifact_dir(tmp.path(), kKey)));
}

TEST(ArtifactPublish, ExistingValidArtifactIsKept) {
  TempDir tmp;
  Result<fs::path> first = [&]() -> Result<fs::path> {
    KILN_ASSIGN_OR_RETURN(auto s, ArtifactStage::begin(tmp.path(), kKey));
    KILN_RETURN_IF_ERROR(stage_files(*s, "first"));
    return s->publish(manifest_for("first"));
  }();
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(stage_files(**s, "second").ok());
  Result<fs::path> second = (*s)->publish(manifest_for("second"));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(*second, *first);
  Result<schema::Manifest> v = artifact_verify(*second);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->model_name(), "first");
  EXPECT_TRUE(leftovers(tmp.path()).empty());
}

TEST(ArtifactPublish, ExistingCorruptArtifactIsReplaced) {
  TempDir tmp;
  const fs::path dir = artifact_dir(tmp.path(), kKey);
  {
    auto s = ArtifactStage::begin(tmp.path(), kKey);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(stage_files(**s, "old").ok());
    ASSERT_TRUE((*s)->publish(manifest_for("old")).ok());
  }
  write_bytes(dir / "weights.bin", "corrupted");
  ASSERT_FALSE(artifact_verify(dir).ok());

  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(stage_files(**s, "new").ok());
  Result<fs::path> r = (*s)->publish(manifest_for("new"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Result<schema::Manifest> v = artifact_verify(dir);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->model_name(), "new");
  EXPECT_TRUE(leftovers(tmp.path()).empty());
}

TEST(ArtifactPublish, DirectoryWithoutManifestIsReplaced) {
  TempDir tmp;  // e.g. a half-copied artifact
  const fs::path dir = artifact_dir(tmp.path(), kKey);
  fs::create_directories(dir);
  write_bytes(dir / "weights.bin", "partial");
  auto s = ArtifactStage::begin(tmp.path(), kKey);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(stage_files(**s, "new").ok());
  ASSERT_TRUE((*s)->publish(manifest_for("new")).ok());
  EXPECT_TRUE(artifact_verify(dir).ok());
}

// After concurrent publishers: one verified artifact, no staging or trash directories.
void expect_one_complete_artifact(const fs::path& root) {
  Result<std::vector<fs::path>> l = cache_list(root);
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0], artifact_dir(root, kKey));
  Result<schema::Manifest> v = artifact_verify((*l)[0]);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  // All files come from the same publisher.
  const std::string tag = v->model_name();
  EXPECT_EQ(read_bytes((*l)[0] / "cubins/m0.sm_90.cubin"), "cubin-" + tag);
  EXPECT_TRUE(leftovers(root).empty());
}

TEST(ArtifactPublish, ConcurrentThreadsEndWithOneArtifact) {
  for (int round = 0; round < 10; ++round) {
    TempDir tmp;
    constexpr int kThreads = 6;
    std::vector<Result<fs::path>> results(kThreads, internal_error("not run"));
    std::vector<std::unique_ptr<ArtifactStage>> stages;
    for (int i = 0; i < kThreads; ++i) {
      auto s = ArtifactStage::begin(tmp.path(), kKey);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE(stage_files(**s, "t" + std::to_string(i)).ok());
      stages.push_back(std::move(s).value());
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back(
          [&, i] { results[i] = stages[i]->publish(manifest_for("t" + std::to_string(i))); });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) {
      ASSERT_TRUE(results[i].ok()) << results[i].status().to_string();
      EXPECT_EQ(*results[i], artifact_dir(tmp.path(), kKey));
    }
    stages.clear();
    expect_one_complete_artifact(tmp.path());
  }
}

TEST(ArtifactPublish, ConcurrentProcessesEndWithOneArtifact) {
  for (int round = 0; round < 5; ++round) {
    TempDir tmp;
    constexpr int kProcs = 4;
    int gate[2];
    ASSERT_EQ(::pipe(gate), 0);
    std::vector<pid_t> pids;
    for (int i = 0; i < kProcs; ++i) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(gate[1]);
        const std::string tag = "p" + std::to_string(i);
        auto s = ArtifactStage::begin(tmp.path(), kKey);
        if (!s.ok() || !stage_files(**s, tag).ok()) ::_exit(2);
        char c;
        while (::read(gate[0], &c, 1) < 0) {  // wait until the parent opens the gate (EOF)
        }
        Result<fs::path> r = (*s)->publish(manifest_for(tag));
        s->reset();
        ::_exit(r.ok() && *r == artifact_dir(tmp.path(), kKey) ? 0 : 1);
      }
      pids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);  // all children start publishing now
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0);
    }
    expect_one_complete_artifact(tmp.path());
  }
}

// Disk full: a 64 KiB tmpfs in a private mount namespace of a child process. Needs the
// privilege to mount; skipped without it.
TEST(ArtifactPublish, DiskFullIsResourceExhausted) {
  TempDir tmp;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    if (::mount("tmpfs", tmp.path().c_str(), "tmpfs", 0, "size=64k") != 0) ::_exit(77);
    auto s = ArtifactStage::begin(tmp.path(), kKey);
    if (!s.ok()) ::_exit(3);
    const std::string big(1 << 20, 'x');
    Status st = (*s)->add_file("weights.bin", bytes_of(big), schema::FILE_ROLE_WEIGHTS);
    const bool ok = st.code() == StatusCode::kResourceExhausted &&
                    st.message().find("weights.bin") != std::string::npos;
    if (!ok) std::fprintf(stderr, "got: %s\n", st.to_string().c_str());
    const bool no_partial = !fs::exists((*s)->staging_dir() / "weights.bin");
    ::_exit(ok && no_partial ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace kiln::cache
