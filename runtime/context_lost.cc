#include "runtime/context_lost.h"

namespace kiln::runtime {
namespace {

// Errors newer than the oldest supported toolkit (CUDA 12.0) go by number, which is their ABI
// value in driver_types.h: cudaErrorContained (CUDA 12.4+) and cudaErrorTensorMemoryLeak
// (CUDA 12.8+).
constexpr int kCudaErrorContained = 226;
constexpr int kCudaErrorTensorMemoryLeak = 721;

}  // namespace

bool cuda_error_is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorECCUncorrectable:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
      return true;
    default:
      break;
  }
  const int code = static_cast<int>(err);
  return code == kCudaErrorContained || code == kCudaErrorTensorMemoryLeak;
}

Status ContextLostRecord::record(const std::string& first_error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!lost_.load(std::memory_order_relaxed)) {
    first_error_ = first_error;
    lost_.store(true, std::memory_order_release);
  }
  return status_locked();
}

Status ContextLostRecord::check() const {
  if (!lost_.load(std::memory_order_acquire)) return Status::ok_status();
  std::lock_guard<std::mutex> lock(mu_);
  return status_locked();
}

Status ContextLostRecord::status_locked() const {
  return context_lost("CUDA context lost \u2014 restart the process (first error: " + first_error_ +
                      ")");
}

ContextLostRecord& context_lost_record() {
  static ContextLostRecord record;
  return record;
}

Status context_lost_check() { return context_lost_record().check(); }

}  // namespace kiln::runtime
