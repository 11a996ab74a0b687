// CallGate: lets an object's destructor wait for the calls other threads are running on it.
// Every method of the object enters the gate first (a CallPass, before it takes the object's
// lock, so a call queued on the lock counts too) and leaves it when it returns; the destructor
// closes the gate, which refuses later calls and waits until every admitted call has left. The
// executor, the generator and their C handles use it, so freeing one while another thread runs
// it waits for that run instead of destroying the state under it. (A call made after the free
// has returned still uses freed memory: no object can guard against that.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "cache/status.h"

namespace kiln::runtime {

class CallGate {
 public:
  // Admits a call: true, and the call is counted until leave(); false once close() has begun.
  bool enter();
  void leave();
  // Refuses every later enter() and waits until each admitted call has left. Called by the
  // destructor; calling it again returns at once. Must not be called from inside an admitted
  // call of the same gate (it would wait for itself).
  void close();
  bool closing() const;
  int64_t active() const;  // admitted calls that have not left

 private:
  mutable std::mutex mu_;
  std::condition_variable left_;
  int64_t active_ = 0;
  bool closing_ = false;
};

// One call through a gate: enters on construction, leaves on destruction. status() is OK when
// admitted, else failed_precondition "<what>: the <object> is being freed".
class CallPass {
 public:
  CallPass(CallGate& gate, const char* what, const char* object);
  ~CallPass();
  CallPass(const CallPass&) = delete;
  CallPass& operator=(const CallPass&) = delete;
  Status status() const;
  // status(), then the lost-context check (context_lost.h): the first line of a method that
  // touches the device.
  Status device_status() const;
  bool admitted() const { return admitted_; }

 private:
  CallGate& gate_;
  const char* what_ = nullptr;
  const char* object_ = nullptr;
  bool admitted_ = false;
};

}  // namespace kiln::runtime
