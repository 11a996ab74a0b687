#include "runtime/cuda_check.h"

#include "kiln/model.h"
#include "runtime/context_lost.h"

namespace kiln {

bool cuda_device_available(std::string* why) {
  const Status lost = runtime::context_lost_check();
  if (!lost.ok()) {
    if (why != nullptr) *why = lost.message();
    return false;
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != nullptr)
      *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" +
             cudaGetErrorString(err) + ")";
    return false;
  }
  if (count <= 0) {
    if (why != nullptr) *why = "cudaGetDeviceCount reports 0 devices";
    return false;
  }
  if (why != nullptr) why->clear();
  return true;
}

namespace runtime {

Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::ok_status();
  std::string message = what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  // A device fault: the context is gone for the whole process (context_lost.h).
  if (cuda_error_is_sticky(err)) return context_lost_record().record(message);
  (void)cudaGetLastError();  // do not let a non-sticky error surface again at a later check
  switch (err) {
    case cudaErrorMemoryAllocation:
      return resource_exhausted(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNoKernelImageForDevice:
      return failed_precondition(std::move(message));
    default:
      return internal_error(std::move(message));
  }
}

Status cublas_status(cublasStatus_t st, const std::string& what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::ok_status();
  std::string message =
      what + ": " + cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")";
  if (st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_INTERNAL_ERROR) {
    // cuBLASLt says only that its launch failed; a device fault shows as a sticky CUDA error.
    const cudaError_t cuda = cudaPeekAtLastError();
    if (cuda_error_is_sticky(cuda))
      return context_lost_record().record(message + " after " + cudaGetErrorName(cuda) + " (" +
                                          cudaGetErrorString(cuda) + ")");
  }
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return resource_exhausted(std::move(message));
  if (st == CUBLAS_STATUS_ARCH_MISMATCH || st == CUBLAS_STATUS_NOT_SUPPORTED)
    return failed_precondition(std::move(message));
  return internal_error(std::move(message));
}

Result<std::string> device_arch(int device) {
  int major = 0;
  int minor = 0;
  KILN_CUDA_TRY(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
      "cudaDeviceGetAttribute(compute capability major) of device " + std::to_string(device));
  KILN_CUDA_TRY(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
      "cudaDeviceGetAttribute(compute capability minor) of device " + std::to_string(device));
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

DeviceGuard::DeviceGuard(int device) {
  status_ = context_lost_check();  // a lost context: touch nothing
  if (!status_.ok()) return;
  status_ = cuda_status(cudaGetDevice(&previous_), "cudaGetDevice");
  if (!status_.ok() || previous_ == device) return;
  status_ = cuda_status(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  changed_ = status_.ok();
}

DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace runtime
}  // namespace kiln
