// Per-communicator metrics (runtime/metrics.h) end to end over loopback:
// every collective that starts is counted with its bytes, and the Prometheus
// text carries the communicator's labels.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/rank_harness.h"
#include "relay.h"

namespace relay {
namespace {

TEST(LoopbackMetricsTest, CountsCallsBytesAndFailures) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  absl::Status s = RunRanks(2, factory, engine, [](Communicator& comm) -> absl::Status {
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<Request> r =
          comm.AllReduce(ConstBuffer::Of(v), Buffer::Of(v), ReduceOp::kSum);
      if (!r.ok()) return r.status();
      if (absl::Status w = r->Wait(absl::Seconds(20)); !w.ok()) return w;
    }
    absl::StatusOr<Request> b = comm.Barrier();
    if (!b.ok() || !b->Wait(absl::Seconds(20)).ok()) return absl::InternalError("barrier");
    const CollectiveMetrics::Counts ar = comm.metrics().Totals(CollectiveKind::kAllReduce);
    EXPECT_EQ(ar.operations, 3u);
    EXPECT_EQ(ar.bytes, 3u * 4000u);
    EXPECT_EQ(ar.errors, 0u);
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kBarrier).operations, 1u);
    const std::string text = comm.MetricsText();
    const std::string want = "relay_collective_operations_total{rank=\"" +
                             std::to_string(comm.rank()) +
                             "\",size=\"2\",transport=\"loopback\",collective=\"all_reduce\"} 3\n";
    EXPECT_NE(text.find(want), std::string::npos) << text;
    // A call rejected before it starts (here: after Abort) is not counted.
    comm.Abort().IgnoreError();
    EXPECT_FALSE(comm.AllReduce(ConstBuffer::Of(v), Buffer::Of(v), ReduceOp::kSum).ok());
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kAllReduce).operations, 3u);
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace relay
