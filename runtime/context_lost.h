// The lost CUDA context: after a device fault (an illegal address, a trap, a failed launch...)
// the CUDA runtime fails every later call of the process with the same "sticky" error, and only
// a new process gets a working context. The runtime records the first such error process-wide
// (cuda_status does, for every checked CUDA call) and from then on answers every entry point
// that would touch the device with one context_lost status — "CUDA context lost — restart the
// process (first error: <call>: <cudaErrorX> (<description>))" — without calling CUDA again.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>

#include "cache/status.h"

namespace kiln::runtime {

// True for the errors the CUDA documentation says leave the process in an inconsistent state
// ("to continue using CUDA, the process must be terminated and relaunched"), plus an
// uncorrectable ECC error during execution. cudaErrorUnknown is not among them: nothing says it
// is sticky, and a call that returns it may be retried.
bool cuda_error_is_sticky(cudaError_t err);

// One record of a lost context: the first error wins, later ones are ignored. Thread-safe; the
// check is one atomic load while nothing is recorded.
class ContextLostRecord {
 public:
  // Records `first_error` ("<call>: cudaErrorX (description)") unless an error is recorded
  // already, and returns the context_lost status of the record (naming the first error).
  Status record(const std::string& first_error);
  // OK while nothing is recorded; the context_lost status of the record after.
  Status check() const;
  bool lost() const { return lost_.load(std::memory_order_acquire); }

 private:
  Status status_locked() const;
  std::atomic<bool> lost_{false};
  mutable std::mutex mu_;
  std::string first_error_;  // written once, before lost_
};

// The process's record (the CUDA context is per process and device; a fault on one device is
// treated as lost for all: the runtime does not tell the devices' contexts apart).
ContextLostRecord& context_lost_record();

// context_lost_record().check(): the first line of every runtime entry point that touches the
// device.
Status context_lost_check();

}  // namespace kiln::runtime
