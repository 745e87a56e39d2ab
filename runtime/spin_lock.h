// File: runtime/spin_lock.h
//
// SpinLock: a lock for critical sections of a few dozen instructions that
// two threads contend for all the time (a loopback mailbox, a request's
// completion record). A std::mutex parks the loser in the kernel (a futex
// sleep and wake, microseconds) for what is a 100-nanosecond wait; this
// spins instead, and yields the core after a while in case the holder was
// descheduled (more ranks than cores). TSAN sees it: it is built on
// std::atomic.
//
// Use it with std::lock_guard / std::unique_lock; with a condition variable,
// use std::condition_variable_any.
//
// Example:
//   SpinLock mu;
//   std::lock_guard<SpinLock> lock(mu);
#ifndef RELAY_RUNTIME_SPIN_LOCK_H_
#define RELAY_RUNTIME_SPIN_LOCK_H_

#include <atomic>
#include <thread>

namespace relay {

// One pause of a polling loop: tells the core (and a hyperthread sibling)
// that this thread spins.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() {
    int spins = 0;
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          CpuRelax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 200;
  std::atomic<bool> locked_{false};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_SPIN_LOCK_H_
