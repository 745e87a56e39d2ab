// The conformance suite (testing/conformance.h) over the loopback transport
// with relay's own algorithms.
#include "collectives/direct.h"
#include "collectives/engine.h"
#include "gtest/gtest.h"
#include "testing/conformance.h"
#include "testing/host_stream_ops.h"
#include "testing/rank_harness.h"
#include "transports/loopback/loopback_transport.h"

namespace relay {
namespace {

class LoopbackConformanceTest
    : public ::testing::TestWithParam<ConformanceCase> {};

// Verifies that every rank's result matches the reference exactly.
TEST_P(LoopbackConformanceTest, MatchesReference) {
  static LoopbackTransportFactory factory;
  static ScheduleEngine engine;
  absl::Status status = RunConformanceCase(GetParam(), factory, engine);
  EXPECT_TRUE(status.ok()) << status;
}

INSTANTIATE_TEST_SUITE_P(Matrix, LoopbackConformanceTest,
                         ::testing::ValuesIn(ConformanceCases()),
                         ConformanceCaseName<
                             ::testing::TestParamInfo<ConformanceCase>>);

// The direct all_reduce and reduce split into parts over the ranks' threads
// (collectives/direct.h) run only above kDirectSplitBytes in all, which
// the standard matrix reaches for float32 sums alone: here every dtype and
// op of the matrix (its 53-element cases), with a count past the threshold
// that no part size divides, on 2 and 3 ranks.
std::vector<ConformanceCase> DirectSplitCases() {
  std::vector<ConformanceCase> out;
  for (ConformanceCase c : ConformanceCases(3)) {
    if (c.algorithm != Algorithm::kDirect || c.size < 2 ||
        (c.kind != CollectiveKind::kAllReduce &&
         c.kind != CollectiveKind::kReduce) ||
        c.count != 53) {
      continue;
    }
    c.count = kDirectSplitBytes / DataTypeSize(c.dtype) * 3 + 17;
    out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(DirectSplit, LoopbackConformanceTest,
                         ::testing::ValuesIn(DirectSplitCases()),
                         ConformanceCaseName<
                             ::testing::TestParamInfo<ConformanceCase>>);

// Verifies that the cases above exist and really split, so a change to the
// matrix or the threshold cannot leave them testing the one-thread path.
TEST(LoopbackDirectSplitCasesTest, EveryCaseSplits) {
  const std::vector<ConformanceCase> cases = DirectSplitCases();
  EXPECT_GE(cases.size(), 100u);
  for (const ConformanceCase& c : cases) {
    EXPECT_GT(DirectParts(c.kind, c.count * DataTypeSize(c.dtype), c.size), 1u)
        << c.Name();
  }
}

// The progress guarantee (testing/conformance.h): every algorithm's
// all_reduce on two communicators, completed by callbacks alone, posted and
// waited in orders that differ by rank.
TEST(LoopbackCallbackProgressTest, CompletesWithoutWaiters) {
  static LoopbackTransportFactory factory;
  static ScheduleEngine engine;
  for (int size : {2, 3, 4}) {
    absl::Status status = RunRanks(size, factory, engine, [](Communicator& c) {
      return RunCallbackProgressCaseOnRank(c, absl::Seconds(10));
    });
    EXPECT_TRUE(status.ok()) << size << " ranks: " << status;
  }
}

// The same suite with fused receive-and-reduce and the shared address space
// turned off: the executor's receive-then-reduce fallback and the cost model
// without direct algorithms, as transports without them will run.
class LoopbackPlainConformanceTest
    : public ::testing::TestWithParam<ConformanceCase> {};

// Verifies that every rank's result matches the reference exactly.
TEST_P(LoopbackPlainConformanceTest, MatchesReference) {
  static LoopbackTransportFactory factory(LoopbackOptions{false, false});
  static ScheduleEngine engine;
  absl::Status status = RunConformanceCase(GetParam(), factory, engine);
  EXPECT_TRUE(status.ok()) << status;
}

std::vector<ConformanceCase> PlainCases() {
  std::vector<ConformanceCase> out;
  for (ConformanceCase c : ConformanceCases(8)) {
    if (c.algorithm == Algorithm::kDirect || c.algorithm == Algorithm::kShm) {
      continue;
    }
    // Reductions exercise the fallback; the rest just need a sample.
    if (!IsReduction(c.kind) && c.size != 5) continue;
    out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, LoopbackPlainConformanceTest,
                         ::testing::ValuesIn(PlainCases()),
                         ConformanceCaseName<
                             ::testing::TestParamInfo<ConformanceCase>>);

// The same cases through the stream executor (collectives/stream_executor.h),
// which runs relay's algorithms on device buffers, here with host "streams"
// (testing/host_stream_ops.h): its lanes, lane streams, RecvReduce staging
// and scratch on every algorithm but direct, without a GPU.
class LoopbackStreamExecutorConformanceTest
    : public ::testing::TestWithParam<ConformanceCase> {};

// Verifies every rank's result, and that the run freed what it allocated.
TEST_P(LoopbackStreamExecutorConformanceTest, MatchesReference) {
  static LoopbackTransportFactory factory(LoopbackOptions{false, false});
  static auto* ops = new std::shared_ptr<HostStreamOps>(
      std::make_shared<HostStreamOps>());
  static ScheduleEngine engine(*ops);
  absl::Status status = RunConformanceCase(GetParam(), factory, engine);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ((*ops)->live_allocations(), 0);
  EXPECT_EQ((*ops)->live_streams(), 0);
  EXPECT_EQ((*ops)->live_events(), 0);
}

INSTANTIATE_TEST_SUITE_P(Matrix, LoopbackStreamExecutorConformanceTest,
                         ::testing::ValuesIn(PlainCases()),
                         ConformanceCaseName<
                             ::testing::TestParamInfo<ConformanceCase>>);

}  // namespace
}  // namespace relay

namespace relay {
namespace {

// RunConformanceCasesOnOneGroup, which the GPU suites use (one
// communicator per rank for the whole matrix): every case of one size on
// one loopback group matches the reference, and a case the group cannot
// run is reported with its rank and name and stops the run.
TEST(LoopbackOneGroupConformanceTest, RunsEveryCaseOfASizeOnOneGroup) {
  LoopbackTransportFactory factory;
  ScheduleEngine engine;
  std::vector<ConformanceCase> cases = ConformanceCasesForSize(3);
  ASSERT_GT(cases.size(), 100u);
  std::vector<std::string> failures;
  absl::Status s = RunConformanceCasesOnOneGroup(
      cases, 3, factory, engine, {}, nullptr, &failures);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(failures.empty()) << failures.front();

  cases.resize(2);
  cases[1].size = 4;  // Not this group's size.
  failures.clear();
  s = RunConformanceCasesOnOneGroup(cases, 3, factory, engine, {},
                                    nullptr, &failures);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ASSERT_EQ(failures.size(), 3u);  // Each rank, once.
  EXPECT_NE(failures[0].find(cases[1].Name()), std::string::npos)
      << failures[0];
}

}  // namespace
}  // namespace relay
