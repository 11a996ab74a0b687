// The C API (kiln/runtime.h): every error path that needs no GPU runs everywhere (null
// arguments, bad directories, no device, bad modes, the thread-local last error); with a GPU,
// loading, creating and running through it, with host and device buffers and capacity errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kiln/model.h"
#include "kiln/runtime.h"
#include "runtime/cuda_check.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/gpu_fixture.h"
#include "tests/runtime/test_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;

std::string last_error() { return kiln_last_error(); }

using runtime::testing::c_api_fails;

TEST(CApi, NullArguments) {
  kiln_model* model = reinterpret_cast<kiln_model*>(0x1);
  EXPECT_TRUE(c_api_fails(kiln_model_load(nullptr, &model), KILN_INVALID_ARGUMENT, "dir is NULL"));
  EXPECT_EQ(model, nullptr);  // out is cleared on failure
  EXPECT_TRUE(c_api_fails(kiln_model_load("/tmp", nullptr), KILN_INVALID_ARGUMENT, "out is NULL"));
  size_t n = 0;
  int64_t max = 0;
  kiln_tensor_info info{};
  EXPECT_TRUE(
      c_api_fails(kiln_model_input_count(nullptr, &n), KILN_INVALID_ARGUMENT, "model is NULL"));
  EXPECT_TRUE(
      c_api_fails(kiln_model_output_count(nullptr, &n), KILN_INVALID_ARGUMENT, "model is NULL"));
  EXPECT_TRUE(
      c_api_fails(kiln_model_max_size(nullptr, &max), KILN_INVALID_ARGUMENT, "model is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_model_input_info(nullptr, 0, &info), KILN_INVALID_ARGUMENT,
                          "model is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_model_output_info(nullptr, 0, &info), KILN_INVALID_ARGUMENT,
                          "model is NULL"));
  kiln_executor* ex = reinterpret_cast<kiln_executor*>(0x1);
  EXPECT_TRUE(c_api_fails(kiln_executor_create(nullptr, KILN_GRAPH_MODE_ARTIFACT, &ex),
                          KILN_INVALID_ARGUMENT, "model is NULL"));
  EXPECT_EQ(ex, nullptr);
  EXPECT_TRUE(c_api_fails(kiln_executor_create(nullptr, KILN_GRAPH_MODE_FULL, nullptr),
                          KILN_INVALID_ARGUMENT, "out is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_executor_run(nullptr, nullptr, 0, nullptr, 0), KILN_INVALID_ARGUMENT,
                          "executor is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_executor_run_async(nullptr, nullptr, 0, nullptr, 0, nullptr),
                          KILN_INVALID_ARGUMENT, "kiln_executor_run_async: executor is NULL"));
  kiln_model_free(nullptr);  // accepted
  kiln_executor_free(nullptr);
}

TEST(CApi, BadModeIsRejectedBeforeAnythingElse) {
  kiln_executor* ex = nullptr;
  EXPECT_TRUE(c_api_fails(kiln_executor_create(nullptr, 5, &ex), KILN_INVALID_ARGUMENT,
                          "mode 5 is not a kiln_graph_mode (-1 to 4)"));
  EXPECT_TRUE(
      c_api_fails(kiln_executor_create(nullptr, -2, &ex), KILN_INVALID_ARGUMENT, "mode -2"));
}

TEST(CApi, BadDirectories) {
  TempDir tmp;
  kiln_model* model = nullptr;
  const std::string missing = (tmp.path() / "no-such-artifact").string();
  EXPECT_TRUE(c_api_fails(kiln_model_load(missing.c_str(), &model), KILN_NOT_FOUND, missing));
  EXPECT_EQ(model, nullptr);
  const std::string empty = tmp.path().string();  // a cache root with no artifact
  const kiln_status st = kiln_model_load(empty.c_str(), &model);
  EXPECT_NE(st, KILN_OK);
  EXPECT_NE(last_error().find(empty), std::string::npos) << last_error();
  EXPECT_EQ(model, nullptr);
}

TEST(CApi, SuccessClearsTheLastErrorAndErrorsArePerThread) {
  kiln_model* model = nullptr;
  ASSERT_NE(kiln_model_load(nullptr, &model), KILN_OK);
  ASSERT_FALSE(last_error().empty());
  std::string seen_elsewhere = "unset";
  std::thread([&] { seen_elsewhere = kiln_last_error(); }).join();
  EXPECT_EQ(seen_elsewhere, "");  // another thread has its own message
  EXPECT_FALSE(last_error().empty());
  EXPECT_STREQ(kiln_status_name(KILN_OK), "OK");
  EXPECT_STREQ(kiln_status_name(KILN_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(kiln_status_name(static_cast<kiln_status>(42)), "UNKNOWN");
  EXPECT_EQ(kiln_dtype_size(KILN_DTYPE_F16), 2u);
  EXPECT_EQ(kiln_dtype_size(77), 0u);
  // A successful call leaves the message empty.
  kiln_executor* ex = nullptr;
  (void)kiln_executor_create(nullptr, 9, &ex);
  EXPECT_FALSE(last_error().empty());
  (void)kiln_device_available();
  if (cuda_device_available()) {
    EXPECT_EQ(last_error(), "");
  } else {
    EXPECT_NE(last_error().find("no CUDA device"), std::string::npos) << last_error();
  }
}

// The arch that a cubin must be built for here: the GPU's when there is one.
std::string local_arch() {
  if (!cuda_device_available()) return "sm_90";
  auto arch = runtime::device_arch(0);
  return arch.ok() ? *arch : "sm_90";
}

class CApiModel : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime::testing::TestModelSpec spec;
    spec.arch = local_arch();
    auto art = runtime::testing::test_artifact_build(tmp_.path(), spec);
    ASSERT_TRUE(art.ok()) << art.status().to_string();
    art_ = *art;
  }
  void TearDown() override { kiln_model_free(model_); }
  // Loads the artifact; false (with the test skipped) when there is no GPU — after checking
  // that the failure is the clean "no device" error.
  bool load() {
    const kiln_status st = kiln_model_load(art_.dir.c_str(), &model_);
    if (!cuda_device_available()) {
      EXPECT_TRUE(c_api_fails(st, KILN_FAILED_PRECONDITION, "no CUDA device"));
      EXPECT_EQ(model_, nullptr);
      return false;
    }
    EXPECT_EQ(st, KILN_OK) << last_error();
    return st == KILN_OK;
  }
  TempDir tmp_;
  runtime::testing::TestArtifact art_;
  kiln_model* model_ = nullptr;
};

TEST_F(CApiModel, LoadAndQueryOrCleanNoDeviceError) {
  if (!load()) GTEST_SKIP() << "no CUDA device: the clean error was checked";
  size_t n = 0;
  ASSERT_EQ(kiln_model_input_count(model_, &n), KILN_OK);
  EXPECT_EQ(n, 2u);
  kiln_tensor_info info{};
  ASSERT_EQ(kiln_model_input_info(model_, 1, &info), KILN_OK);
  EXPECT_STREQ(info.name, "y");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size_axis, 1);
  EXPECT_EQ(info.coef[1], 1);
  EXPECT_EQ(info.offset[0], art_.spec.n);
  EXPECT_TRUE(c_api_fails(kiln_model_output_info(model_, 2, &info), KILN_INVALID_ARGUMENT,
                          "index 2 but the model has 2 outputs"));
  int64_t max = 0;
  ASSERT_EQ(kiln_model_max_size(model_, &max), KILN_OK);
  EXPECT_EQ(max, 64);
}

kiln_tensor tensor(const char* name, std::vector<int64_t> shape, void* data, size_t bytes,
                   int on_device) {
  kiln_tensor t{};
  t.name = name;
  t.dtype = KILN_DTYPE_F32;
  t.rank = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
  t.data = data;
  t.bytes = bytes;
  t.on_device = on_device;
  return t;
}

TEST_F(CApiModel, RunsWithHostAndDeviceBuffers) {
  if (!load()) GTEST_SKIP() << "no CUDA device";
  kiln_executor* ex = nullptr;
  ASSERT_EQ(kiln_executor_create(model_, KILN_GRAPH_MODE_PIECEWISE, &ex), KILN_OK) << last_error();
  kiln_model_free(model_);  // the executor keeps the model alive
  model_ = nullptr;
  const int64_t s = 13, k = art_.spec.k, n = art_.spec.n;
  auto x = runtime::testing::random_floats(static_cast<size_t>(s * k), 1);
  auto y = runtime::testing::random_floats(static_cast<size_t>(n * s), 2);
  std::vector<double> z_ref, zt_ref;
  runtime::testing::test_reference(art_.spec, art_.weights, x, y, s, &z_ref, &zt_ref);
  kiln_tensor in[2] = {tensor("x", {s, k}, x.data(), x.size() * 4, 0),
                       tensor("y", {n, s}, y.data(), y.size() * 4, 0)};
  std::vector<float> z(static_cast<size_t>(s * n));
  runtime::testing::DeviceBuffer zt_dev(z.size() * 4);
  kiln_tensor out[2] = {tensor("zt", {}, zt_dev.ptr, zt_dev.bytes, 1),
                        tensor("z", {}, z.data(), z.size() * 4, 0)};
  ASSERT_EQ(kiln_executor_run(ex, in, 2, out, 2), KILN_OK) << last_error();
  EXPECT_EQ(last_error(), "");
  EXPECT_EQ(out[1].rank, 2);
  EXPECT_EQ(out[1].shape[0], s);
  EXPECT_EQ(out[1].shape[1], n);
  EXPECT_EQ(out[0].shape[0], n);
  EXPECT_EQ(out[0].dtype, KILN_DTYPE_F32);
  std::vector<float> zt(z.size());
  ASSERT_TRUE(zt_dev.download(zt.data(), zt.size() * 4));
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_NEAR(z[i], z_ref[i], 1e-5 + 1e-5 * std::abs(z_ref[i])) << i;
    EXPECT_NEAR(zt[i], zt_ref[i], 1e-5 + 1e-5 * std::abs(zt_ref[i])) << i;
  }
  // Errors: too small an output, wrong input bytes, a wrong name — nothing is written.
  kiln_tensor small = tensor("z", {}, z.data(), 8, 0);
  EXPECT_TRUE(c_api_fails(kiln_executor_run(ex, in, 2, &small, 1), KILN_INVALID_ARGUMENT,
                          "output 'z' needs 2496 bytes at size 13"));
  kiln_tensor short_in[2] = {in[0], in[1]};
  short_in[0].bytes -= 4;
  EXPECT_TRUE(c_api_fails(kiln_executor_run(ex, short_in, 2, out, 2), KILN_INVALID_ARGUMENT,
                          "input 'x': bytes is"));
  kiln_tensor renamed[2] = {in[0], in[1]};
  renamed[1].name = "why";
  EXPECT_TRUE(c_api_fails(kiln_executor_run(ex, renamed, 2, out, 2), KILN_INVALID_ARGUMENT,
                          "unknown input(s) 'why'"));
  kiln_tensor bad_dtype[2] = {in[0], in[1]};
  bad_dtype[0].dtype = 99;
  EXPECT_TRUE(c_api_fails(kiln_executor_run(ex, bad_dtype, 2, out, 2), KILN_INVALID_ARGUMENT,
                          "dtype 99 is not a kiln_dtype"));
  EXPECT_TRUE(c_api_fails(kiln_executor_run(ex, nullptr, 2, out, 2), KILN_INVALID_ARGUMENT,
                          "inputs is NULL"));
  // Ordered on a stream: device memory only (the inputs here are host memory).
  EXPECT_TRUE(c_api_fails(kiln_executor_run_async(ex, in, 2, out, 1, nullptr),
                          KILN_INVALID_ARGUMENT, "input 'x' is host memory"));
  kiln_executor_free(ex);
}

}  // namespace
}  // namespace kiln
