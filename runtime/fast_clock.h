// File: runtime/fast_clock.h
//
// FastNow(): the wall clock as absl::Time, read on every operation (a
// collective's deadline and flight record at its start, its metrics and
// flight record at its end).
//
// Why not the system clock. Through the vDSO, std::chrono::system_clock
// costs about three times the time-stamp counter's read, and a small
// collective reads the clock twice (docs/design/tuning-history.md).
//
// How. Where the kernel itself keeps time with the TSC (its clocksource is
// `tsc`, which it chooses only when the counter is invariant and agrees
// across CPUs), FastNow scales the counter from an anchor: a pair of
// (counter, system clock) readings and the counter's rate between the last
// two anchors. The first rate, measured over 10 ms, is refined 100 ms
// later; after that anchors are re-taken about once a second, by whichever
// thread finds the current one old, so the clock follows the system
// clock's adjustments (NTP) within about 0.1 us a second; at a re-anchor it
// may step by that much either way, as the system clock itself may. Each
// re-anchor also asks the kernel again, and once it has moved off the TSC
// FastNow is the system clock for the rest of the process. For the
// first 10 ms after the first read, while the rate is unknown, and
// everywhere else (no TSC clocksource, not x86-64), FastNow is the system
// clock.
//
// Thread-safe and lock-free for readers (a sequence lock around the anchor;
// the thread that re-anchors does not block readers, which use the old
// anchor meanwhile).
//
// Example:
//   const absl::Time start = FastNow();
//   ... work ...
//   metrics.Record(FastNow() - start);
#ifndef RELAY_RUNTIME_FAST_CLOCK_H_
#define RELAY_RUNTIME_FAST_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/time.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace relay {

namespace clock_internal {

// The anchor FastNow scales from, under a sequence lock: `sequence` is odd
// while a re-anchor writes the fields. Zero-initialised (constant
// initialisation: no static-order problems); `rate` 0 means "use the
// system clock".
struct Anchor {
  std::atomic<uint32_t> sequence;
  std::atomic<uint64_t> tsc;       // Counter at the anchor.
  std::atomic<int64_t> unix_ns;    // System clock at the anchor.
  std::atomic<uint64_t> rate;      // Nanoseconds per tick, 32.32 fixed point.
  std::atomic<uint64_t> renew_at;  // Counter value after which to re-anchor.
};
extern Anchor anchor;

inline int64_t SystemNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The slow path: the first reads (calibration), a re-anchor, or a machine
// without a usable TSC. Returns the time in Unix nanoseconds.
int64_t SlowNanos();

// Tests only, before the process's first FastNow: where to read the
// kernel's clocksource name (by default its sysfs file). `path` outlives
// the process's use of the clock.
void SetClocksourceFileForTest(const char* path);

}  // namespace clock_internal

// The wall clock, cheaply, in nanoseconds since the Unix epoch; see the top
// of this file.
inline int64_t FastNowNanos() {
#if defined(__x86_64__)
  using clock_internal::anchor;
  const uint64_t tsc = __rdtsc();
  const uint32_t before = anchor.sequence.load(std::memory_order_acquire);
  // Acquire loads: the second look at `sequence` stays after them.
  const uint64_t at = anchor.tsc.load(std::memory_order_acquire);
  const int64_t unix_ns = anchor.unix_ns.load(std::memory_order_acquire);
  const uint64_t rate = anchor.rate.load(std::memory_order_acquire);
  const uint64_t renew_at = anchor.renew_at.load(std::memory_order_acquire);
  if ((before & 1) == 0 && rate != 0 && tsc >= at && tsc < renew_at &&
      anchor.sequence.load(std::memory_order_relaxed) == before) {
    const unsigned __int128 scaled =
        static_cast<unsigned __int128>(tsc - at) * rate;
    return unix_ns + static_cast<int64_t>(scaled >> 32);
  }
  return clock_internal::SlowNanos();
#else
  return clock_internal::SystemNanos();
#endif
}

// The same as absl::Time.
inline absl::Time FastNow() { return absl::FromUnixNanos(FastNowNanos()); }

// Whether FastNow scales the TSC here (false: it reads the system clock).
// Answers after the calibration, 10 ms after the first read.
bool FastNowUsesTsc();

}  // namespace relay

#endif  // RELAY_RUNTIME_FAST_CLOCK_H_
