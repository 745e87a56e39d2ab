#include "runtime/request.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kSlack = absl::Milliseconds(100);
constexpr absl::Duration kLong = absl::Seconds(10);

// Verifies that callbacks added before or after Complete run exactly once.
TEST(RequestStateTest, CompleteRunsCallbacksExactlyOnce) {
  auto state = std::make_shared<RequestState>();
  int before = 0, after = 0;
  absl::Status seen_before, seen_after;
  state->OnDone([&](absl::Status s) {
    ++before;
    seen_before = s;
  });
  EXPECT_EQ(before, 0);
  EXPECT_FALSE(state->done());
  EXPECT_TRUE(state->Complete(absl::AbortedError("first")));
  EXPECT_TRUE(state->done());
  EXPECT_EQ(before, 1);
  EXPECT_EQ(seen_before, absl::AbortedError("first"));

  // Registered after completion: runs inline, once.
  state->OnDone([&](absl::Status s) {
    ++after;
    seen_after = s;
  });
  EXPECT_EQ(after, 1);
  EXPECT_EQ(seen_after, absl::AbortedError("first"));

  // A second Complete runs nothing again.
  EXPECT_FALSE(state->Complete(absl::OkStatus()));
  EXPECT_EQ(before, 1);
  EXPECT_EQ(after, 1);
}

// A recorder (OnCompleting) has finished when a waiter on another thread
// sees the request done, however slow it is; an OnDone callback may still be
// running then. This is what lets a rank read its metrics right after Wait
// (loopback_metrics_test failed in CI when they were written by a callback).
TEST(RequestStateTest, RecordersFinishBeforeAWaiterSeesDone) {
  auto state = std::make_shared<RequestState>();
  std::atomic<int> recorded{0};
  std::atomic<bool> callback_started{false};
  std::atomic<bool> release_callback{false};
  state->OnCompleting([&](absl::Status s) {
    EXPECT_FALSE(state->done());  // Not yet published.
    absl::SleepFor(absl::Milliseconds(30));
    if (s.ok()) recorded.fetch_add(1);
  });
  state->OnDone([&](absl::Status) {
    EXPECT_EQ(recorded.load(), 1);  // Recorders first.
    callback_started = true;
    while (!release_callback.load()) absl::SleepFor(absl::Milliseconds(1));
  });
  std::thread completer([&] { state->Complete(absl::OkStatus()); });
  Request r(state);
  EXPECT_TRUE(r.Wait(kLong).ok());
  EXPECT_EQ(recorded.load(), 1);
  release_callback = true;
  completer.join();
  EXPECT_TRUE(callback_started.load());

  // Registered once the outcome is decided: inline, once, with it.
  absl::Status late;
  int late_runs = 0;
  state->OnCompleting([&](absl::Status s) {
    late = s;
    ++late_runs;
  });
  EXPECT_EQ(late_runs, 1);
  EXPECT_TRUE(late.ok());
  EXPECT_FALSE(state->Complete(absl::CancelledError("again")));
  EXPECT_EQ(recorded.load(), 1);
  EXPECT_EQ(late_runs, 1);
}

// The same through MarkDone, which transports use to publish a batch of
// completions before running any callback.
TEST(RequestStateTest, MarkDoneRunsRecordersAndHandsBackCallbacks) {
  auto state = std::make_shared<RequestState>();
  absl::Status recorded = absl::UnknownError("not run");
  int callbacks = 0;
  state->OnCompleting([&](absl::Status s) { recorded = s; });
  state->OnDone([&](absl::Status) { ++callbacks; });
  DoneCallbacks to_run;
  ASSERT_TRUE(state->MarkDone(absl::AbortedError("peer left"), &to_run));
  EXPECT_EQ(recorded, absl::AbortedError("peer left"));
  EXPECT_TRUE(state->done());
  EXPECT_EQ(callbacks, 0);
  ASSERT_EQ(to_run.size(), 1u);
  std::move(to_run[0])(state->status());
  EXPECT_EQ(callbacks, 1);
}

// Verifies that a second Complete returns false and keeps the first status.
TEST(RequestStateTest, SecondCompleteKeepsFirstStatus) {
  auto state = std::make_shared<RequestState>();
  EXPECT_TRUE(state->Complete(absl::UnavailableError("rank 3 lost")));
  EXPECT_FALSE(state->Complete(absl::OkStatus()));
  EXPECT_FALSE(state->Complete(absl::CancelledError("late")));
  EXPECT_EQ(state->status(), absl::UnavailableError("rank 3 lost"));
  Request r(state);
  EXPECT_EQ(r.Wait(kLong), absl::UnavailableError("rank 3 lost"));
  EXPECT_TRUE(r.Test());
  EXPECT_EQ(r.status(), absl::UnavailableError("rank 3 lost"));
}

// Verifies that Wait(timeout) on a stuck request is DeadlineExceeded on time.
TEST(RequestTest, WaitTimeoutOnNeverCompletedRequest) {
  Request r(std::make_shared<RequestState>());
  for (absl::Duration timeout :
       {absl::ZeroDuration(), absl::Milliseconds(1), absl::Milliseconds(50),
        absl::Milliseconds(300)}) {
    const absl::Time start = absl::Now();
    absl::Status s = r.Wait(timeout);
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_GE(took, timeout);
    EXPECT_LT(took, timeout + kSlack) << "timeout " << timeout;
  }
  // Still in flight: a timed-out Wait leaves it pending, and it can still
  // complete afterwards.
  EXPECT_FALSE(r.Test());
  EXPECT_TRUE(r.state()->Complete(absl::OkStatus()));
  EXPECT_TRUE(r.Wait(kLong).ok());
}

// Verifies that Wait() with no argument waits until the state's own deadline.
TEST(RequestTest, WaitUsesStateDeadline) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Milliseconds(150);
  Request r(std::make_shared<RequestState>(deadline));
  EXPECT_EQ(r.state()->deadline(), deadline);
  absl::Status s = r.Wait();
  const absl::Time end = absl::Now();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(end, deadline);
  EXPECT_LT(end, deadline + kSlack);

  // A deadline already in the past fails at once.
  Request past(std::make_shared<RequestState>(absl::Now() - absl::Seconds(1)));
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(past.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - t0, kSlack);
}

// Verifies that a completion from another thread wakes a sleeping waiter.
TEST(RequestTest, CompletionFromAnotherThreadWakesSleepingWaiter) {
  for (int round = 0; round < 5; ++round) {
    auto state = std::make_shared<RequestState>();
    Request r(state);
    const absl::Duration delay = absl::Milliseconds(30 + 10 * round);
    const absl::Time start = absl::Now();
    std::thread completer([state, delay, round] {
      absl::SleepFor(delay);  // Well past the 20 us spin.
      state->Complete(absl::InternalError(absl::StrCat("round ", round)));
    });
    absl::Status s = r.Wait(kLong);
    const absl::Duration took = absl::Now() - start;
    completer.join();
    EXPECT_EQ(s, absl::InternalError(absl::StrCat("round ", round)));
    EXPECT_GE(took, delay);
    EXPECT_LT(took, delay + kSlack);
  }
}

// Verifies that several threads sleeping in Wait on one request all wake.
TEST(RequestTest, CompletionWakesEveryWaiter) {
  auto state = std::make_shared<RequestState>();
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([state, &woke] {
      Request r(state);
      if (r.Wait(kLong).ok()) woke.fetch_add(1);
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  state->Complete(absl::OkStatus());
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 4);
}

// A transport's completion record, with the on-the-spot completion open;
// `asleep` turns true once a waiter has gone to sleep on it.
class SpotCompleted : public RequestState {
 public:
  using RequestState::CompleteIfNothingToRun;
  std::atomic<bool> asleep{false};

 protected:
  // Wait counts itself among the sleepers before it first calls this.
  void Sleep(std::chrono::nanoseconds timeout) override {
    asleep.store(true);
    RequestState::Sleep(timeout);
  }
};

// Verifies that a request with nothing registered completes on the spot,
// taking the status, and that a second outcome changes nothing.
TEST(RequestStateTest, CompleteIfNothingToRunCompletesAQuietRequest) {
  SpotCompleted state;
  absl::Status status = absl::DataLossError("spot");
  EXPECT_TRUE(state.CompleteIfNothingToRun(status));
  EXPECT_TRUE(state.done());
  EXPECT_EQ(state.status(), absl::DataLossError("spot"));
  absl::Status later = absl::InternalError("later");
  EXPECT_TRUE(state.CompleteIfNothingToRun(later));  // Decided already.
  EXPECT_EQ(state.status(), absl::DataLossError("spot"));
  int ran = 0;
  state.OnDone([&](absl::Status s) {  // Registered after: runs inline.
    EXPECT_EQ(s, absl::DataLossError("spot"));
    ++ran;
  });
  EXPECT_EQ(ran, 1);
}

// Verifies that a registered callback or recorder makes it decline, leaving
// the status with the caller, whose Complete() then runs them.
TEST(RequestStateTest, CompleteIfNothingToRunLeavesCallbacksToComplete) {
  for (bool recorder : {false, true}) {
    SCOPED_TRACE(recorder ? "recorder" : "callback");
    SpotCompleted state;
    int ran = 0;
    if (recorder) {
      state.OnCompleting([&](absl::Status) { ++ran; });
    } else {
      state.OnDone([&](absl::Status) { ++ran; });
    }
    absl::Status status = absl::DataLossError("kept");
    EXPECT_FALSE(state.CompleteIfNothingToRun(status));
    EXPECT_FALSE(state.done());
    EXPECT_EQ(status, absl::DataLossError("kept"));
    EXPECT_EQ(ran, 0);
    EXPECT_TRUE(state.Complete(std::move(status)));
    EXPECT_EQ(ran, 1);
    EXPECT_EQ(state.status(), absl::DataLossError("kept"));
  }
}

// Verifies that it declines while a waiter sleeps (the wake-up is a system
// call, left to Complete after the caller's lock), and that Complete then
// wakes it.
TEST(RequestStateTest, CompleteIfNothingToRunLeavesASleeperToComplete) {
  auto state = std::make_shared<SpotCompleted>();
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_EQ(Request(state).Wait(kLong), absl::DataLossError("woken"));
    returned.store(true);
  });
  // Past the waiter's 0.5 us spin and 200 us of yielding polls: asleep.
  // Waited for, not assumed after a fixed delay: on a loaded machine the
  // waiter's thread may not have started by then.
  const absl::Time until = absl::Now() + kLong;
  while (!state->asleep.load() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!state->asleep.load()) {
    state->Complete(absl::DataLossError("woken"));
    waiter.join();
    FAIL() << "the waiter never went to sleep";
  }
  absl::Status status = absl::DataLossError("woken");
  EXPECT_FALSE(state->CompleteIfNothingToRun(status));
  EXPECT_FALSE(state->done());
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(returned.load());
  EXPECT_TRUE(state->Complete(std::move(status)));
  waiter.join();
  EXPECT_TRUE(returned.load());
}

// Verifies that an empty Request is Test()-true and Wait-FailedPrecondition.
TEST(RequestTest, EmptyRequest) {
  Request r;
  EXPECT_FALSE(r.valid());
  EXPECT_TRUE(r.Test());
  EXPECT_EQ(r.Wait().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.Wait(absl::Milliseconds(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  int calls = 0;
  r.OnDone([&](absl::Status s) {
    ++calls;
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  });
  EXPECT_EQ(calls, 1);
}

// Verifies that Test() drives a subclass's Progress() and reports completion.
TEST(RequestTest, TestDrivesProgress) {
  class Polled : public RequestState {
   public:
    int polls = 0;

   protected:
    bool Progress() override {
      if (++polls == 3) Complete(absl::OkStatus());
      return true;
    }
  };
  auto state = std::make_shared<Polled>();
  Request r(state);
  EXPECT_FALSE(r.Test());
  EXPECT_FALSE(r.Test());
  EXPECT_TRUE(r.Test());
  EXPECT_TRUE(r.Test());
  EXPECT_EQ(state->polls, 3);
  EXPECT_TRUE(r.status().ok());
}

// Verifies that status() is OK while pending and the outcome once done.
TEST(RequestTest, StatusBeforeAndAfterCompletion) {
  auto state = std::make_shared<RequestState>();
  Request r(state);
  EXPECT_TRUE(r.status().ok());
  state->Complete(absl::DataLossError("x"));
  EXPECT_EQ(r.status(), absl::DataLossError("x"));
}

// Verifies that WhenAll of no requests is complete at once with OK.
TEST(WhenAllTest, Empty) {
  Request all = WhenAll({});
  EXPECT_TRUE(all.Test());
  EXPECT_TRUE(all.Wait(absl::Milliseconds(10)).ok());
}

// Verifies that WhenAll of one request completes with it, with its status.
TEST(WhenAllTest, Single) {
  auto state = std::make_shared<RequestState>();
  Request all = WhenAll({Request(state)});
  EXPECT_FALSE(all.Test());
  EXPECT_EQ(all.Wait(absl::Milliseconds(5)).code(),
            absl::StatusCode::kDeadlineExceeded);
  state->Complete(absl::ResourceExhaustedError("one"));
  EXPECT_TRUE(all.Test());
  EXPECT_EQ(all.Wait(kLong), absl::ResourceExhaustedError("one"));
}

// Verifies that WhenAll of many requests completes only after the last one.
TEST(WhenAllTest, ManyAllOk) {
  std::vector<std::shared_ptr<RequestState>> states;
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i) {
    states.push_back(std::make_shared<RequestState>());
    requests.emplace_back(states.back());
  }
  // One already complete before WhenAll sees it.
  states[5]->Complete(absl::OkStatus());
  Request all = WhenAll(requests);
  for (int i = 0; i < 16; ++i) {
    EXPECT_FALSE(all.Test()) << i;
    states[(i * 7) % 16]->Complete(absl::OkStatus());
  }
  EXPECT_TRUE(all.Test());
  EXPECT_TRUE(all.Wait(kLong).ok());
}

// Verifies that WhenAll reports the first error to arrive, not first listed.
TEST(WhenAllTest, FirstErrorWins) {
  std::vector<std::shared_ptr<RequestState>> states;
  std::vector<Request> requests;
  for (int i = 0; i < 4; ++i) {
    states.push_back(std::make_shared<RequestState>());
    requests.emplace_back(states.back());
  }
  Request all = WhenAll(requests);
  states[2]->Complete(absl::UnavailableError("second in list, first to fail"));
  states[0]->Complete(absl::CancelledError("later"));
  states[1]->Complete(absl::OkStatus());
  EXPECT_FALSE(all.Test());  // states[3] is still pending.
  states[3]->Complete(absl::InternalError("last"));
  EXPECT_EQ(all.Wait(kLong),
            absl::UnavailableError("second in list, first to fail"));
}

// Verifies that WhenAll completion from other threads is seen by a waiter.
TEST(WhenAllTest, CompletedFromOtherThreads) {
  std::vector<std::shared_ptr<RequestState>> states;
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    states.push_back(std::make_shared<RequestState>());
    requests.emplace_back(states.back());
  }
  Request all = WhenAll(requests, absl::Now() + kLong);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&states, i] {
      absl::SleepFor(absl::Milliseconds(i));
      states[i]->Complete(absl::OkStatus());
    });
  }
  EXPECT_TRUE(all.Wait(kLong).ok());
  for (std::thread& t : threads) t.join();
}

// Verifies that WhenAll's own deadline bounds Wait() with no argument.
TEST(WhenAllTest, OwnDeadline) {
  auto state = std::make_shared<RequestState>();
  const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
  Request all = WhenAll({Request(state)}, deadline);
  EXPECT_EQ(all.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now(), deadline + kSlack);
  state->Complete(absl::OkStatus());
}

// Verifies that Request::Completed is done at once with OK or a given status.
TEST(RequestTest, Completed) {
  Request ok = Request::Completed();
  EXPECT_TRUE(ok.valid());
  EXPECT_TRUE(ok.Test());
  EXPECT_TRUE(ok.Wait(absl::ZeroDuration()).ok());
  EXPECT_TRUE(ok.Wait().ok());
  Request bad = Request::Completed(absl::NotFoundError("nope"));
  EXPECT_TRUE(bad.Test());
  EXPECT_EQ(bad.Wait(absl::ZeroDuration()), absl::NotFoundError("nope"));
  int calls = 0;
  bad.OnDone([&](absl::Status s) {
    ++calls;
    EXPECT_EQ(s, absl::NotFoundError("nope"));
  });
  EXPECT_EQ(calls, 1);
}

// Verifies that StreamWait on a host request is Unimplemented.
TEST(RequestTest, StreamWaitUnimplemented) {
  Request r = Request::Completed();
  absl::Status s = r.StreamWait(nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), HasSubstr("Wait()"));
}

}  // namespace
}  // namespace relay
