// Model::load failures that must be caught before any CUDA call, and the GPU-less outcome for a
// valid artifact. On a machine with a GPU the valid artifact loads instead.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "cache/manifest_io.h"
#include "kiln/model.h"
#include "runtime/cuda_check.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/test_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;
using runtime::testing::is_error;
using runtime::testing::TestModelSpec;

bool has_device() { return cuda_device_available(); }

// The arch that a cubin must be built for here: the GPU's when there is one.
std::string local_arch() {
  if (!has_device()) return "sm_90";
  auto arch = runtime::device_arch(0);
  return arch.ok() ? *arch : "sm_90";
}

TEST(ModelLoad, MissingDirectory) {
  TempDir tmp;
  auto r = Model::load(tmp.path() / "does-not-exist");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().to_string();
  EXPECT_NE(r.status().message().find("does-not-exist"), std::string::npos);
}

TEST(ModelLoad, EmptyCacheRoot) {
  TempDir tmp;
  auto r = Model::load(tmp.path());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
  EXPECT_NE(r.status().message().find(tmp.path().string()), std::string::npos)
      << r.status().to_string();
}

TEST(ModelLoad, CorruptManifest) {
  TempDir tmp;
  TestModelSpec spec;
  spec.arch = local_arch();
  auto art = runtime::testing::test_artifact_build(tmp.path(), spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  const auto manifest = art->dir / std::string(cache::kManifestFileName);
  {
    std::fstream f(manifest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(cache::kManifestHeaderBytes + 10));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(cache::kManifestHeaderBytes + 10));
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  auto r = Model::load(art->dir);
  EXPECT_TRUE(is_error(r.status(), StatusCode::kDataLoss, {"manifest"}));
}

TEST(ModelLoad, InconsistentManifestIsRejectedBeforeCuda) {
  TempDir tmp;
  TestModelSpec spec;
  spec.arch = local_arch();
  auto cubin = runtime::testing::test_cubin(spec);
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  schema::Manifest m = runtime::testing::test_manifest(spec);
  m.mutable_pieces(2)->mutable_steps(0)->mutable_kernel()->mutable_args(1)->set_buffer(42);
  auto dir = runtime::testing::test_artifact_publish(
      tmp.path(), spec, m, runtime::testing::test_weights(spec, 1).blob, *cubin);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  auto r = Model::load(*dir);
  EXPECT_TRUE(
      is_error(r.status(), StatusCode::kInvalidArgument, {"kernel 'combine2'", "buffer index 42"}));
}

TEST(ModelLoad, ValidArtifact) {
  TempDir tmp;
  TestModelSpec spec;
  spec.arch = local_arch();
  auto art = runtime::testing::test_artifact_build(tmp.path(), spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  auto r = Model::load(tmp.path());  // the cache root resolves to its only artifact
  if (!has_device()) {
    EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition, {"no CUDA device"}));
    return;
  }
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Model& model = **r;
  EXPECT_EQ(model.name(), "runtime_test_model");
  EXPECT_EQ(model.max_size(), 64);
  EXPECT_EQ(model.capture_sizes(), (std::vector<int64_t>{4, 16, 32}));
  EXPECT_EQ(model.configured_mode(), CudaGraphMode::kFull);
  ASSERT_EQ(model.inputs().size(), 2u);
  EXPECT_EQ(model.inputs()[1].name, "y");
  EXPECT_EQ(model.inputs()[1].size_axis, 1);
  EXPECT_EQ(model.outputs()[1].shape_at(5), (std::vector<int64_t>{48, 5}));
}

TEST(ModelLoad, GarbageCubin) {
  TempDir tmp;
  TestModelSpec spec;
  spec.arch = local_arch();
  std::vector<uint8_t> garbage(512, 0x42);
  auto dir = runtime::testing::test_artifact_publish(
      tmp.path(), spec, runtime::testing::test_manifest(spec),
      runtime::testing::test_weights(spec, 1).blob, garbage);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  auto r = Model::load(*dir);
  ASSERT_FALSE(r.ok());
  if (!has_device()) {
    EXPECT_TRUE(is_error(r.status(), StatusCode::kFailedPrecondition, {"no CUDA device"}));
  } else {
    EXPECT_NE(r.status().message().find(runtime::testing::test_cubin_path(spec)), std::string::npos)
        << r.status().to_string();
  }
}

// The device probe answers the same twice, explains a "no" (naming the CUDA call), clears a
// stale explanation on "yes", and agrees with KILN_REQUIRE_GPU=1 (the GPU machine's runs).
TEST(ModelLoad, DeviceProbeAnswersConsistently) {
  std::string why = "stale";
  const bool available = cuda_device_available(&why);
  std::string again = "stale";
  EXPECT_EQ(cuda_device_available(&again), available);
  EXPECT_EQ(cuda_device_available(nullptr), available);
  if (available) {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_TRUE(again.empty()) << again;
  } else {
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
    EXPECT_EQ(why, again);
  }
  const char* require = std::getenv("KILN_REQUIRE_GPU");
  if (require != nullptr && std::string(require) == "1") {
    EXPECT_TRUE(available) << "KILN_REQUIRE_GPU=1 but no CUDA device: " << why;
  }
}

}  // namespace
}  // namespace kiln
