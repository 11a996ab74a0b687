// Crashes and failures at every file-system step of a publish (cache/publish_fault.h): a child
// process is SIGKILLed at step N, or step N fails with an injected errno, for every N. The old
// state must still verify, nothing half-written may be listed, gc must clean up, and the next
// publish must succeed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "cache/artifact_verify.h"
#include "cache/cache_gc.h"
#include "cache/cache_index.h"
#include "cache/publish_fault.h"
#include "tests/cache/sample_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::copy_tree;
using testing::leftovers;
using testing::read_bytes;
using testing::sample_publish;
using testing::TempDir;

const std::string kOld = "11111111111111111111111111111111";  // an unrelated, intact entry
const std::string kKey = "22222222222222222222222222222222";  // the key being published

enum class Scenario {
  kNewKey,          // kKey is not in the cache yet
  kReplaceCorrupt,  // kKey holds a corrupt artifact, which the publish replaces
  kKeyExists,       // kKey holds an intact artifact ("old"), which the publish must keep
};

// The cache before the publish under test.
fs::path make_template(const fs::path& dir, Scenario s) {
  const fs::path root = dir / "template";
  EXPECT_TRUE(sample_publish(root, kOld, "unrelated").ok());
  if (s != Scenario::kNewKey) {
    EXPECT_TRUE(sample_publish(root, kKey, "old").ok());
  }
  if (s == Scenario::kReplaceCorrupt) {
    testing::write_bytes(artifact_dir(root, kKey) / "weights.bin", "truncated");
  }
  return root;
}

std::vector<std::string> count_steps(const fs::path& tmpl, const fs::path& scratch) {
  copy_tree(tmpl, scratch);
  std::vector<std::string> steps;
  set_publish_fault_hook([&](std::string_view step) {
    steps.emplace_back(step);
    return 0;
  });
  Result<fs::path> r = sample_publish(scratch, kKey, "new");
  set_publish_fault_hook({});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return steps;
}

// What must hold after a crash or failure at any step, for every scenario.
void expect_old_state_intact(const fs::path& root, Scenario s, const std::string& where) {
  SCOPED_TRACE(where);
  Result<schema::Manifest> old = artifact_verify(artifact_dir(root, kOld));
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(old->model_name(), "unrelated");
  if (s == Scenario::kKeyExists) {
    Result<schema::Manifest> kept = artifact_verify(artifact_dir(root, kKey));
    ASSERT_TRUE(kept.ok()) << kept.status().to_string();
    EXPECT_EQ(kept->model_name(), "old");
  }
  // Nothing half-written is listed: every entry is intact, except the corrupt one we started with.
  Result<std::vector<fs::path>> list = cache_list(root);
  ASSERT_TRUE(list.ok());
  for (const fs::path& d : *list) {
    const bool template_corrupt = s == Scenario::kReplaceCorrupt && d.filename() == kKey &&
                                  read_bytes(d / "weights.bin") == "truncated";
    EXPECT_TRUE(template_corrupt || artifact_verify(d).ok()) << d;
  }
  if (fs::exists(cache_version_dir(root) / kIndexFileName)) {
    Result<std::vector<IndexEntry>> index = cache_index_read(root);
    EXPECT_TRUE(index.ok()) << index.status().to_string();
  }
}

// gc cleans whatever the interrupted publish left; then a publish of the key succeeds.
void expect_recovery(const fs::path& root, const std::string& where) {
  SCOPED_TRACE(where);
  Result<GcReport> gc = cache_gc(root, false);
  ASSERT_TRUE(gc.ok()) << gc.status().to_string();
  EXPECT_TRUE(leftovers(root).empty()) << ::testing::PrintToString(leftovers(root));
  EXPECT_TRUE(artifact_verify(artifact_dir(root, kOld)).ok());
  Result<fs::path> again = sample_publish(root, kKey, "again");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(artifact_verify(*again).ok());
  Result<std::vector<IndexEntry>> index = cache_index_read(root);
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  EXPECT_EQ(index->size(), 2u);
}

class PublishFaults : public ::testing::TestWithParam<Scenario> {};

TEST_P(PublishFaults, SigkillAtEveryStepLeavesTheOldStateLoadable) {
  TempDir tmp;
  const fs::path tmpl = make_template(tmp.path(), GetParam());
  const std::vector<std::string> steps = count_steps(tmpl, tmp.path() / "count");
  ASSERT_GE(steps.size(), 20u) << "too few kill points: " << ::testing::PrintToString(steps);
  for (std::size_t n = 0; n < steps.size(); ++n) {
    const std::string where = "killed at step " + std::to_string(n) + " (" + steps[n] + ")";
    const fs::path root = tmp.path() / ("run-" + std::to_string(n));
    copy_tree(tmpl, root);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::size_t i = 0;
      set_publish_fault_hook([&](std::string_view) {
        if (i++ == n) ::raise(SIGKILL);
        return 0;
      });
      Result<fs::path> r = sample_publish(root, kKey, "new");
      ::_exit(r.ok() ? 0 : 1);  // never reached: the hook kills at step n
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << where;
    expect_old_state_intact(root, GetParam(), where);
    expect_recovery(root, where);
  }
}

TEST_P(PublishFaults, InjectedErrorAtEveryStepIsCleanAndNamed) {
  TempDir tmp;
  const fs::path tmpl = make_template(tmp.path(), GetParam());
  const std::vector<std::string> steps = count_steps(tmpl, tmp.path() / "count");
  for (std::size_t n = 0; n < steps.size(); ++n) {
    const std::string where = "ENOSPC at step " + std::to_string(n) + " (" + steps[n] + ")";
    const fs::path root = tmp.path() / ("run-" + std::to_string(n));
    copy_tree(tmpl, root);
    std::size_t i = 0;
    set_publish_fault_hook([&](std::string_view) { return i++ == n ? ENOSPC : 0; });
    std::string warning;
    Result<fs::path> r = sample_publish(root, kKey, "new", &warning);
    set_publish_fault_hook({});
    if (r.ok()) {
      // Only steps after the artifact is in place may fail without failing the publish: the
      // best-effort trash removal and the index update (reported as a warning).
      EXPECT_TRUE(artifact_verify(*r).ok()) << where;
      const bool index_step = steps[n].find("index") != std::string::npos ||
                              steps[n].find("cache-lock") != std::string::npos;
      EXPECT_TRUE(steps[n].find("trash") != std::string::npos || index_step) << where;
      if (index_step) {
        EXPECT_NE(warning.find("cache index was not updated"), std::string::npos) << where;
        EXPECT_NE(warning.find("disk full"), std::string::npos) << where;
      }
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << where;
      EXPECT_NE(r.status().message().find("disk full"), std::string::npos)
          << where << ": " << r.status().message();
      EXPECT_NE(r.status().message().find(root.string()), std::string::npos)
          << where << ": " << r.status().message();
    }
    expect_old_state_intact(root, GetParam(), where);
    // A failed publish cleans its own stage; only a .trash-* may remain for gc.
    for (const std::string& l : leftovers(root))
      EXPECT_EQ(l.rfind(".trash-", 0), 0u) << where << ": " << l;
    expect_recovery(root, where);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, PublishFaults,
                         ::testing::Values(Scenario::kNewKey, Scenario::kReplaceCorrupt,
                                           Scenario::kKeyExists),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           switch (info.param) {
                             case Scenario::kNewKey:
                               return std::string("NewKey");
                             case Scenario::kReplaceCorrupt:
                               return std::string("ReplaceCorrupt");
                             case Scenario::kKeyExists:
                               return std::string("KeyExists");
                           }
                           return std::string("Unknown");
                         });

}  // namespace
}  // namespace kiln::cache
