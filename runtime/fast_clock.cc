#include "runtime/fast_clock.h"

#include <fstream>
#include <limits>
#include <string>

namespace relay {
namespace clock_internal {

Anchor anchor;

namespace {

#if defined(__x86_64__)
// The rate is measured over at least this long the first time, then
// refined over this long (the calibration's reading errors, spread over
// 10 ms, would otherwise move FastNow off the system clock by a hundred
// times as much as over 1 s), ...
constexpr int64_t kCalibrationNanos = 10'000'000;
constexpr uint64_t kRefineNanos = 100'000'000;
// ... and the anchor re-taken about this often after that.
constexpr uint64_t kRenewNanos = 1'000'000'000;

// The file that names the kernel's clocksource (a test points it
// elsewhere before the first read).
const char* clocksource_file =
    "/sys/devices/system/clocksource/clocksource0/current_clocksource";

// Whether the kernel keeps time with the TSC: it switches away from it
// (and says so here) when the counter is unstable or disagrees between
// CPUs, so this is the kernel's own verdict, not ours. It may change its
// mind while the process runs (VMs log "Marking clocksource 'tsc' as
// unstable"), so every re-anchor asks again: a few microseconds once a
// second, on the thread that re-anchors.
bool KernelUsesTsc() {
  std::ifstream in(clocksource_file);
  std::string source;
  return static_cast<bool>(in >> source) && source == "tsc";
}

// Until the kernel says otherwise; then the system clock for good.
std::atomic<bool> tsc_refused{false};

bool TscUsable() {
  static const bool usable_at_start = KernelUsesTsc();
  return usable_at_start && !tsc_refused.load(std::memory_order_relaxed);
}

// One thread at a time writes the anchor; the others read the system clock
// meanwhile.
std::atomic<bool> writing{false};
// System clock time before which no thread tries to write the anchor: the
// end of the calibration, or just before the anchor is due for renewal.
// Until then the slow path is the system clock and one load of a line
// nobody writes (trying on every call, two loopback ranks took the
// `writing` flag from each other's core throughout the calibration).
std::atomic<int64_t> next_attempt_ns{0};

// A (counter, system clock) pair, the counter read on both sides of the
// clock and averaged.
struct Reading {
  uint64_t tsc;
  int64_t unix_ns;
};
// The reading whose two counter reads lie closest together, of a few: the
// clock's time lies between them, so the pairing is off by at most half
// their distance. A thread preempted between them (or slowed by a
// sanitizer's interception of the clock) gives one far apart, and a rate
// calibrated from it drifts by tens of microseconds (docs/design/tuning-history.md).
Reading Read() {
  constexpr int kReadings = 5;
  Reading best{};
  uint64_t best_span = std::numeric_limits<uint64_t>::max();
  for (int attempt = 0; attempt < kReadings; ++attempt) {
    const uint64_t before = __rdtsc();
    const int64_t ns = SystemNanos();
    const uint64_t after = __rdtsc();
    if (after - before < best_span) {
      best_span = after - before;
      best = {before + (after - before) / 2, ns};
    }
  }
  return best;
}

// `renew_ns`: how long this anchor serves before the next (with a rate).
void Publish(const Reading& at, uint64_t rate,
             uint64_t renew_ns = kRenewNanos) {
  const uint32_t sequence = anchor.sequence.load(std::memory_order_relaxed);
  anchor.sequence.store(sequence + 1, std::memory_order_relaxed);
  // Release stores: a reader that sees any new field sees the odd sequence
  // on its second look.
  anchor.tsc.store(at.tsc, std::memory_order_release);
  anchor.unix_ns.store(at.unix_ns, std::memory_order_release);
  anchor.rate.store(rate, std::memory_order_release);
  const uint64_t renew_ticks = rate == 0 ? 0 : (renew_ns << 32) / rate;
  anchor.renew_at.store(at.tsc + renew_ticks, std::memory_order_release);
  anchor.sequence.store(sequence + 2, std::memory_order_release);
  next_attempt_ns.store(
      at.unix_ns + (rate == 0 ? kCalibrationNanos
                              : static_cast<int64_t>(renew_ns / 100 * 99)),
      std::memory_order_relaxed);
}

// Takes a new anchor if one is due, with the rate since the last one.
void Reanchor() {
  const Reading now = Read();
  // Another thread may have written the anchor since this one looked.
  if (now.unix_ns < next_attempt_ns.load(std::memory_order_relaxed)) return;
  if (anchor.unix_ns.load(std::memory_order_relaxed) != 0 &&
      !KernelUsesTsc()) {
    // The kernel gave up on the counter: so does this clock.
    tsc_refused.store(true, std::memory_order_relaxed);
    Publish(now, 0);
    next_attempt_ns.store(std::numeric_limits<int64_t>::max(),
                          std::memory_order_relaxed);
    return;
  }
  const uint64_t last_tsc = anchor.tsc.load(std::memory_order_relaxed);
  const int64_t last_ns = anchor.unix_ns.load(std::memory_order_relaxed);
  const uint64_t last_rate = anchor.rate.load(std::memory_order_relaxed);
  if (last_ns == 0) {  // The first reading: the start of the calibration.
    Publish(now, 0);
    return;
  }
  const int64_t elapsed_ns = now.unix_ns - last_ns;
  if (now.tsc <= last_tsc || elapsed_ns <= 0) {
    // The counter or the clock went backwards (a stepped clock, a counter
    // that is not what the kernel said): start the calibration again.
    Publish(now, 0);
    return;
  }
  const uint64_t rate = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(elapsed_ns) << 32) / (now.tsc - last_tsc));
  // Between 0.1 and 10 ns a tick (10 GHz to 100 MHz), and within 1% of the
  // last rate once there is one: anything else is a stepped system clock,
  // whose new position is taken with the old rate.
  const bool plausible = rate > (uint64_t{1} << 32) / 10 &&
                         rate < (uint64_t{10} << 32);
  const bool steady = last_rate == 0 || (rate > last_rate - last_rate / 100 &&
                                         rate < last_rate + last_rate / 100);
  if (!plausible) {
    Publish(now, 0);
  } else {
    // The first rate, from the calibration, serves until the refinement.
    Publish(now, steady ? rate : last_rate,
            last_rate == 0 ? kRefineNanos : kRenewNanos);
  }
}
#endif  // __x86_64__

}  // namespace

int64_t SlowNanos() {
  const int64_t now = SystemNanos();
#if defined(__x86_64__)
  if (now >= next_attempt_ns.load(std::memory_order_relaxed) && TscUsable() &&
      !writing.exchange(true, std::memory_order_acquire)) {
    Reanchor();
    writing.store(false, std::memory_order_release);
  }
#endif
  return now;
}

void SetClocksourceFileForTest(const char* path) {
#if defined(__x86_64__)
  clocksource_file = path;
#else
  (void)path;
#endif
}

}  // namespace clock_internal

bool FastNowUsesTsc() {
  return clock_internal::anchor.rate.load(std::memory_order_acquire) != 0;
}

}  // namespace relay
