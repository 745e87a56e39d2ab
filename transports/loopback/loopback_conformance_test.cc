// The conformance suite (testing/conformance.h) over the loopback transport
// with relay's own algorithms.
#include "collectives/engine.h"
#include "gtest/gtest.h"
#include "testing/conformance.h"
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

}  // namespace
}  // namespace relay
