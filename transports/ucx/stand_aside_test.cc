#include "transports/ucx/stand_aside.h"

#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kS = 1'000'000'000;
constexpr int64_t kStart = 5 * kS;  // Any clock reading; not near 0.

auto Busy() {
  return [] { return true; };
}
auto Idle() {
  return [] { return false; };
}

// A caller polling every 10 us in [from, to), with work in flight.
void Polls(StandAside& s, int64_t from, int64_t to) {
  for (int64_t t = from; t < to; t += 10'000) s.CallerPolled(t, Busy());
}

// What the caller does while the thread stands aside from `from` to `to`.
using During = std::function<void(StandAside&, int64_t from, int64_t to)>;
const During kPolls = Polls;

// One turn of the progress thread at `now`, as ProgressLoop takes it:
// stands aside while the caller does `during`, waking at the end of the
// wait, or takes over (`busy`: work in flight). Returns when the turn
// ended: the wake-up, or `now` for a take-over.
struct Turn {
  int64_t end = 0;
  bool took_over = false;
};
Turn ThreadTurn(StandAside& s, int64_t now, const During& during,
                bool busy = true) {
  const int64_t last_poll = s.last_caller_poll();
  const int64_t wait = s.StandAsideFor(last_poll, now);
  if (wait == 0) {
    s.TakingOver(last_poll, now, [busy] { return busy; });
    return {now, true};
  }
  during(s, now, now + wait);
  const int64_t polled = s.last_caller_poll();
  s.AfterStandingAside(polled, now + wait);
  return {now + wait, false};
}

// A caller that has polled all along, and the thread's turns while it goes
// on polling, until the interval reaches `until` (or 16 turns). Returns the
// time after the last turn.
int64_t BackOff(StandAside& s, int64_t now, int64_t until) {
  s.CallerPolled(now, Busy());
  for (int turn = 0; turn < 16 && s.interval_ns() < until; ++turn) {
    const Turn t = ThreadTurn(s, now + 1, kPolls);
    EXPECT_FALSE(t.took_over) << "took over from a polling caller";
    now = t.end;
  }
  return now;
}

// Verifies the wait the thread is given: the rest of its interval after the
// caller's last poll, and none once the caller is older than the interval,
// has stopped, or never polled.
TEST(StandAsideTest, StandsAsideForTheRestOfTheInterval) {
  StandAside s;
  EXPECT_EQ(s.StandAsideFor(s.last_caller_poll(), kStart), 0);  // Never polled.
  s.CallerPolled(kStart, Busy());
  EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs);
  EXPECT_EQ(s.StandAsideFor(kStart, kStart + 300'000), 700'000);
  EXPECT_EQ(s.StandAsideFor(kStart, kStart + kMs), 0);
  // A stamp later than the thread's clock (read in the wrong order) does
  // not count as polling.
  EXPECT_EQ(s.StandAsideFor(kStart, kStart - 1), 0);
  EXPECT_TRUE(s.CallerStopped());
  EXPECT_EQ(s.last_caller_poll(), 0);
  EXPECT_FALSE(s.CallerStopped());  // Nobody polling: nothing to wake.
  EXPECT_EQ(s.StandAsideFor(s.last_caller_poll(), kStart + 1), 0);
}

// Verifies the back-off: while the caller still polls at each check, the
// interval doubles from 1 ms up to 4 ms, or to 32 ms on a crowded host,
// and stays there.
TEST(StandAsideTest, IntervalDoublesWhileTheCallerPolls) {
  for (bool crowded : {false, true}) {
    StandAside s;
    s.SetCrowded(crowded);
    int64_t now = kStart;
    s.CallerPolled(now, Busy());
    std::vector<int64_t> intervals;
    for (int turn = 0; turn < 8; ++turn) {
      const Turn t = ThreadTurn(s, now + 1, kPolls);
      ASSERT_FALSE(t.took_over) << "took over from a polling caller, turn "
                                << turn;
      now = t.end;
      intervals.push_back(s.interval_ns());
    }
    const int64_t most =
        crowded ? StandAside::kMostCrowdedNs : StandAside::kMostNs;
    EXPECT_EQ(intervals.front(), 2 * kMs);
    EXPECT_EQ(intervals.back(), most);
    for (size_t i = 1; i < intervals.size(); ++i) {
      EXPECT_EQ(intervals[i], std::min(2 * intervals[i - 1], most)) << i;
    }
  }
}

// Verifies the take-over from a caller that goes to sleep: the thread,
// woken, takes over at once, and that is no gap.
TEST(StandAsideTest, CallerThatSleptIsNotAGap) {
  StandAside s;
  int64_t now = BackOff(s, kStart, StandAside::kMostNs);
  const Turn asleep = ThreadTurn(s, now + 1, [](StandAside& s, int64_t, int64_t) {
    ASSERT_TRUE(s.CallerStopped());
  });
  EXPECT_FALSE(asleep.took_over);
  EXPECT_EQ(s.interval_ns(), StandAside::kMostNs);  // No doubling, no restart.
  const Turn next = ThreadTurn(s, asleep.end, kPolls);
  EXPECT_TRUE(next.took_over);
  EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs);
  // Twice more: still no gap, so no overlapping program.
  for (int i = 0; i < 2; ++i) {
    now = next.end + (i + 1) * kS;
    s.CallerPolled(now, Busy());
    ASSERT_TRUE(s.CallerStopped());
    EXPECT_TRUE(ThreadTurn(s, now + 1, kPolls).took_over);
  }
  EXPECT_FALSE(s.Overlapping(now + 2));
}

// Verifies that one gap restarts the back-off at 1 ms but does not stick:
// a caller that then polls steadily backs it off again (the gap every job
// has while it starts).
TEST(StandAsideTest, OneGapRestartsTheBackOff) {
  StandAside s;
  s.SetCrowded(true);
  int64_t now = BackOff(s, kStart, StandAside::kMostCrowdedNs);
  ASSERT_EQ(s.interval_ns(), StandAside::kMostCrowdedNs);
  // During the next wait the caller polls 1 ms, leaves work in flight for
  // 3 ms, and polls again: its own poll sees the gap.
  const Turn t = ThreadTurn(s, now + 1, [](StandAside& s, int64_t from,
                                           int64_t to) {
    Polls(s, from, from + kMs);
    Polls(s, from + 4 * kMs, to);
  });
  ASSERT_FALSE(t.took_over);
  EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs);
  EXPECT_FALSE(s.Overlapping(t.end));
  // ...and backs off again.
  const Turn again = ThreadTurn(s, t.end, kPolls);
  ASSERT_FALSE(again.took_over);
  EXPECT_EQ(s.interval_ns(), 2 * kMs);
}

// Verifies that a gap with nothing in flight is no gap: a caller that
// comes back after computing with nothing outstanding left nothing behind.
TEST(StandAsideTest, GapWithNothingInFlightIsNoGap) {
  StandAside s;
  s.SetCrowded(true);
  int64_t now = BackOff(s, kStart, 8 * kMs);
  ASSERT_EQ(s.interval_ns(), 8 * kMs);
  const Turn t = ThreadTurn(s, now + 1, [](StandAside& s, int64_t from,
                                           int64_t to) {
    s.CallerPolled(from, Busy());
    s.CallerPolled(from + 3 * kMs, Idle());  // Back after 3 ms, idle.
    Polls(s, from + 3 * kMs + 10'000, to);
  });
  ASSERT_FALSE(t.took_over);
  EXPECT_EQ(s.interval_ns(), 16 * kMs);
}

// Verifies that two gaps within 10 s mark an overlapping program: the
// interval stays at 1 ms while the caller polls, until 10 s after the
// second gap.
TEST(StandAsideTest, TwoGapsWithinMemoryKeepOneMillisecond) {
  StandAside s;
  s.SetCrowded(true);
  int64_t now = kStart;
  s.CallerPolled(now, Busy());
  s.CallerPolled(now + 2 * kMs, Busy());  // Gap 1.
  now += 5 * kS;
  s.CallerPolled(now, Busy());  // Gap 2, 5 s later.
  EXPECT_TRUE(s.Overlapping(now));
  for (int turn = 0; turn < 5; ++turn) {
    const Turn t = ThreadTurn(s, now + 1, kPolls);
    ASSERT_FALSE(t.took_over);
    now = t.end;
    EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs) << turn;
  }
  // 10 s after the second gap the program is forgotten.
  now = kStart + 5 * kS + StandAside::kAbandonMemoryNs;
  EXPECT_FALSE(s.Overlapping(now));
  s.CallerPolled(now, Busy());  // A gap again, but a first one now.
  const Turn first = ThreadTurn(s, now + 1, kPolls);
  EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs);  // Restarted.
  const Turn t = ThreadTurn(s, first.end, kPolls);
  ASSERT_FALSE(t.took_over);
  EXPECT_EQ(s.interval_ns(), 2 * kMs);
}

// Verifies that gaps further apart than the memory do not mark a program.
TEST(StandAsideTest, GapsFurtherApartAreForgotten) {
  StandAside s;
  int64_t now = kStart;
  s.CallerPolled(now, Busy());
  s.CallerPolled(now + 2 * kMs, Busy());  // Gap 1.
  now += StandAside::kAbandonMemoryNs + kS;
  s.CallerPolled(now, Busy());  // Gap 2, 11 s later.
  EXPECT_FALSE(s.Overlapping(now));
}

// Verifies that gaps close together are one stretch, counted once: a VM
// that holds the caller off its core for a few milliseconds makes several
// in a row, and a ping-pong is no overlapping program. A gap after the
// stretch counts as a second one.
TEST(StandAsideTest, GapsOfOneStretchCountOnce) {
  StandAside s;
  s.SetCrowded(true);
  int64_t now = kStart;
  s.CallerPolled(now, Busy());
  for (int64_t at : {2 * kMs, 4 * kMs, 7 * kMs, 9 * kMs}) {
    s.CallerPolled(now + at, Busy());  // Each 2-3 ms after the last poll.
    EXPECT_FALSE(s.Overlapping(now + at)) << at;
  }
  // The caller's gaps and the thread's take-over in the same stretch.
  ASSERT_TRUE(ThreadTurn(s, now + 12 * kMs, kPolls).took_over);
  EXPECT_FALSE(s.Overlapping(now + 12 * kMs));
  // The thread backs off again while the caller polls.
  now = BackOff(s, now + 13 * kMs, StandAside::kMostCrowdedNs);
  EXPECT_EQ(s.interval_ns(), StandAside::kMostCrowdedNs);
  // A gap after the stretch is a second gap.
  now += StandAside::kOneStretchNs;
  s.CallerPolled(now, Busy());
  s.CallerPolled(now + 2 * kMs, Busy());
  EXPECT_TRUE(s.Overlapping(now + 2 * kMs));
}

// Verifies the thread's own sighting: taking over from a caller that
// polled and then neither polled again nor slept, with work in flight,
// counts as a gap, and two such take-overs mark an overlapping program.
// With nothing in flight they do not.
TEST(StandAsideTest, TakeOverFromAnAbsentCallerIsAGap) {
  for (bool busy : {true, false}) {
    StandAside s;
    int64_t now = kStart;
    s.CallerPolled(now, Busy());
    now += 2 * kMs;  // Absent for 2 ms: past the 1 ms interval.
    ASSERT_TRUE(ThreadTurn(s, now, kPolls, busy).took_over);
    EXPECT_FALSE(s.Overlapping(now));
    s.CallerPolled(now + 10'000, Idle());  // Back, with nothing to do.
    now += kS;
    ASSERT_TRUE(ThreadTurn(s, now, kPolls, busy).took_over);
    EXPECT_EQ(s.Overlapping(now), busy) << busy;
  }
}

// Verifies Restart: back from idling, the interval starts at 1 ms.
TEST(StandAsideTest, RestartAfterIdle) {
  StandAside s;
  BackOff(s, kStart, StandAside::kMostNs);
  ASSERT_EQ(s.interval_ns(), StandAside::kMostNs);
  s.Restart();
  EXPECT_EQ(s.interval_ns(), StandAside::kCallerPollingNs);
}

}  // namespace
}  // namespace relay
