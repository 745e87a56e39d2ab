#include "runtime/metrics.h"

#include <string>

#include "gtest/gtest.h"

namespace relay {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(CollectiveMetricsTest, CountsOperationsBytesAndErrors) {
  CollectiveMetrics m;
  m.Record(CollectiveKind::kAllReduce, 4096, absl::Microseconds(30), true);
  m.Record(CollectiveKind::kAllReduce, 4096, absl::Microseconds(40), false);
  m.Record(CollectiveKind::kBarrier, 0, absl::Microseconds(3), true);
  const CollectiveMetrics::Counts ar = m.Totals(CollectiveKind::kAllReduce);
  EXPECT_EQ(ar.operations, 2u);
  EXPECT_EQ(ar.bytes, 8192u);
  EXPECT_EQ(ar.errors, 1u);
  EXPECT_EQ(m.Totals(CollectiveKind::kBarrier).operations, 1u);
  EXPECT_EQ(m.Totals(CollectiveKind::kGather).operations, 0u);
}

TEST(CollectiveMetricsTest, SizeClasses) {
  EXPECT_EQ(CollectiveMetrics::SizeClass(0), 0);
  EXPECT_EQ(CollectiveMetrics::SizeClass(1024), 0);
  EXPECT_EQ(CollectiveMetrics::SizeClass(1025), 1);
  EXPECT_EQ(CollectiveMetrics::SizeClass(1 << 20), 2);
  EXPECT_EQ(CollectiveMetrics::SizeClass(uint64_t{1} << 30), 4);
  EXPECT_EQ(CollectiveMetrics::SizeClassLabel(4), "inf");
}

// The exposition format: HELP/TYPE lines, labelled counters, a cumulative
// histogram ending in +Inf with _sum and _count.
TEST(CollectiveMetricsTest, PrometheusText) {
  CollectiveMetrics m;
  m.Record(CollectiveKind::kAllReduce, 4096, absl::Microseconds(3), true);
  m.Record(CollectiveKind::kAllReduce, 4096, absl::Microseconds(30), true);
  m.Record(CollectiveKind::kAllReduce, 4096, absl::Seconds(60), false);
  const std::string t = m.PrometheusText({{"rank", "3"}});
  EXPECT_TRUE(Has(t, "# TYPE relay_collective_operations_total counter")) << t;
  EXPECT_TRUE(Has(t, "relay_collective_operations_total{rank=\"3\",collective=\"all_reduce\"} 3")) << t;
  EXPECT_TRUE(Has(t, "relay_collective_errors_total{rank=\"3\",collective=\"all_reduce\"} 1")) << t;
  EXPECT_TRUE(Has(t, "relay_collective_bytes_total{rank=\"3\",collective=\"barrier\"} 0")) << t;
  const std::string bucket =
      "relay_collective_latency_seconds_bucket{rank=\"3\",collective=\"all_reduce\",size=\"64KiB\",le=";
  EXPECT_TRUE(Has(t, bucket + "\"2e-06\"} 0")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"5e-06\"} 1")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"5e-05\"} 2")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"10\"} 2")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"+Inf\"} 3")) << t;
  EXPECT_TRUE(Has(t, "relay_collective_latency_seconds_count{rank=\"3\",collective=\"all_reduce\",size=\"64KiB\"} 3")) << t;
  // Unused size classes and collectives have no histogram lines.
  EXPECT_EQ(t.find("collective=\"gather\",size="), std::string::npos);
}

}  // namespace
}  // namespace relay
