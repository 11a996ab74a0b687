// CPU: the lost CUDA context (runtime/context_lost.h). Which CUDA errors are sticky; a record
// keeps the first error for good; and the process-wide record: once a checked CUDA call returned
// a sticky error, every entry point that would touch the device — Model::load, executor and
// generator creation, the device check, the C API — returns context_lost naming the first error
// before it gets anywhere near CUDA (on this GPU-less machine, an entry point that went on would
// fail with "no CUDA device" or "not found" instead). The GPU half, where a real kernel traps:
// device_fault_gpu_test.cc.
#include "runtime/context_lost.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/executor.h"
#include "kiln/generator.h"
#include "kiln/runtime.h"
#include "runtime/cuda_check.h"
#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using testing::c_api_fails;
using testing::is_error;

constexpr const char* kLost = "CUDA context lost \u2014 restart the process";

TEST(ContextLost, StickyErrorsAreTheOnesThatEndTheProcess) {
  const cudaError_t sticky[] = {cudaErrorIllegalAddress,
                                cudaErrorLaunchFailure,
                                cudaErrorAssert,
                                cudaErrorIllegalInstruction,
                                cudaErrorMisalignedAddress,
                                cudaErrorInvalidAddressSpace,
                                cudaErrorInvalidPc,
                                cudaErrorHardwareStackError,
                                cudaErrorLaunchTimeout,
                                cudaErrorECCUncorrectable,
                                cudaErrorMpsClientTerminated,
                                cudaErrorExternalDevice,
                                static_cast<cudaError_t>(226) /* cudaErrorContained */,
                                static_cast<cudaError_t>(721) /* cudaErrorTensorMemoryLeak */};
  for (cudaError_t e : sticky) EXPECT_TRUE(cuda_error_is_sticky(e)) << cudaGetErrorName(e);
  const cudaError_t recoverable[] = {cudaSuccess,
                                     cudaErrorMemoryAllocation,
                                     cudaErrorInvalidValue,
                                     cudaErrorNoDevice,
                                     cudaErrorLaunchOutOfResources,
                                     cudaErrorNotReady,
                                     cudaErrorUnknown,
                                     cudaErrorInvalidDeviceFunction,
                                     cudaErrorStreamCaptureInvalidated,
                                     cudaErrorInsufficientDriver,
                                     cudaErrorNoKernelImageForDevice};
  for (cudaError_t e : recoverable) EXPECT_FALSE(cuda_error_is_sticky(e)) << cudaGetErrorName(e);
}

TEST(ContextLost, TheFirstErrorWinsAndStays) {
  ContextLostRecord r;
  EXPECT_FALSE(r.lost());
  EXPECT_TRUE(r.check().ok());
  const Status first = r.record(
      "cudaStreamSynchronize: cudaErrorIllegalAddress (an illegal memory access was encountered)");
  EXPECT_TRUE(is_error(first, StatusCode::kContextLost,
                       {kLost, "(first error: cudaStreamSynchronize: cudaErrorIllegalAddress"}));
  EXPECT_TRUE(r.lost());
  const Status second = r.record("cudaMemcpyAsync: cudaErrorLaunchFailure (unspecified)");
  EXPECT_EQ(second.code(), StatusCode::kContextLost);
  EXPECT_EQ(second.message(), first.message());
  for (int i = 0; i < 3; ++i) {
    const Status later = r.check();
    EXPECT_EQ(later.code(), StatusCode::kContextLost);
    EXPECT_EQ(later.message(), first.message());
  }
}

TEST(ContextLost, ThreadsRacingToRecordAllSeeOneFirstError) {
  ContextLostRecord r;
  std::vector<std::string> seen(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&r, &seen, t] {
      seen[t] = r.record("call " + std::to_string(t) + ": cudaErrorLaunchFailure").message();
    });
  for (std::thread& t : threads) t.join();
  const std::set<std::string> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 1u);
  EXPECT_EQ(*distinct.begin(), r.check().message());
}

TEST(ContextLost, CApiNamesTheStatus) {
  EXPECT_STREQ(kiln_status_name(KILN_CONTEXT_LOST), "CONTEXT_LOST");
  EXPECT_EQ(static_cast<int>(KILN_CONTEXT_LOST), static_cast<int>(StatusCode::kContextLost));
  EXPECT_STREQ(status_code_name(StatusCode::kContextLost), "context lost");
}

// The only test that touches the process-wide record (it stays set for the rest of the process,
// so nothing else in this executable may depend on a live context).
TEST(ContextLost, AfterAStickyErrorEveryEntryPointRefusesWithTheFirstError) {
  ASSERT_TRUE(context_lost_check().ok()) << "the record was set before this test";
  const Status first = cuda_status(cudaErrorIllegalAddress, "cudaStreamSynchronize (test)");
  ASSERT_TRUE(is_error(first, StatusCode::kContextLost,
                       {kLost, "cudaStreamSynchronize (test): cudaErrorIllegalAddress ("}));
  const std::string message = first.message();

  // A later sticky error does not replace the first; the check returns the record.
  EXPECT_EQ(cuda_status(cudaErrorLaunchFailure, "another call").message(), message);
  EXPECT_EQ(context_lost_check().message(), message);

  auto same = [&message](const Status& s) -> ::testing::AssertionResult {
    if (s.code() != StatusCode::kContextLost || s.message() != message)
      return ::testing::AssertionFailure()
             << "expected the recorded context_lost status, got " << s.to_string();
    return ::testing::AssertionSuccess();
  };
  for (int i = 0; i < 2; ++i) {  // every later call, not just the next one
    EXPECT_TRUE(same(Model::load("/nonexistent/kiln-artifact").status()));
    EXPECT_TRUE(same(Executor::create(nullptr).status()));
    EXPECT_TRUE(same(Generator::create(nullptr).status()));
    DeviceGuard guard(0);
    EXPECT_TRUE(same(guard.status()));
    std::string why;
    EXPECT_FALSE(cuda_device_available(&why));
    EXPECT_EQ(why, message);

    kiln_model* model = reinterpret_cast<kiln_model*>(&why);  // must be reset to NULL
    EXPECT_TRUE(c_api_fails(kiln_model_load("/nonexistent/kiln-artifact", &model),
                            KILN_CONTEXT_LOST, message));
    EXPECT_EQ(model, nullptr);
    EXPECT_EQ(kiln_device_available(), 0);
    EXPECT_NE(std::string(kiln_last_error()).find(kLost), std::string::npos) << kiln_last_error();
  }
}

}  // namespace
}  // namespace kiln::runtime
