// Shared set-up of the runtime GPU tests: the test model (tests/runtime/test_model.h) published
// once per test binary and loaded, random inputs, the float64 reference check, a log capture.
// Tests skip cleanly (GTEST_SKIP) without a CUDA device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/executor.h"
#include "runtime/log.h"
#include "tests/runtime/test_artifact.h"
#include "tests/support/temp_dir.h"

namespace kiln::runtime::testing {

struct GpuShared {
  std::string skip;   // why the suite skips (no device)
  std::string error;  // why the suite cannot run (a setup failure: the tests fail)
  std::unique_ptr<kiln::testing::TempDir> tmp;
  TestArtifact art;
  std::shared_ptr<Model> model;
};
GpuShared& gpu_shared();

struct Inputs {
  int64_t s = 0;
  std::vector<float> x, y;
  std::vector<Tensor> tensors;
};

Tensor f32_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v);
// Fresh random x [S, K] and y [N, S] in [-scale, scale).
Inputs make_inputs(int64_t s, uint32_t seed, float scale = 1.0f);

// Outputs z [S, N], zt [N, S] against the float64 reference (fp32 GEMM tolerance).
::testing::AssertionResult matches(const std::vector<Tensor>& out, const Inputs& in);
// Same names, shapes and bytes.
::testing::AssertionResult bitwise_equal(const std::vector<Tensor>& a,
                                         const std::vector<Tensor>& b);

class ExecutorGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  std::unique_ptr<Executor> make(std::optional<CudaGraphMode> mode, bool debug = false);
};

// Collects runtime log lines while alive.
struct LogCapture {
  std::vector<std::string> lines;
  LogSink previous;
  LogCapture();
  ~LogCapture();
  bool has(const std::string& needle) const;
};

// cudaMemGetInfo free bytes of the current device; -1 on failure.
int64_t device_free_bytes();

// RAII device buffer for tests.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  bool upload(const void* host, size_t n);
  bool download(void* host, size_t n) const;
};

// An Inputs request in device memory: views of x and y, given in the order y, x (names bind,
// not positions).
struct DeviceInputs {
  std::unique_ptr<DeviceBuffer> x, y;
  std::vector<TensorView> views;
};
DeviceInputs upload(const Inputs& in);

}  // namespace kiln::runtime::testing
