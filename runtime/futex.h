// File: runtime/futex.h
//
// The two futex calls relay sleeps and wakes on: a request's completion
// word (process-private) and the shm algorithm's wake-up word, which lives
// in memory shared between processes (not private). Elsewhere than Linux
// a wait sleeps briefly and a wake does nothing: every caller re-checks
// its condition in a loop with a bounded sleep, so that only costs
// latency.
//
// Example:
//   FutexWait(&word, /*expected=*/0, std::chrono::milliseconds(1),
//             FutexScope::kProcess);
//   FutexWakeAll(&word, FutexScope::kProcess);
#ifndef RELAY_RUNTIME_FUTEX_H_
#define RELAY_RUNTIME_FUTEX_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>
#endif

namespace relay {

enum class FutexScope {
  kProcess,  // The word is only ever seen by this process (FUTEX_PRIVATE).
  kShared,   // The word may be mapped by other processes too.
};

// Sleeps while *word == expected, until a wake-up or `timeout`; returns at
// once if it differs. Spurious returns are fine: callers re-check.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                      std::chrono::nanoseconds timeout, FutexScope scope) {
#if defined(__linux__)
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(secs.count());
  ts.tv_nsec = static_cast<long>((timeout - secs).count());
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          scope == FutexScope::kProcess ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT,
          expected, &ts, nullptr, 0);
#else
  (void)scope;
  if (word->load(std::memory_order_acquire) == expected) {
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(
        timeout, std::chrono::microseconds(50)));
  }
#endif
}

// Wakes every thread asleep in FutexWait on `word`.
inline void FutexWakeAll(std::atomic<uint32_t>* word, FutexScope scope) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          scope == FutexScope::kProcess ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE,
          INT_MAX, nullptr, nullptr, 0);
#else
  (void)word, (void)scope;  // Sleepers poll.
#endif
}

}  // namespace relay

#endif  // RELAY_RUNTIME_FUTEX_H_
