// GPU: freeing an executor while another thread runs it waits for that run. A run at size 64
// (above the largest captured size, 32) logs "running eagerly" from inside the run, holding the
// executor; the test's log sink makes that run stop there for a while, and the main thread frees
// the executor in the meantime (~Executor in C++, kiln_executor_free in C). The free must return
// only after the run has returned, and the run must finish with correct outputs. Before the
// executors had a CallGate this destroyed the state under the running call. Skips cleanly
// without a CUDA device (ExecutorGpu).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kiln/executor.h"
#include "kiln/runtime.h"
#include "runtime/log.h"
#include "tests/runtime/gpu_fixture.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using runtime::testing::ExecutorGpu;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::make_inputs;
using runtime::testing::matches;

constexpr int64_t kEagerSize = 64;  // > the largest capture size: logs "running eagerly"

// While alive: the first "running eagerly" line marks the run as inside (`inside`), then holds
// that run for `hold`.
class HoldRunInside {
 public:
  explicit HoldRunInside(std::chrono::milliseconds hold) {
    previous_ = runtime::log_set_sink([this, hold](std::string_view line) {
      if (line.find("running eagerly") == std::string_view::npos || inside_.exchange(true)) return;
      std::this_thread::sleep_for(hold);
    });
  }
  ~HoldRunInside() { runtime::log_set_sink(previous_); }
  // Waits until a run is inside; false after 60 s.
  bool wait_inside() const {
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (!inside_.load()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

 private:
  std::atomic<bool> inside_{false};
  runtime::LogSink previous_;
};

TEST_F(ExecutorGpu, FreeWaitsForARunOnAnotherThread) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  ASSERT_LT(ex->captured_sizes().back(), kEagerSize);
  const Inputs in = make_inputs(kEagerSize, 31);
  HoldRunInside hold(500ms);
  std::atomic<bool> returned{false};
  Result<std::vector<Tensor>> out = internal_error("the run did not return");
  std::thread runner([&] {
    out = ex->run(in.tensors);
    returned = true;
  });
  ASSERT_TRUE(hold.wait_inside()) << "the run never logged 'running eagerly'";
  EXPECT_FALSE(returned.load());  // held inside for 500 ms
  ex.reset();                     // the free, while the run is inside
  EXPECT_TRUE(returned.load()) << "the executor was freed before the run on the other thread "
                                  "returned";
  runner.join();
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(matches(*out, in));
}

TEST_F(ExecutorGpu, CApiFreeWaitsForARunOnAnotherThread) {
  kiln_model* model = nullptr;
  ASSERT_EQ(kiln_model_load(gpu_shared().art.dir.c_str(), &model), KILN_OK) << kiln_last_error();
  kiln_executor* ex = nullptr;
  ASSERT_EQ(kiln_executor_create(model, KILN_GRAPH_MODE_FULL, &ex), KILN_OK) << kiln_last_error();
  kiln_model_free(model);  // the executor keeps it alive

  const Inputs in = make_inputs(kEagerSize, 32);
  const int64_t n = gpu_shared().art.spec.n;
  std::vector<Tensor> results = {Tensor::zeros("z", DType::kF32, {kEagerSize, n}),
                                 Tensor::zeros("zt", DType::kF32, {n, kEagerSize})};
  std::vector<kiln_tensor> inputs, outputs;
  for (const Tensor& t : in.tensors) {
    kiln_tensor k{};
    k.name = t.name.c_str();
    k.dtype = KILN_DTYPE_F32;
    k.rank = static_cast<int32_t>(t.shape.size());
    for (size_t d = 0; d < t.shape.size(); ++d) k.shape[d] = t.shape[d];
    k.data = const_cast<uint8_t*>(t.data.data());
    k.bytes = t.data.size();
    inputs.push_back(k);
  }
  for (Tensor& t : results) {
    kiln_tensor k{};
    k.name = t.name.c_str();
    k.data = t.data.data();
    k.bytes = t.data.size();
    outputs.push_back(k);
  }
  HoldRunInside hold(500ms);
  std::atomic<bool> returned{false};
  std::atomic<int> status{-1};
  std::string error;
  std::thread runner([&] {
    status = kiln_executor_run(ex, inputs.data(), inputs.size(), outputs.data(), outputs.size());
    error = kiln_last_error();  // per thread: read on the thread that ran
    returned = true;
  });
  ASSERT_TRUE(hold.wait_inside()) << "the run never logged 'running eagerly'";
  EXPECT_FALSE(returned.load());
  kiln_executor_free(ex);
  EXPECT_TRUE(returned.load()) << "kiln_executor_free returned before the run on the other "
                                  "thread did";
  runner.join();
  ASSERT_EQ(status.load(), KILN_OK) << error;
  EXPECT_TRUE(matches(results, in));
}

}  // namespace
}  // namespace kiln
