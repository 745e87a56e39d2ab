// The conformance suite (testing/conformance.h) over the loopback transport
// with relay's own algorithms.
#include "collectives/engine.h"
#include "gtest/gtest.h"
#include "testing/conformance.h"
#include "testing/host_stream_ops.h"
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
    if (c.algorithm == Algorithm::kDirect) continue;
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
