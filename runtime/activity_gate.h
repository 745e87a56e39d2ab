// File: runtime/activity_gate.h
//
// ActivityGate: lets Abort() wait until no thread is still working on an
// operation's buffers. Work that may touch user buffers outside the
// transport (an algorithm's local copies and reductions) runs between
// Enter() and Exit(); Close() makes later Enter() calls fail and waits for
// the threads inside to leave. A thread that calls Close() from inside the
// gate (an OnDone callback that aborts) does not wait for itself.
//
// Lifetime and ownership. Shared by a communicator and the operations it
// started (std::shared_ptr), so a late completion never touches a freed
// gate. Thread-safe.
//
// Example:
//   if (!gate.Enter()) return;   // aborted: leave the buffers alone
//   ReduceInto(user_buffer);
//   gate.Exit();
#ifndef RELAY_RUNTIME_ACTIVITY_GATE_H_
#define RELAY_RUNTIME_ACTIVITY_GATE_H_

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace relay {

class ActivityGate {
 public:
  ActivityGate() = default;
  ActivityGate(const ActivityGate&) = delete;
  ActivityGate& operator=(const ActivityGate&) = delete;

  // True if the caller may go on (and must call Exit()); false once closed.
  bool Enter();
  void Exit();
  // Closes the gate and waits for every other thread inside to Exit().
  // Idempotent.
  void Close();
  bool closed() const { return closed_.load(); }

 private:
  std::atomic<int> inside_{0};
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  std::condition_variable left_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_ACTIVITY_GATE_H_
