// The compiler under stress: 8 processes compiling one key at once, a compile SIGKILLed at every
// file-system step of its publish, and a disk that fills up.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>

#include "cache/cache_gc.h"
#include "cache/cache_index.h"
#include "cache/cache_scan.h"
#include "cache/publish_fault.h"
#include "tests/cache/example_compile.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::example_request;
using testing::load_plan;
using testing::TempDir;

// Hidden directories and temp files other than locks: what a compile must not leave behind.
std::vector<std::string> leftovers(const fs::path& root) {
  std::vector<std::string> out;
  Result<CacheScan> scan = cache_scan(root, ScanDepth::kManifest);
  if (scan.ok()) {
    for (const Leftover& l : scan->leftovers) out.push_back(l.path.filename().string());
  }
  return out;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(CompileFaults, EightConcurrentCompilesOfOneKeyAllSucceedWithOneArtifact) {
  TempDir tmp;
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < 8; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(gate[1]);
      char c;
      while (::read(gate[0], &c, 1) < 0) {  // start together: wait for the parent's EOF
      }
      auto out = compiler::compile_model(example_request(tmp.path()));
      if (!out.ok()) std::fprintf(stderr, "child %d: %s\n", i, out.status().to_string().c_str());
      ::_exit(out.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  for (pid_t pid : pids) EXPECT_EQ(wait_exit_code(pid), 0);

  Result<std::vector<fs::path>> list = cache_list(tmp.path());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_TRUE(load_plan(tmp.path()).ok());
  EXPECT_TRUE(leftovers(tmp.path()).empty()) << ::testing::PrintToString(leftovers(tmp.path()));
  Result<std::vector<IndexEntry>> index = cache_index_read(tmp.path());
  ASSERT_TRUE(index.ok()) << index.status().to_string();
  ASSERT_EQ(index->size(), 1u);
  EXPECT_EQ((*index)[0].key, (*list)[0].filename().string());
}

// The previous state: another build of the model (another config, so another key) published.
TEST(CompileFaults, SigkillAtEveryPublishStepLeavesThePreviousStateLoadable) {
  TempDir tmp;
  const fs::path tmpl = tmp.path() / "template";
  compiler::CompileRequest old_req = example_request(tmpl);
  old_req.config.max_size = 32;
  old_req.config.capture_sizes = {1, 8, 32};
  auto old = compiler::compile_model(old_req);
  ASSERT_TRUE(old.ok()) << old.status().to_string();

  // Compile once; every child publishes this same build.
  auto cm = compiler::compile_unpublished(example_request(tmp.path() / "unused"));
  ASSERT_TRUE(cm.ok()) << cm.status().to_string();
  std::vector<std::string> steps;
  {
    const fs::path count = tmp.path() / "count";
    fs::copy(tmpl, count, fs::copy_options::recursive);
    set_publish_fault_hook([&](std::string_view s) {
      steps.emplace_back(s);
      return 0;
    });
    auto r = compiler::artifact_write((*cm)->inputs, count, (*cm)->key);
    set_publish_fault_hook({});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_GE(steps.size(), 20u) << ::testing::PrintToString(steps);

  for (std::size_t n = 0; n < steps.size(); ++n) {
    SCOPED_TRACE("killed at step " + std::to_string(n) + " (" + steps[n] + ")");
    const fs::path root = tmp.path() / ("run-" + std::to_string(n));
    fs::copy(tmpl, root, fs::copy_options::recursive);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::size_t i = 0;
      set_publish_fault_hook([&](std::string_view) {
        if (i++ == n) ::raise(SIGKILL);
        return 0;
      });
      (void)compiler::artifact_write((*cm)->inputs, root, (*cm)->key);
      ::_exit(0);
    }
    ASSERT_EQ(wait_exit_code(pid), 128 + SIGKILL);
    // The old build still loads; whatever is listed is complete.
    Result<schema::Manifest> plan = load_plan(artifact_dir(root, old->key));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    Result<std::vector<fs::path>> list = cache_list(root);
    ASSERT_TRUE(list.ok());
    for (const fs::path& d : *list) EXPECT_TRUE(load_plan(d).ok()) << d;
    // gc cleans up after the dead compile; the next compile succeeds.
    Result<GcReport> gc = cache_gc(root, false);
    ASSERT_TRUE(gc.ok()) << gc.status().to_string();
    EXPECT_TRUE(leftovers(root).empty()) << ::testing::PrintToString(leftovers(root));
    auto again = compiler::artifact_write((*cm)->inputs, root, (*cm)->key);
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    EXPECT_TRUE(load_plan(*again).ok());
    EXPECT_TRUE(load_plan(artifact_dir(root, old->key)).ok());
  }
}

TEST(CompileFaults, DiskFullIsAClearErrorAndLeavesNothing) {
  TempDir tmp;
  const fs::path small = tmp.path() / "small";
  fs::create_directories(small);
  const int rc = testing::run_with_mounts(
      // 64 KiB: less than the example's weights (95 KB).
      [&] { return ::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=64k") == 0; },
      [&]() -> int {
        auto out = compiler::compile_model(example_request(small));
        if (out.ok()) return 2;
        const std::string& msg = out.status().message();
        std::fprintf(stderr, "error as the user sees it: %s\n", out.status().to_string().c_str());
        if (out.status().code() != StatusCode::kResourceExhausted) return 3;
        if (msg.find("disk full") == std::string::npos) return 4;
        if (msg.find("weights.bin") == std::string::npos) return 5;
        Result<std::vector<fs::path>> list = cache_list(small);
        if (!list.ok() || !list->empty()) return 6;
        if (!leftovers(small).empty()) return 7;
        return 0;
      });
  if (rc == testing::kExitNoMount) GTEST_SKIP() << "cannot mount a tmpfs here";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace kiln::cache
