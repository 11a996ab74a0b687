// GPU: Executor::run_async — a run ordered on the caller's CUDA stream. It must start after the
// caller's earlier work (inputs written by a copy queued behind a long memset), finish before the
// caller's later work (the outputs read back on the same stream), give run()'s outputs bit for
// bit at replayed, padded and eager sizes, and refuse host memory. Skips without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/executor.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/gpu_fixture.h"

namespace kiln {
namespace {

using runtime::testing::DeviceBuffer;
using runtime::testing::DeviceInputs;
using runtime::testing::ExecutorGpu;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::is_error;
using runtime::testing::make_inputs;
using runtime::testing::upload;

// Pinned host memory (so that copies from and to it are asynchronous), freed on scope exit.
struct Pinned {
  void* ptr = nullptr;
  explicit Pinned(size_t n) { EXPECT_EQ(cudaMallocHost(&ptr, n), cudaSuccess); }
  ~Pinned() { (void)cudaFreeHost(ptr); }
};

TEST_F(ExecutorGpu, RunAsyncFollowsTheCallersStream) {
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer busy(size_t{1} << 30);  // a memset of 1 GiB keeps the stream busy a while
  const int64_t n = gpu_shared().art.spec.n;
  for (CudaGraphMode mode : {CudaGraphMode::kFull, CudaGraphMode::kPiecewise}) {
    SCOPED_TRACE(cuda_graph_mode_name(mode));
    auto ex = make(mode);
    ASSERT_NE(ex, nullptr);
    uint32_t seed = 1300;
    for (int64_t s : {32, 5, 50}) {  // replayed, padded, eager (above the largest capture)
      SCOPED_TRACE("size " + std::to_string(s));
      Inputs in = make_inputs(s, seed++);
      auto want = ex->run(in.tensors);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      // Device inputs that hold zeros until the caller's stream writes them, behind the memset.
      Inputs zeros = in;
      for (Tensor& t : zeros.tensors) std::fill(t.data.begin(), t.data.end(), uint8_t{0});
      DeviceInputs d = upload(zeros);
      const size_t xb = in.tensors[0].data.size(), yb = in.tensors[1].data.size();
      Pinned hx(xb), hy(yb);
      std::memcpy(hx.ptr, in.tensors[0].data.data(), xb);
      std::memcpy(hy.ptr, in.tensors[1].data.data(), yb);
      const size_t zb = static_cast<size_t>(s * n) * sizeof(float);
      DeviceBuffer zt(zb);
      Pinned back(zb);
      ASSERT_EQ(cudaMemsetAsync(busy.ptr, 0, busy.bytes, caller), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(d.x->ptr, hx.ptr, xb, cudaMemcpyHostToDevice, caller), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(d.y->ptr, hy.ptr, yb, cudaMemcpyHostToDevice, caller), cudaSuccess);
      std::vector<OutputView> outs = {OutputView{"zt", zt.ptr, zb, Memory::kDevice, {}}};
      Status run = ex->run_async(d.views, outs, caller);
      ASSERT_TRUE(run.ok()) << run.to_string();
      EXPECT_EQ(outs[0].shape, (std::vector<int64_t>{n, s}));  // set on return
      ASSERT_EQ(cudaMemcpyAsync(back.ptr, zt.ptr, zb, cudaMemcpyDeviceToHost, caller), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);
      std::vector<uint8_t> got(zb);
      std::memcpy(got.data(), back.ptr, zb);
      EXPECT_EQ(got, (*want)[1].data);
    }
    // Host memory is refused, naming the tensor, before anything runs.
    Inputs in = make_inputs(4, 1310);
    std::vector<TensorView> host = {TensorView::of(in.tensors[0]), TensorView::of(in.tensors[1])};
    DeviceBuffer zt(static_cast<size_t>(4 * n) * sizeof(float));
    std::vector<OutputView> outs = {OutputView{"zt", zt.ptr, zt.bytes, Memory::kDevice, {}}};
    EXPECT_TRUE(is_error(ex->run_async(host, outs, caller), StatusCode::kInvalidArgument,
                         {"Executor::run_async", "input 'x' is host memory"}));
    DeviceInputs d = upload(in);
    std::vector<float> z(static_cast<size_t>(4 * n));
    outs = {OutputView{"z", z.data(), z.size() * sizeof(float), Memory::kHost, {}}};
    EXPECT_TRUE(is_error(ex->run_async(d.views, outs, caller), StatusCode::kInvalidArgument,
                         {"output 'z' is host memory"}));
    EXPECT_EQ(ex->stats().graph_replays + ex->stats().eager_runs, 6);  // 3 run() + 3 run_async
  }
  (void)cudaStreamDestroy(caller);
}

}  // namespace
}  // namespace kiln
