// bench/clock_cost: what one clock read costs on this machine, for the
// clocks relay reads on every collective (runtime/fast_clock.h FastNow,
// the TSC scaled where the kernel keeps time with it, else the system
// clock; Wait and the transports' polls use steady_clock) against the
// CPU's time-stamp counter itself; and, for the spin loops that read them,
// what the `pause` between two polls costs and what a yield of the core
// costs when nothing else wants it.
//
// Prints nanoseconds per read, the best of 5 runs of 5 million reads each.
// Usage: bazel run //bench:clock_cost
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "runtime/fast_clock.h"

namespace relay {
namespace {

constexpr int kReads = 5'000'000;
constexpr int kRuns = 5;

// Best-of-kRuns nanoseconds per call of `read`, whose results are summed so
// the calls are not optimised away.
template <typename Read>
double NsPerRead(Read read, int reads = kReads) {
  double best = 1e30;
  uint64_t sink = 0;
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reads; ++i) sink += read();
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      reads;
    if (ns < best) best = ns;
  }
  if (sink == 42) std::printf(" ");  // Keeps `sink` alive.
  return best;
}

int Main() {
  std::printf("%-28s %8s\n", "clock", "ns/read");
  (void)FastNow();  // Starts the calibration: the runs below outlast it.
  std::printf("%-28s %8.1f\n", "relay::FastNow", NsPerRead([] {
                return static_cast<uint64_t>(absl::ToUnixNanos(FastNow()));
              }));
  std::printf("%-28s %8.1f\n", "std::chrono::system_clock", NsPerRead([] {
                return static_cast<uint64_t>(
                    std::chrono::system_clock::now().time_since_epoch().count());
              }));
  std::printf("%-28s %8.1f\n", "std::chrono::steady_clock", NsPerRead([] {
                return static_cast<uint64_t>(
                    std::chrono::steady_clock::now().time_since_epoch().count());
              }));
#if defined(__x86_64__) || defined(__i386__)
  std::printf("%-28s %8.1f\n", "rdtsc", NsPerRead([] { return __rdtsc(); }));
  // Not a clock: what each spin poll's CpuRelax (runtime/spin_lock.h) adds
  // to a wait, so the delay before a poll sees its peer's write.
  std::printf("%-28s %8.1f\n", "pause (CpuRelax)", NsPerRead([] {
                __builtin_ia32_pause();
                return uint64_t{1};
              }));
#endif
  // Not a clock either: what a waiter's yield between polls costs when no
  // other thread wants the core (wait_phases.h), a system call: 495 ns on
  // the 2-core build VM (2026-11-27), where a clock read costs 10-25.
  std::printf("%-28s %8.1f\n", "sched_yield (nothing else)", NsPerRead(
                [] {
                  std::this_thread::yield();
                  return uint64_t{1};
                },
                200'000));
  return 0;
}

}  // namespace
}  // namespace relay

int main() { return relay::Main(); }
