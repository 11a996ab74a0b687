// Turning CUDA runtime and cuBLASLt return codes into kiln::Status values that name the call and
// the thing it was working on. Every CUDA call in the runtime goes through one of these.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "cache/status.h"

namespace kiln::runtime {

// OK for cudaSuccess; otherwise "<what>: cudaErrorX (description)". Clears the (non-sticky)
// last error so later checks do not see it again. A sticky error (a device fault:
// cuda_error_is_sticky, context_lost.h) is recorded process-wide and maps to context_lost; out
// of memory maps to resource_exhausted, missing device/driver to failed_precondition,
// everything else to internal.
Status cuda_status(cudaError_t err, const std::string& what);
// The same for cuBLASLt; a failed execution with a sticky CUDA error pending is context_lost.
Status cublas_status(cublasStatus_t st, const std::string& what);

// "sm_90" for the given device.
Result<std::string> device_arch(int device);

// Makes `device` current for the guard's lifetime, then restores the caller's device. After a
// lost context its status is the context_lost one and it calls no CUDA function.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  const Status& status() const { return status_; }

 private:
  int previous_ = -1;
  bool changed_ = false;
  Status status_;
};

}  // namespace kiln::runtime

// Evaluates `what` (a std::string expression) only on failure.
#define KILN_CUDA_TRY(expr, what)                                  \
  do {                                                             \
    cudaError_t kiln_cuda_err_ = (expr);                           \
    if (kiln_cuda_err_ != cudaSuccess)                             \
      return ::kiln::runtime::cuda_status(kiln_cuda_err_, (what)); \
  } while (0)

#define KILN_CUBLAS_TRY(expr, what)                                   \
  do {                                                                \
    cublasStatus_t kiln_cublas_st_ = (expr);                          \
    if (kiln_cublas_st_ != CUBLAS_STATUS_SUCCESS)                     \
      return ::kiln::runtime::cublas_status(kiln_cublas_st_, (what)); \
  } while (0)
