#include "runtime/metrics.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

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

// Writers add with plain loads and stores under a lock: none may be lost
// when several threads record at once (completions run on whichever thread
// finishes a collective). Without the lock this loses counts.
TEST(CollectiveMetricsTest, ConcurrentRecordsAllCount) {
  CollectiveMetrics m;
  constexpr int kThreads = 4, kRecords = 200000;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, &ready, t] {
      // All start together, so the records overlap.
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int i = 0; i < kRecords; ++i) {
        // Bytes and latency differ by thread and record; every fifth fails.
        m.RecordNanos(CollectiveKind::kAllReduce, 8 + t, 1000 * (i % 7),
                      i % 5 != 0);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const CollectiveMetrics::Counts c = m.Totals(CollectiveKind::kAllReduce);
  EXPECT_EQ(c.operations, uint64_t{kThreads} * kRecords);
  EXPECT_EQ(c.bytes, uint64_t{kRecords} * (8 + 9 + 10 + 11));
  EXPECT_EQ(c.errors, uint64_t{kThreads} * (kRecords / 5));
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
  EXPECT_TRUE(Has(t, "# TYPE relay_transport_device_bytes gauge")) << t;
  EXPECT_TRUE(Has(t, "relay_transport_device_bytes{rank=\"3\"} 0")) << t;
  m.SetTransportDeviceBytes(287309824);
  EXPECT_TRUE(Has(m.PrometheusText({{"rank", "3"}}),
                  "relay_transport_device_bytes{rank=\"3\"} 287309824"));
}

// Prometheus buckets are "less than or equal": a latency exactly at a bound
// counts in that bucket, a nanosecond more in the next; 0 and negative
// readings in the first, beyond 10 s only in +Inf.
TEST(CollectiveMetricsTest, BucketsIncludeTheirUpperBound) {
  CollectiveMetrics m;
  m.RecordNanos(CollectiveKind::kBarrier, 0, -5, true);
  m.RecordNanos(CollectiveKind::kBarrier, 0, 0, true);
  m.RecordNanos(CollectiveKind::kBarrier, 0, 2000, true);
  m.RecordNanos(CollectiveKind::kBarrier, 0, 2001, true);
  m.RecordNanos(CollectiveKind::kBarrier, 0, 10'000'000'001, true);
  const std::string t = m.PrometheusText({});
  const std::string bucket =
      "relay_collective_latency_seconds_bucket{collective=\"barrier\",size=\"1KiB\",le=";
  EXPECT_TRUE(Has(t, bucket + "\"1e-06\"} 2")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"2e-06\"} 3")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"5e-06\"} 4")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"10\"} 4")) << t;
  EXPECT_TRUE(Has(t, bucket + "\"+Inf\"} 5")) << t;
}

}  // namespace
}  // namespace relay
