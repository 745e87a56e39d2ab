#include "runtime/activity_gate.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace relay {
namespace {

// Verifies that Enter succeeds until Close, and fails after it.
TEST(ActivityGateTest, EnterFailsOnceClosed) {
  ActivityGate gate;
  ASSERT_TRUE(gate.Enter());
  gate.Exit();
  gate.Close();
  EXPECT_TRUE(gate.closed());
  EXPECT_FALSE(gate.Enter());
  gate.Close();  // Idempotent.
}

// Verifies that Close waits for a thread still inside the gate.
TEST(ActivityGateTest, CloseWaitsForThreadsInside) {
  ActivityGate gate;
  std::atomic<bool> inside{false}, left{false};
  std::thread worker([&] {
    ASSERT_TRUE(gate.Enter());
    inside = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = true;
    gate.Exit();
  });
  while (!inside) std::this_thread::yield();
  gate.Close();
  EXPECT_TRUE(left);  // Close returned only after the worker left.
  worker.join();
}

// Verifies that a thread closing the gate from inside it (an OnDone
// callback that aborts) does not wait for itself.
TEST(ActivityGateTest, CloseFromInsideDoesNotDeadlock) {
  ActivityGate gate;
  ASSERT_TRUE(gate.Enter());
  ASSERT_TRUE(gate.Enter());  // Nested: a completion inside another.
  gate.Close();
  gate.Exit();
  gate.Exit();
  EXPECT_FALSE(gate.Enter());
}

}  // namespace
}  // namespace relay
