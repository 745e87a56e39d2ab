// File: runtime/wait_phases.h
//
// The polling half of how relay waits for another thread or process:
// RequestState::Wait (a request) and SlotExchange's blocking exchange (the
// peers' slots) both wait this way, and each then sleeps on its own futex
// if the polls ran out.
//
// Why these phases. A peer on a core of its own usually answers within a
// few polls, so those come before any clock read (30 ns each on a VM).
// Then the waiter polls for a spin budget (RequestState::SpinBudgetFor:
// long where every rank has a core, short where a spinning rank would hold
// the core its peer needs), then keeps polling but yields the core between
// polls for RequestState::kYieldBudget (with more ranks than cores, the
// peer may need exactly this core), and only then sleeps, so a long wait
// costs no CPU. A poll that reports work moving (a transport's progress
// found something to do) extends the yielding phase, since the operation
// is moving and a sleeper would add its wake-up to it; such polls yield
// only every 16th time, and not at all for a waiter with a core of its
// own.
//
// Example:
//   auto poll = [&] { return done() ? WaitPoll::kDone : WaitPoll::kIdle; };
//   if (!PollBeforeSleeping(poll, [] {}, spin, deadline)) { ... sleep ... }
#ifndef RELAY_RUNTIME_WAIT_PHASES_H_
#define RELAY_RUNTIME_WAIT_PHASES_H_

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/time/time.h"
#include "runtime/fast_clock.h"
#include "runtime/request.h"
#include "runtime/spin_lock.h"

namespace relay {

// What one poll found.
enum class WaitPoll {
  kDone,  // Nothing more to wait for.
  kBusy,  // Not done, but work moved: keep polling.
  kIdle,  // Not done, nothing moved.
};

// How a waiter gives its core away between polls. Tests pass their own.
inline void YieldCore() { std::this_thread::yield(); }

// Polls until `poll` says kDone (true) or the spin and yield budgets, each
// cut short by `deadline`, are spent (false: the caller sleeps next).
// `after_first_polls` runs once, after the polls before the first clock
// read, whether or not they found the wait over. `yield` gives the core
// away (YieldCore).
template <class Poll, class AfterFirstPolls, class Yield = void (*)()>
inline bool PollBeforeSleeping(Poll poll, AfterFirstPolls after_first_polls,
                               std::chrono::nanoseconds spin,
                               absl::Time deadline, Yield yield = &YieldCore) {
  constexpr int kPollsBeforeClock = 8;
  for (int i = 0; i < kPollsBeforeClock; ++i) {
    if (poll() == WaitPoll::kDone) {
      after_first_polls();
      return true;
    }
    CpuRelax();
  }
  after_first_polls();
  using Clock = std::chrono::steady_clock;
  // Capped at a day: an infinite deadline's nanoseconds::max() added to a
  // time point overflows (UBSan), and the budgets are far shorter.
  const auto until_deadline = absl::ToChronoNanoseconds(std::min(
      absl::Hours(24), std::max(absl::ZeroDuration(), deadline - FastNow())));
  // After FastNow: a process's first call calibrates the clock (it reads
  // the kernel's clocksource file), which under ASan took longer than both
  // budgets, and a waiter that started its budgets first went to sleep
  // after one poll (wait_phases_test).
  const Clock::time_point start = Clock::now();
  const Clock::time_point spin_until = start + std::min(spin, until_deadline);
  int polls = 0;
  for (;;) {
    if (poll() == WaitPoll::kDone) return true;
    CpuRelax();
    if (++polls % 16 == 0 && Clock::now() >= spin_until) break;
  }
  const Clock::time_point last = start + until_deadline;
  Clock::time_point yield_until =
      start + std::min(RequestState::kYieldBudget, until_deadline);
  // While work moves, a waiter sharing its core still gives it away now and
  // then: with more ranks than cores the peer it waits for may need it. One
  // with a core of its own (RequestState::HasCoreOfItsOwn) does not: nobody
  // it waits for needs its core, and those yields cost it the message
  // (docs/design/tuning-history.md).
  const bool yield_while_busy = !RequestState::HasCoreOfItsOwn(spin);
  int busy_polls = 0;
  while (Clock::now() < yield_until) {
    const WaitPoll found = poll();
    if (found == WaitPoll::kDone) return true;
    if (found == WaitPoll::kBusy) {
      yield_until = std::min(Clock::now() + RequestState::kYieldBudget, last);
      if (yield_while_busy && ++busy_polls % 16 == 0) yield();
      continue;
    }
    yield();
  }
  return poll() == WaitPoll::kDone;
}

}  // namespace relay

#endif  // RELAY_RUNTIME_WAIT_PHASES_H_
