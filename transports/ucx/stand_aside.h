// File: transports/ucx/stand_aside.h
//
// StandAside: when the UCX transport's progress thread leaves the worker to
// the callers polling it, and when it takes over. Bookkeeping on NowNanos
// timestamps only, so the policy is tested without threads, clocks or UCX
// (stand_aside_test.cc); ucx_transport.cc's ProgressLoop does the waiting
// and the polling. The measurements behind each rule are in docs/design/tuning-history.md.
//
// The policy. While a caller polls (Wait, Test, an exchange's waiter), the
// thread stands aside: the two would fight over the worker lock and the
// cores. It takes over once the caller says it stopped (CallerStopped, when
// its wait goes to sleep) or has not polled for the thread's interval (it
// returned and computes, with operations in flight).
// - It does not wake on a short timer: each wake-up preempts a caller that
//   is moving data.
// - Each check still wakes the thread, and where every core runs a polling
//   caller it preempts one. So while the caller is still polling at each
//   check, the interval doubles up to 4 ms, or 32 ms on a crowded host
//   (callers and threads outnumber the cores: SetCrowded).
// - The price is a later take-over, by up to that interval, when a caller
//   leaves operations outstanding. Each such gap restarts the interval at
//   kCallerPollingNs. The thread sees it when it takes over from a caller
//   that neither polled again nor slept (TakingOver); the caller sees every
//   one, as a return more than kCallerGapNs after its previous poll with
//   work in flight (CallerPolled).
// - A second gap within kAbandonMemoryNs marks a program that overlaps
//   communication with its own work: the interval then stays at
//   kCallerPollingNs, so it pays the late take-over once, not at every
//   overlap. One gap is not enough: every job has one at its start.
// - Gaps within kOneStretchNs of the first gap of their stretch count as
//   that one gap: a VM that keeps a polling caller off its core for a few
//   milliseconds makes several in a row, which must not mark a ping-pong as
//   overlapping. A program that does overlap leaves work behind at every
//   step, so a later stretch marks it.
//
// Threads. CallerPolled and CallerStopped run on any caller's thread;
// StandAsideFor, AfterStandingAside, TakingOver and Restart on the progress
// thread alone, which owns the interval.
//
// Example (the progress thread's loop):
//   const int64_t last_poll = stand_aside.last_caller_poll();  // clock after
//   const int64_t now = NowNanos();
//   if (const int64_t wait = stand_aside.StandAsideFor(last_poll, now)) {
//     ... sleep up to `wait` ns, or until the caller stops polling ...
//     const int64_t polled = stand_aside.last_caller_poll();
//     stand_aside.AfterStandingAside(polled, NowNanos());
//   } else {
//     stand_aside.TakingOver(last_poll, now, [&] { return busy; });
//     ... drive the worker ...
//   }
#ifndef RELAY_TRANSPORTS_UCX_STAND_ASIDE_H_
#define RELAY_TRANSPORTS_UCX_STAND_ASIDE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

namespace relay {

class StandAside {
 public:
  // The shortest interval between the thread's checks, and the gap between
  // a caller's polls that counts as leaving work behind.
  static constexpr int64_t kCallerPollingNs = 1'000'000;
  static constexpr int64_t kCallerGapNs = kCallerPollingNs;
  // The longest interval, on a host with a core for every caller and
  // thread, and on a crowded one.
  static constexpr int64_t kMostNs = 4'000'000;
  static constexpr int64_t kMostCrowdedNs = 32'000'000;
  // How close two gaps must be to mark a program as overlapping.
  static constexpr int64_t kAbandonMemoryNs = 10'000'000'000;
  // Gaps within this of the first gap of their stretch belong to that
  // stretch and count as one gap.
  static constexpr int64_t kOneStretchNs = 50'000'000;

  // Before the thread starts.
  void SetCrowded(bool crowded) {
    most_ns_ = crowded ? kMostCrowdedNs : kMostNs;
  }

  // A caller polls at `now`. `busy()` (work in flight) is asked only when
  // the poll comes after a gap.
  template <class BusyFn>
  void CallerPolled(int64_t now, BusyFn busy) {
    const int64_t previous =
        last_caller_poll_ns_.load(std::memory_order_relaxed);
    last_caller_poll_ns_.store(now, std::memory_order_relaxed);
    if (previous != 0 && !Within(now - previous, kCallerGapNs) && busy()) {
      NoteAbandoned(now);
    }
  }

  // The polling caller goes to sleep. True if it was polling, so the
  // thread may be standing aside for it and should be woken.
  bool CallerStopped() {
    return last_caller_poll_ns_.exchange(0, std::memory_order_relaxed) != 0;
  }

  // The latest caller's poll (0: none since the last one slept). Read it
  // before the clock: the other way round, a caller stamping in between
  // looks a few ns in the future, which counts as not polling.
  int64_t last_caller_poll() const {
    return last_caller_poll_ns_.load(std::memory_order_relaxed);
  }

  // Progress thread: how many ns longer to stand aside at `now` for a
  // caller that last polled at `last_poll`; 0: take over now.
  int64_t StandAsideFor(int64_t last_poll, int64_t now) const {
    return Within(now - last_poll, interval_ns_)
               ? last_poll + interval_ns_ - now
               : 0;
  }

  // Progress thread: it stood aside and woke at `woke`; `polled` is the
  // caller's stamp read just before. A gap seen since (or an overlapping
  // program) restarts the interval; a caller still polling doubles it.
  void AfterStandingAside(int64_t polled, int64_t woke) {
    const int64_t abandoned =
        last_abandoned_ns_.load(std::memory_order_relaxed);
    if (abandoned != abandoned_seen_ns_ || Overlapping(woke)) {
      abandoned_seen_ns_ = abandoned;
      interval_ns_ = kCallerPollingNs;
    } else if (polled != 0 && Within(woke - polled, kCallerPollingNs)) {
      interval_ns_ = std::min(2 * interval_ns_, most_ns_);
    }
  }

  // Progress thread: it takes over at `now` from a caller whose last poll
  // was `last_poll`; `busy()`: work in flight, asked only if a caller had
  // polled. A caller that polled and then neither polled again nor slept,
  // with work in flight, left it behind.
  template <class BusyFn>
  void TakingOver(int64_t last_poll, int64_t now, BusyFn busy) {
    if (last_poll != 0 && busy()) NoteAbandoned(now);
    abandoned_seen_ns_ = last_abandoned_ns_.load(std::memory_order_relaxed);
    interval_ns_ = kCallerPollingNs;
  }

  // Progress thread: back from idling with nothing in flight.
  void Restart() { interval_ns_ = kCallerPollingNs; }

  // The thread's current interval (for tests and diagnostics).
  int64_t interval_ns() const { return interval_ns_; }

  // Whether the program left work behind twice within kAbandonMemoryNs,
  // the second time less than kAbandonMemoryNs before `now`.
  bool Overlapping(int64_t now) const {
    return Within(now - repeat_abandoned_ns_.load(std::memory_order_relaxed),
                  kAbandonMemoryNs);
  }

 private:
  static bool Within(int64_t elapsed, int64_t window) {
    return elapsed >= 0 && elapsed < window;
  }

  // Work was left in flight with nobody polling, at `now`.
  void NoteAbandoned(int64_t now) {
    const int64_t before =
        last_abandoned_ns_.load(std::memory_order_relaxed);
    if (Within(now - before, kOneStretchNs)) return;  // The same stretch.
    // Two threads may both get here for one gap: both store `now`, and
    // both compare it with the same `before`.
    last_abandoned_ns_.store(now, std::memory_order_relaxed);
    if (Within(now - before, kAbandonMemoryNs)) {
      repeat_abandoned_ns_.store(now, std::memory_order_relaxed);
    }
  }

  static constexpr int64_t kLongAgoNs =
      std::numeric_limits<int64_t>::min() / 2;
  // Shared with callers.
  std::atomic<int64_t> last_caller_poll_ns_{0};
  std::atomic<int64_t> last_abandoned_ns_{kLongAgoNs};
  std::atomic<int64_t> repeat_abandoned_ns_{kLongAgoNs};
  // The progress thread's own.
  int64_t most_ns_ = kMostNs;
  int64_t interval_ns_ = kCallerPollingNs;
  int64_t abandoned_seen_ns_ = kLongAgoNs;
};

}  // namespace relay

#endif  // RELAY_TRANSPORTS_UCX_STAND_ASIDE_H_
