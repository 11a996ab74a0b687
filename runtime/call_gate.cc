#include "runtime/call_gate.h"

#include <string>

#include "runtime/context_lost.h"

namespace kiln::runtime {

bool CallGate::enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_) return false;
  ++active_;
  return true;
}

void CallGate::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--active_ == 0 && closing_) left_.notify_all();
}

void CallGate::close() {
  std::unique_lock<std::mutex> lock(mu_);
  closing_ = true;
  left_.wait(lock, [this] { return active_ == 0; });
}

bool CallGate::closing() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closing_;
}

int64_t CallGate::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

CallPass::CallPass(CallGate& gate, const char* what, const char* object)
    : gate_(gate), what_(what), object_(object), admitted_(gate.enter()) {}

CallPass::~CallPass() {
  if (admitted_) gate_.leave();
}

Status CallPass::status() const {
  if (admitted_) return Status::ok_status();
  return failed_precondition(std::string(what_) + ": the " + object_ + " is being freed");
}

Status CallPass::device_status() const {
  KILN_RETURN_IF_ERROR(status());
  return context_lost_check();
}

}  // namespace kiln::runtime
