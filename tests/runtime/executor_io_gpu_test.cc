// GPU: how data gets in and out — device-pointer inputs (zero host copies) and output buffers,
// memory-kind checks — and equalities that must hold bit for bit: FULL vs PIECEWISE, debug vs
// normal, device vs host inputs. Skips cleanly without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kiln/executor.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/gpu_fixture.h"

namespace kiln {
namespace {

using runtime::testing::bitwise_equal;
using runtime::testing::DeviceBuffer;
using runtime::testing::DeviceInputs;
using runtime::testing::ExecutorGpu;
using runtime::testing::gpu_shared;
using runtime::testing::Inputs;
using runtime::testing::is_error;
using runtime::testing::make_inputs;
using runtime::testing::matches;
using runtime::testing::upload;

// Sizes that replay exactly, pad, and run eagerly (above the largest capture size 32).
const int64_t kSizes[] = {1, 3, 4, 5, 16, 17, 31, 32, 33, 40, 64};

// The same inputs through a FULL and a PIECEWISE executor: the same kernels and the same GEMM
// algorithms at the same padded size, so the outputs must be identical to the bit.
TEST_F(ExecutorGpu, FullAndPiecewiseAreBitwiseIdentical) {
  auto full = make(CudaGraphMode::kFull);
  auto piecewise = make(CudaGraphMode::kPiecewise);
  auto none = make(CudaGraphMode::kNone);
  ASSERT_TRUE(full && piecewise && none);
  uint32_t seed = 400;
  for (int64_t s : kSizes) {
    Inputs in = make_inputs(s, seed++);
    auto a = full->run(in.tensors);
    auto b = piecewise->run(in.tensors);
    ASSERT_TRUE(a.ok() && b.ok()) << s;
    EXPECT_TRUE(matches(*a, in));
    EXPECT_TRUE(bitwise_equal(*a, *b)) << "size " << s;
    // NONE runs at P = S, not the padded size: same values within tolerance, not bitwise.
    auto c = none->run(in.tensors);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(matches(*c, in));
  }
}

// Debug mode (arena and padding rows poisoned with NaN, addresses checked before each replay)
// must give exactly the outputs of a normal executor: padding never reaches a result.
TEST_F(ExecutorGpu, DebugModeOutputsEqualNormalOutputs) {
  for (CudaGraphMode mode :
       {CudaGraphMode::kFull, CudaGraphMode::kPiecewise, CudaGraphMode::kNone}) {
    SCOPED_TRACE(cuda_graph_mode_name(mode));
    auto normal = make(mode);
    auto debug = make(mode, /*debug=*/true);
    ASSERT_TRUE(normal && debug);
    uint32_t seed = 500;
    for (int64_t s : kSizes) {
      Inputs in = make_inputs(s, seed++);
      auto a = normal->run(in.tensors);
      auto b = debug->run(in.tensors);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      EXPECT_TRUE(matches(*b, in));
      EXPECT_TRUE(bitwise_equal(*a, *b)) << "size " << s;
    }
  }
}

TEST_F(ExecutorGpu, DeviceInputsGiveTheHostInputsOutputs) {
  for (CudaGraphMode mode : {CudaGraphMode::kFull, CudaGraphMode::kNone}) {
    auto ex = make(mode);
    ASSERT_NE(ex, nullptr);
    uint32_t seed = 600;
    for (int64_t s : kSizes) {
      Inputs in = make_inputs(s, seed++);
      auto host = ex->run(in.tensors);
      ASSERT_TRUE(host.ok());
      DeviceInputs d = upload(in);
      auto dev = ex->run(d.views);
      ASSERT_TRUE(dev.ok()) << dev.status().to_string();
      EXPECT_TRUE(bitwise_equal(*host, *dev)) << "size " << s;
      // Host views of the same tensors take the host path.
      std::vector<TensorView> host_views = {TensorView::of(in.tensors[0]),
                                            TensorView::of(in.tensors[1])};
      auto hv = ex->run(host_views);
      ASSERT_TRUE(hv.ok()) << hv.status().to_string();
      EXPECT_TRUE(bitwise_equal(*host, *hv)) << "size " << s;
    }
  }
}

// Device in, device out: nothing touches the host; a subset of outputs; shapes set.
TEST_F(ExecutorGpu, DeviceOutputs) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  const int64_t n = gpu_shared().art.spec.n;
  for (int64_t s : {5, 32, 50}) {
    Inputs in = make_inputs(s, static_cast<uint32_t>(700 + s));
    auto host = ex->run(in.tensors);
    ASSERT_TRUE(host.ok());
    DeviceInputs d = upload(in);
    const size_t bytes = static_cast<size_t>(s * n) * sizeof(float);
    DeviceBuffer zt(bytes + 64);  // larger than needed is fine
    std::vector<OutputView> outs = {OutputView{"zt", zt.ptr, zt.bytes, Memory::kDevice, {}}};
    ASSERT_TRUE(ex->run(d.views, outs).ok());
    EXPECT_EQ(outs[0].shape, (std::vector<int64_t>{n, s}));
    std::vector<uint8_t> got(bytes);
    ASSERT_TRUE(zt.download(got.data(), bytes));
    EXPECT_EQ(got, (*host)[1].data) << "size " << s;
    // Host output buffers work with device inputs too.
    std::vector<uint8_t> z(bytes);
    outs = {OutputView{"z", z.data(), z.size(), Memory::kHost, {}}};
    ASSERT_TRUE(ex->run(d.views, outs).ok());
    EXPECT_EQ(z, (*host)[0].data);
  }
}

TEST_F(ExecutorGpu, ViewErrorsAreCleanAndRunNothing) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  Inputs in = make_inputs(6, 800);
  DeviceInputs d = upload(in);
  DeviceBuffer small(16);
  std::vector<OutputView> outs = {OutputView{"z", small.ptr, small.bytes, Memory::kDevice, {}}};
  EXPECT_TRUE(is_error(ex->run(d.views, outs), StatusCode::kInvalidArgument,
                       {"output 'z' needs 1152 bytes at size 6", "the buffer holds 16"}));
  // A host pointer claimed to be device memory.
  std::vector<TensorView> lying = d.views;
  lying[1].data = in.tensors[0].data.data();
  EXPECT_TRUE(is_error(ex->run(lying).status(), StatusCode::kInvalidArgument,
                       {"input 'x' is marked as device memory", "Memory::kHost"}));
  std::vector<uint8_t> host_out(4096);
  outs = {OutputView{"z", host_out.data(), host_out.size(), Memory::kDevice, {}}};
  EXPECT_TRUE(is_error(ex->run(d.views, outs), StatusCode::kInvalidArgument,
                       {"output 'z' is marked as device memory"}));
  std::vector<TensorView> wrong = d.views;
  wrong[0].shape = {gpu_shared().art.spec.n, 7};  // y implies 7, x implies 6
  EXPECT_TRUE(is_error(ex->run(wrong).status(), StatusCode::kInvalidArgument,
                       {"implies size 6", "implies size 7"}));
  EXPECT_EQ(ex->stats().graph_replays + ex->stats().eager_runs, 0);
  auto ok = ex->run(d.views);  // still works
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_TRUE(matches(*ok, in));
}

// Inputs reallocated between runs (new device buffers each time): nothing is cached by address.
TEST_F(ExecutorGpu, InputBuffersReallocatedBetweenRuns) {
  auto ex = make(CudaGraphMode::kFull, /*debug=*/true);
  ASSERT_NE(ex, nullptr);
  for (uint32_t i = 0; i < 5; ++i) {
    Inputs in = make_inputs(9, 900 + i);
    DeviceInputs d = upload(in);
    auto out = ex->run(d.views);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(matches(*out, in));
  }
}

// At a capture size, FULL copies device inputs and outputs inside its graph (memcpy nodes set
// per request): two buffer sets alternate, and host runs, padded runs and time_device (which
// turn the nodes off) come between; every output must equal the host path's, and no replay
// may read or write a buffer of an earlier request.
TEST_F(ExecutorGpu, DeviceIoInsideTheGraphFollowsEachRequest) {
  auto ex = make(CudaGraphMode::kFull);
  ASSERT_NE(ex, nullptr);
  const int64_t n = gpu_shared().art.spec.n;
  const int64_t s = 32;  // a capture size: no padding
  const size_t bytes = static_cast<size_t>(s * n) * sizeof(float);
  Inputs in[2] = {make_inputs(s, 1200), make_inputs(s, 1201)};
  std::vector<Tensor> want[2];
  for (int k = 0; k < 2; ++k) {
    auto host = ex->run(in[k].tensors);
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    want[k] = *host;
  }
  DeviceInputs d[2] = {upload(in[0]), upload(in[1])};
  DeviceBuffer z[2] = {DeviceBuffer(bytes), DeviceBuffer(bytes)};
  for (int round = 0; round < 6; ++round) {
    const int k = round % 2;
    ASSERT_TRUE(z[k].upload(std::vector<uint8_t>(bytes, 0).data(), bytes));
    std::vector<OutputView> outs = {OutputView{"zt", z[k].ptr, bytes, Memory::kDevice, {}}};
    ASSERT_TRUE(ex->run(d[k].views, outs).ok()) << "round " << round;
    std::vector<uint8_t> got(bytes);
    ASSERT_TRUE(z[k].download(got.data(), bytes));
    EXPECT_EQ(got, want[k][1].data) << "round " << round;
    // Something between requests: a host run, a padded run, or a timing run.
    if (round == 1) {
      ASSERT_TRUE(ex->run(in[0].tensors).ok());
    } else if (round == 2) {
      ASSERT_TRUE(ex->run(make_inputs(17, 1202).tensors).ok());
    } else if (round == 3) {
      ASSERT_TRUE(ex->time_device(s, 2).ok());
    }
  }
  // The other output through the stream path, the same request's inputs in the graph.
  auto all = ex->run(d[1].views);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_TRUE(bitwise_equal(*all, want[1]));
}

TEST_F(ExecutorGpu, TimeRunsRecordsDeviceTime) {
  ExecutorOptions o;
  o.mode = CudaGraphMode::kFull;
  o.time_runs = true;
  auto ex = Executor::create(gpu_shared().model, o);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_LT((*ex)->stats().last_device_ms, 0.0);
  Inputs in = make_inputs(20, 950);
  ASSERT_TRUE((*ex)->run(in.tensors).ok());
  EXPECT_GT((*ex)->stats().last_device_ms, 0.0);
}

}  // namespace
}  // namespace kiln
