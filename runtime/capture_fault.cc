#include "runtime/capture_fault.h"

#include <atomic>
#include <mutex>
#include <utility>

namespace kiln::runtime {
namespace {

std::mutex& hook_mutex() {
  static std::mutex mu;
  return mu;
}

CaptureFaultHook& hook() {
  static CaptureFaultHook h;
  return h;
}

std::atomic<bool>& hook_set() {  // lets captures skip the lock when no test set a hook
  static std::atomic<bool> set{false};
  return set;
}

}  // namespace

CaptureFaultHook capture_fault_set(CaptureFaultHook h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook_set().store(static_cast<bool>(h));
  return std::exchange(hook(), std::move(h));
}

Status capture_fault_check(int64_t size, size_t segment) {
  if (!hook_set().load()) return Status::ok_status();
  std::lock_guard<std::mutex> lock(hook_mutex());
  if (!hook()) return Status::ok_status();
  return hook()(size, segment);
}

}  // namespace kiln::runtime
