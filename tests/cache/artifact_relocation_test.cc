// A real artifact moves: copied elsewhere (the original deleted), onto a read-only mount, or
// loaded for another GPU. Verify and the load plan (Model::load before CUDA) must work wherever
// it lies, a read-only cache must never be written, and a wrong arch is named.
#include <gtest/gtest.h>

#include <cstdio>

#include "cache/cache_scan.h"
#include "tests/cache/example_compile.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing::example_request;
using testing::load_plan;
using testing::TempDir;

// In a forked child: report and fail.
#define CHILD_CHECK(cond, ...)           \
  do {                                   \
    if (!(cond)) {                       \
      std::fprintf(stderr, __VA_ARGS__); \
      std::fprintf(stderr, "\n");        \
      return 1;                          \
    }                                    \
  } while (0)

class RelocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto out = compiler::compile_model(example_request(tmp_.path() / "built"));
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    key_ = out->key;
  }
  TempDir tmp_;
  std::string key_;
};

TEST_F(RelocationTest, CopiedCacheVerifiesLoadsAndHitsWithTheOriginalGone) {
  const fs::path copy = tmp_.path() / "elsewhere" / "cache";
  fs::create_directories(copy.parent_path());
  fs::copy(tmp_.path() / "built", copy, fs::copy_options::recursive);
  fs::remove_all(tmp_.path() / "built");

  Result<std::vector<ScannedEntry>> entries = cache_entries(copy, ScanDepth::kVerify);
  ASSERT_TRUE(entries.ok()) << entries.status().to_string();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_TRUE((*entries)[0].status.ok()) << (*entries)[0].status.to_string();
  Result<schema::Manifest> plan = load_plan(copy);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->key(), key_);
  // One artifact directory on its own, under any name, loads too.
  const fs::path single = tmp_.path() / "model-v3";
  fs::copy(artifact_dir(copy, key_), single, fs::copy_options::recursive);
  EXPECT_TRUE(load_plan(single).ok()) << load_plan(single).status().to_string();
  // The relocated cache still serves the compiler: a hit.
  auto again = compiler::compile_model(example_request(copy));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->cache_hit);
  // No file of the cache names where it was built.
  for (const auto& [path, bytes] : testing::tree_bytes(copy)) {
    EXPECT_EQ(bytes.find(tmp_.path().string()), std::string::npos) << path;
    EXPECT_EQ(bytes.find(testing::example_model_dir().string()), std::string::npos) << path;
  }
}

TEST_F(RelocationTest, WrongArchIsNamedBeforeAnythingLoads) {
  Result<schema::Manifest> plan = load_plan(tmp_.path() / "built", {"sm_80", 13000});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(plan.status().message().find("built for sm_90, this GPU is sm_80"), std::string::npos)
      << plan.status().message();
  Result<schema::Manifest> old_driver = load_plan(tmp_.path() / "built", {"sm_90", 12080});
  ASSERT_FALSE(old_driver.ok());
  EXPECT_NE(old_driver.status().message().find("update the driver"), std::string::npos);
}

TEST_F(RelocationTest, SeveralArchsLoadTheRightCubin) {
  const fs::path root = tmp_.path() / "multi";
  auto out = compiler::compile_model(example_request(root, {"sm_80", "sm_90"}));
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_NE(out->key, key_);  // the targets are part of the key
  for (const char* arch : {"sm_80", "sm_90"}) {
    Result<schema::Manifest> plan = load_plan(root, {arch, 13000});
    ASSERT_TRUE(plan.ok()) << arch << ": " << plan.status().to_string();
    Result<const schema::Module::Cubin*> c = module_cubin_for(plan->modules(0), arch);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ((*c)->path(), std::string("kernels/module0.") + arch + ".cubin");
    EXPECT_TRUE(fs::is_regular_file(out->artifact_dir / (*c)->path()));
  }
  Result<schema::Manifest> other = load_plan(root, {"sm_86", 13000});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("built for sm_80/sm_90, this GPU is sm_86"),
            std::string::npos)
      << other.status().message();
}

TEST_F(RelocationTest, ReadOnlyCacheLoadsHitsAndIsNeverWritten) {
  const fs::path ro = tmp_.path() / "built";
  const auto before = testing::tree_bytes(ro);
  const int rc = testing::run_with_mounts(
      [&] { return testing::bind_read_only(ro); },
      [&]() -> int {
        Result<std::vector<ScannedEntry>> e = cache_entries(ro, ScanDepth::kVerify);
        CHILD_CHECK(e.ok() && e->size() == 1 && (*e)[0].status.ok(), "verify failed on read-only");
        Result<schema::Manifest> plan = load_plan(ro);
        CHILD_CHECK(plan.ok(), "load plan: %s", plan.status().to_string().c_str());
        auto hit = compiler::compile_model(example_request(ro));
        CHILD_CHECK(hit.ok() && hit->cache_hit, "a hit must not need a writable cache");
        // A miss must say that the cache is read-only and where, and write nothing.
        compiler::CompileRequest other = example_request(ro);
        other.config.max_size = 32;
        other.config.capture_sizes = {1, 32};
        auto miss = compiler::compile_model(other);
        CHILD_CHECK(!miss.ok(), "compiled into a read-only cache");
        const std::string& msg = miss.status().message();
        CHILD_CHECK(msg.find("Read-only file system") != std::string::npos &&
                        msg.find(ro.string()) != std::string::npos,
                    "unclear error: %s", msg.c_str());
        return 0;
      });
  if (rc == testing::kExitNoMount) GTEST_SKIP() << "cannot bind-mount read-only here";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(testing::tree_bytes(ro), before) << "the read-only cache changed";
}

TEST_F(RelocationTest, CompileIntoAnEmptyReadOnlyTargetLeavesNothing) {
  const fs::path ro = tmp_.path() / "empty";
  fs::create_directories(ro);
  const int rc = testing::run_with_mounts(
      [&] { return testing::bind_read_only(ro); },
      [&]() -> int {
        auto out = compiler::compile_model(example_request(ro / "cache"));
        CHILD_CHECK(!out.ok(), "compiled into a read-only directory");
        const std::string& msg = out.status().message();
        CHILD_CHECK(msg.find("Read-only file system") != std::string::npos &&
                        msg.find((ro / "cache").string()) != std::string::npos,
                    "unclear error: %s", msg.c_str());
        std::fprintf(stderr, "error as the user sees it: %s\n", out.status().to_string().c_str());
        return 0;
      });
  if (rc == testing::kExitNoMount) GTEST_SKIP() << "cannot bind-mount read-only here";
  EXPECT_EQ(rc, 0);
  EXPECT_TRUE(fs::is_empty(ro));
}

}  // namespace
}  // namespace kiln::cache
