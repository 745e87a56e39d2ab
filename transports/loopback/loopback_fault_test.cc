// The fault-injecting transport (testing/fault_transport.h) over loopback: relay's algorithms stay
// correct under seeded delays and reordering, and a killed or stalled rank
// turns into errors on every rank within bounded time.
#include <atomic>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/engine.h"
#include "gtest/gtest.h"
#include "runtime/status_macros.h"
#include "testing/conformance.h"
#include "testing/fault_transport.h"
#include "testing/rank_harness.h"
#include "transports/loopback/loopback_transport.h"

namespace relay {
namespace {

TEST(FaultTransportTest, DelaysAndReorderingKeepEveryAlgorithmCorrect) {
  static LoopbackTransportFactory loopback(LoopbackOptions{false, false});
  static ScheduleEngine engine;
  const std::vector<ConformanceCase> cases = FaultSweepCases();
  ASSERT_GT(cases.size(), 40u);
  int64_t overtaken = 0, released = 0;
  for (uint64_t seed : {1, 2, 3}) {
    FaultPlan plan;
    plan.seed = seed;
    plan.max_delay = absl::Microseconds(200);
    FaultInjectingTransportFactory faulty(loopback, plan);
    for (const ConformanceCase& c : cases) {
      absl::Status s = RunConformanceCase(c, faulty, engine);
      EXPECT_TRUE(s.ok()) << c.Name() << " with " << plan.ToString() << ": " << s;
    }
    overtaken += faulty.stats().overtaken.load();
    released += faulty.stats().released.load();
  }
  // The faults really happened: operations overtook earlier ones.
  std::printf("%lld of %lld operations overtook an earlier one\n",
              static_cast<long long>(overtaken), static_cast<long long>(released));
  EXPECT_GT(released, 1000);
  EXPECT_GT(overtaken, released / 50) << overtaken << " of " << released;
}

// Messages on one (peer, tag) keep their order however they are delayed.
TEST(FaultTransportTest, NeverReordersOnePeerAndTag) {
  static LoopbackTransportFactory loopback;
  static ScheduleEngine engine;
  FaultPlan plan;
  plan.seed = 7;
  plan.delay_probability = 1.0;
  plan.max_delay = absl::Microseconds(500);
  FaultInjectingTransportFactory faulty(loopback, plan);
  constexpr int kMessages = 64;
  absl::Status s = RunRanks(2, faulty, engine, [](Communicator& comm) -> absl::Status {
    std::vector<int32_t> values(kMessages);
    std::vector<P2POp> ops;
    for (int i = 0; i < kMessages; ++i) {
      values[i] = comm.rank() == 0 ? i : -1;
      ops.push_back(comm.rank() == 0
                        ? P2POp::Send(ConstBuffer::Of(&values[i], 1), 1, 5)
                        : P2POp::Recv(Buffer::Of(&values[i], 1), 0, 5));
    }
    RELAY_ASSIGN_OR_RETURN(Request r, comm.BatchSendRecv(ops));
    RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(30)));
    for (int i = 0; i < kMessages; ++i) {
      if (values[i] != i) {
        return absl::InternalError(absl::StrCat("message ", i, " carried ", values[i]));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Runs `iterations` ring all_reduces on 4 ranks under `plan`; returns each
// rank's outcome and how long it took.
struct Outcome {
  absl::Status status;
  absl::Duration took;
};

std::vector<Outcome> RunLoop(const FaultPlan& plan, absl::Duration timeout) {
  static LoopbackTransportFactory loopback(LoopbackOptions{false, false});
  static ScheduleEngine engine;
  FaultInjectingTransportFactory faulty(loopback, plan);
  std::vector<Outcome> outcomes(4);
  CommunicatorOptions options;
  options.default_timeout = timeout;
  RunRanks(4, faulty, engine, [&](Communicator& comm) -> absl::Status {
    const absl::Time start = absl::Now();
    absl::Status result;
    std::vector<float> data(1000, 1.0f);
    CollectiveOptions ring;
    ring.algorithm = Algorithm::kRing;
    for (int i = 0; i < 20 && result.ok(); ++i) {
      absl::StatusOr<Request> r = comm.AllReduce(ConstBuffer::Of(data),
                                                 Buffer::Of(data), ReduceOp::kMax, ring);
      result = r.ok() ? r->Wait() : r.status();
    }
    outcomes[comm.rank()] = {result, absl::Now() - start};
    // A Wait that timed out leaves its operation in flight: abort before
    // `data` goes away (runtime/communicator.h).
    if (!result.ok()) comm.Abort().IgnoreError();
    return absl::OkStatus();
  }, options).IgnoreError();
  return outcomes;
}

// A rank killed at a seeded operation: it and every survivor fail, long
// before the 30 s timeout (loopback tells peers of an aborted rank).
TEST(FaultTransportTest, KilledRankIsAnErrorOnEverySurvivor) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    FaultPlan plan;
    plan.seed = seed;
    plan.failure = FaultPlan::Failure::kKill;
    plan.fail_rank = static_cast<int>(seed % 4);
    plan.fail_at_op = static_cast<int64_t>(seed * 7 % 40);
    const std::vector<Outcome> outcomes = RunLoop(plan, absl::Seconds(30));
    for (int r = 0; r < 4; ++r) {
      EXPECT_FALSE(outcomes[r].status.ok()) << "rank " << r << ", " << plan.ToString();
      EXPECT_LT(outcomes[r].took, absl::Seconds(2))
          << "rank " << r << ", " << plan.ToString() << ": " << outcomes[r].status;
    }
    EXPECT_TRUE(absl::IsUnavailable(outcomes[plan.fail_rank].status))
        << outcomes[plan.fail_rank].status;
  }
}

// A rank that stops posting: every rank's operation fails once its deadline
// passes (the stalled rank's own included), within the timeout plus 1 s.
TEST(FaultTransportTest, StalledRankIsADeadlineEverywhere) {
  FaultPlan plan;
  plan.seed = 11;
  plan.failure = FaultPlan::Failure::kStall;
  plan.fail_rank = 1;
  plan.fail_at_op = 9;
  const std::vector<Outcome> outcomes = RunLoop(plan, absl::Milliseconds(500));
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(outcomes[r].status.ok()) << "rank " << r;
    EXPECT_LT(outcomes[r].took, absl::Milliseconds(1500)) << "rank " << r;
  }
}

}  // namespace
}  // namespace relay
