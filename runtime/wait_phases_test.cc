// File: runtime/wait_phases_test.cc
//
// When PollBeforeSleeping gives the core away. The yields are counted
// through its `yield` hook, which gives nothing away here.
#include "runtime/wait_phases.h"

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

// Reports `polls_left` polls of the given kind, then done.
struct ScriptedPoll {
  WaitPoll kind;
  int polls_left;
  WaitPoll operator()() {
    return polls_left-- > 0 ? kind : WaitPoll::kDone;
  }
};

struct Outcome {
  int polls = 0;
  int yields = 0;
};

// Waits through 20,000 polls that report `kind`, far more than a spin
// budget holds. A preemption longer than the yield budget between two polls
// may end the wait early on a loaded machine, so only the yields are
// checked, against the polls made.
Outcome Wait(WaitPoll kind, std::chrono::nanoseconds spin) {
  Outcome out;
  ScriptedPoll poll{kind, 20000};
  PollBeforeSleeping(
      [&] {
        ++out.polls;
        return poll();
      },
      [] {}, spin, absl::Now() + absl::Seconds(30), [&] { ++out.yields; });
  return out;
}

TEST(WaitPhasesTest, WaiterWithItsOwnCoreDoesNotYieldWhileWorkMoves) {
  ASSERT_TRUE(RequestState::HasCoreOfItsOwn(RequestState::kOwnCoreSpinBudget));
  const Outcome out = Wait(WaitPoll::kBusy, RequestState::kOwnCoreSpinBudget);
  EXPECT_GT(out.polls, 1000);
  EXPECT_EQ(out.yields, 0);
}

TEST(WaitPhasesTest, WaiterSharingItsCoreYieldsNowAndThenWhileWorkMoves) {
  ASSERT_FALSE(RequestState::HasCoreOfItsOwn(RequestState::kDefaultSpinBudget));
  const Outcome out = Wait(WaitPoll::kBusy, RequestState::kDefaultSpinBudget);
  EXPECT_GT(out.polls, 1000);
  // Every 16th busy poll of the yield phase, which follows 0.5 us of spin.
  EXPECT_GT(out.yields, 0);
  EXPECT_LE(out.yields, out.polls / 16);
}

TEST(WaitPhasesTest, IdlePollsYieldWhetherOrNotTheWaiterHasItsOwnCore) {
  for (const std::chrono::nanoseconds spin :
       {RequestState::kOwnCoreSpinBudget, RequestState::kDefaultSpinBudget}) {
    const Outcome out = Wait(WaitPoll::kIdle, spin);
    // The spin polls without yielding (a few hundred polls at most);
    // every idle poll after it yields, thousands within the yield budget.
    EXPECT_GT(out.yields, out.polls / 2) << spin.count() << " ns spin";
  }
}

}  // namespace
}  // namespace relay
