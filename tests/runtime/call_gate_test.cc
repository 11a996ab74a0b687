// CPU: CallGate (runtime/call_gate.h), what lets ~Executor / kiln_executor_free (and the
// generator's) wait for calls other threads are running: close() waits for every admitted call,
// counts calls queued behind one another and nested ones, and refuses calls that arrive after it
// began. The GPU half, with a real executor: executor_free_gpu_test.cc.
#include "runtime/call_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/runtime/expect_error.h"

namespace kiln::runtime {
namespace {

using namespace std::chrono_literals;
using testing::is_error;

// Spins until `done()` or 10 s; false on timeout.
template <typename F>
bool eventually(F&& done) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(CallGate, CountsAdmittedCalls) {
  CallGate gate;
  EXPECT_EQ(gate.active(), 0);
  {
    CallPass a(gate, "Executor::run", "executor");
    EXPECT_TRUE(a.admitted());
    EXPECT_TRUE(a.status().ok());
    CallPass nested(gate, "Executor::stats", "executor");  // a call inside a call
    EXPECT_EQ(gate.active(), 2);
  }
  EXPECT_EQ(gate.active(), 0);
  EXPECT_FALSE(gate.closing());
}

TEST(CallGate, CloseOnAnIdleGateReturnsAndRefusesLaterCalls) {
  CallGate gate;
  gate.close();
  EXPECT_TRUE(gate.closing());
  CallPass late(gate, "Executor::run", "executor");
  EXPECT_FALSE(late.admitted());
  EXPECT_TRUE(is_error(late.status(), StatusCode::kFailedPrecondition,
                       {"Executor::run: the executor is being freed"}));
  EXPECT_TRUE(is_error(late.device_status(), StatusCode::kFailedPrecondition,
                       {"the executor is being freed"}));
  EXPECT_EQ(gate.active(), 0);  // a refused pass is not counted, and leaves nothing behind
  gate.close();                 // again: returns at once
}

// One thread is inside a call (held until released); another closes the gate. close() must not
// return before the call has left; a call arriving meanwhile is refused; the order of events is
// call left -> close returned.
TEST(CallGate, CloseWaitsForTheRunningCall) {
  CallGate gate;
  std::atomic<int> clock{0};
  std::atomic<int> call_left_at{-1}, close_returned_at{-1};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> inside{false};
  std::thread call([&] {
    CallPass pass(gate, "Executor::run", "executor");
    ASSERT_TRUE(pass.admitted());
    inside = true;
    released.wait();
    call_left_at = clock.fetch_add(1);  // just before the pass leaves
  });
  ASSERT_TRUE(eventually([&] { return inside.load(); }));
  std::thread closer([&] {
    gate.close();
    close_returned_at = clock.fetch_add(1);
  });
  ASSERT_TRUE(eventually([&] { return gate.closing(); }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(close_returned_at.load(), -1) << "close() returned while a call was running";
  CallPass late(gate, "Executor::run", "executor");
  EXPECT_FALSE(late.admitted());
  EXPECT_EQ(gate.active(), 1);
  release.set_value();
  call.join();
  closer.join();
  EXPECT_EQ(call_left_at.load(), 0);
  EXPECT_EQ(close_returned_at.load(), 1);
  EXPECT_EQ(gate.active(), 0);
}

// Calls queued behind one another (as on the executor's lock) are all counted: close() returns
// only after the last of them has left.
TEST(CallGate, CloseWaitsForEveryQueuedCall) {
  CallGate gate;
  std::mutex object_lock;  // the executor's own lock, which calls take after entering the gate
  std::atomic<int> admitted{0}, finished{0};
  std::unique_lock<std::mutex> hold(object_lock);
  std::vector<std::thread> calls;
  for (int i = 0; i < 4; ++i)
    calls.emplace_back([&] {
      CallPass pass(gate, "Executor::run", "executor");
      if (!pass.admitted()) return;
      ++admitted;
      std::lock_guard<std::mutex> lock(object_lock);
      std::this_thread::sleep_for(5ms);
      ++finished;
    });
  ASSERT_TRUE(eventually([&] { return admitted.load() == 4; }));
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    gate.close();
    closed = true;
  });
  ASSERT_TRUE(eventually([&] { return gate.closing(); }));
  hold.unlock();
  closer.join();
  EXPECT_TRUE(closed.load());
  EXPECT_EQ(finished.load(), 4) << "close() returned before every queued call had left";
  for (std::thread& t : calls) t.join();
}

}  // namespace
}  // namespace kiln::runtime
