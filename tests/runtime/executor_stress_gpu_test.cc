// GPU: executors under pressure — two executors of one model on two threads at once, executor
// creation racing runs, 1,000 create/destroy cycles that must give the device memory back, and
// captures that fail (out of memory, a failing step) coming back as clean errors with nothing
// leaked. Skips cleanly without a CUDA device.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/executor.h"
#include "runtime/capture_fault.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/gpu_fixture.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;
using runtime::testing::device_free_bytes;
using runtime::testing::ExecutorGpu;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::is_error;
using runtime::testing::make_inputs;
using runtime::testing::matches;

// The driver may keep a little memory cached across cudaMalloc/cudaFree and graph creation;
// anything beyond one 2 MiB page is a leak.
constexpr int64_t kLeakToleranceBytes = int64_t{2} << 20;

// Each thread runs its own executor over interleaved sizes and checks every result against the
// float64 reference; the two share the model (weights, kernels, cuBLASLt handle).
TEST_F(ExecutorGpu, TwoExecutorsOnTwoThreads) {
  auto a = make(CudaGraphMode::kFull);
  auto b = make(CudaGraphMode::kPiecewise);
  ASSERT_TRUE(a && b);
  std::atomic<int> failures{0};
  auto work = [&failures](Executor* ex, uint32_t seed) {
    const int64_t sizes[] = {1, 7, 16, 33, 4, 64, 20, 32, 2, 45};
    for (int round = 0; round < 20; ++round) {
      for (int64_t s : sizes) {
        Inputs in = make_inputs(s, seed++);
        auto out = ex->run(in.tensors);
        if (!out.ok() || !matches(*out, in)) {
          ADD_FAILURE() << "size " << s << ": "
                        << (out.ok() ? std::string("mismatch") : out.status().to_string());
          failures.fetch_add(1);
          return;
        }
      }
    }
  };
  std::thread ta(work, a.get(), 1000u);
  std::thread tb(work, b.get(), 5000u);
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a->stats().graph_replays + a->stats().eager_runs, 200);
  EXPECT_EQ(b->stats().graph_replays + b->stats().eager_runs, 200);
}

// Concurrent calls on one executor serialise (its lock), and stay correct.
TEST_F(ExecutorGpu, OneExecutorSharedByThreadsSerialises) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = 0; i < 25; ++i) {
        Inputs in = make_inputs(1 + (t * 25 + i) % 60, 10000 + t * 100 + i);
        auto out = ex->run(in.tensors);
        if (!out.ok() || !matches(*out, in)) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ex->stats().graph_replays + ex->stats().eager_runs, 100);
}

// One thread keeps running while another creates (captures) and destroys executors of the same
// model: thread-local capture mode keeps the two apart.
TEST_F(ExecutorGpu, CreationRacesRuns) {
  auto runner = make(CudaGraphMode::kFull);
  ASSERT_NE(runner, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread t([&] {
    uint32_t seed = 20000;
    while (!stop.load()) {
      Inputs in = make_inputs(1 + seed % 64, seed);
      ++seed;
      auto out = runner->run(in.tensors);
      if (!out.ok() || !matches(*out, in)) failures.fetch_add(1);
    }
  });
  for (int i = 0; i < 20; ++i) {
    auto ex =
        Executor::create(gpu_shared().model,
                         ExecutorOptions{i % 2 ? CudaGraphMode::kFull : CudaGraphMode::kPiecewise});
    EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  }
  stop.store(true);
  t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(ExecutorGpu, ThousandCreateDestroyCyclesReturnDeviceMemory) {
  {
    auto warm = make(CudaGraphMode::kFull);  // first-use allocations of the driver and cuBLASLt
    ASSERT_NE(warm, nullptr);
    ASSERT_TRUE(warm->run(make_inputs(8, 1).tensors).ok());
  }
  const int64_t before = device_free_bytes();
  ASSERT_GE(before, 0);
  for (int i = 0; i < 1000; ++i) {
    const CudaGraphMode mode = i % 3 == 0   ? CudaGraphMode::kFull
                               : i % 3 == 1 ? CudaGraphMode::kPiecewise
                                            : CudaGraphMode::kNone;
    auto ex = Executor::create(gpu_shared().model, ExecutorOptions{mode});
    ASSERT_TRUE(ex.ok()) << "cycle " << i << ": " << ex.status().to_string();
    if (i % 100 == 0) {
      ASSERT_TRUE((*ex)->run(make_inputs(5, static_cast<uint32_t>(i)).tensors).ok());
    }
  }
  const int64_t after = device_free_bytes();
  EXPECT_LE(before - after, kLeakToleranceBytes)
      << "free device memory before " << before << ", after 1000 cycles " << after;
}

// A capture that fails partway (the hook fails the capture of size 16, after size 32 was
// captured: largest first) is a clean error naming the size, and everything is released.
TEST_F(ExecutorGpu, FailedCaptureIsACleanError) {
  {
    auto warm = make(CudaGraphMode::kPiecewise);
    ASSERT_NE(warm, nullptr);
  }
  const int64_t before = device_free_bytes();
  int calls = 0;
  auto previous = runtime::capture_fault_set([&calls](int64_t size, size_t segment) -> Status {
    ++calls;
    if (size == 16 && segment == 2)
      return resource_exhausted("injected: out of memory while capturing");
    return Status::ok_status();
  });
  auto ex = Executor::create(gpu_shared().model, ExecutorOptions{CudaGraphMode::kPiecewise});
  runtime::capture_fault_set(previous);
  EXPECT_TRUE(is_error(ex.status(), StatusCode::kResourceExhausted,
                       {"creating an executor (mode PIECEWISE)", "capturing size 16 (pieces 2..2)",
                        "injected: out of memory"}));
  EXPECT_EQ(calls, 4);  // size 32: segments 0 and 2; size 16: segment 0, then 2 fails
  EXPECT_LE(before - device_free_bytes(), kLeakToleranceBytes);
  // The model is unharmed: a new executor captures and runs.
  auto again = make(CudaGraphMode::kPiecewise);
  ASSERT_NE(again, nullptr);
  Inputs in = make_inputs(10, 77);
  auto out = again->run(in.tensors);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_TRUE(matches(*out, in));
}

// An arena larger than the device: the executor's allocation fails with a clean
// resource_exhausted naming the arena and its size.
TEST_F(ExecutorGpu, ArenaLargerThanTheDeviceIsACleanError) {
  TempDir tmp;
  const auto& spec = gpu_shared().art.spec;
  auto cubin = runtime::testing::test_cubin(spec);
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  schema::Manifest m = runtime::testing::test_manifest(spec);
  m.set_arena_bytes(uint64_t{1} << 50);  // 1 PiB
  auto dir = runtime::testing::test_artifact_publish(tmp.path(), spec, m,
                                                     gpu_shared().art.weights.blob, *cubin);
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  auto model = Model::load(*dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t before = device_free_bytes();
  auto ex = Executor::create(*model);
  EXPECT_TRUE(is_error(ex.status(), StatusCode::kResourceExhausted,
                       {"activation arena", std::to_string(uint64_t{1} << 50)}));
  EXPECT_LE(before - device_free_bytes(), kLeakToleranceBytes);
}

}  // namespace
}  // namespace kiln
