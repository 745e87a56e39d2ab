// ScheduleEngine's choices that are not schedules: the pipeline segment it
// derives from a transport's latency and bandwidth, and RELAY_SEGMENT_BYTES
// overriding it; and the per-thread schedule cache.
#include "collectives/engine.h"

#include <cstdlib>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/transport.h"

namespace relay {
namespace {

TransportCapabilities Caps(double latency_us, double bandwidth_gbps) {
  TransportCapabilities caps;
  caps.latency_us = latency_us;
  caps.bandwidth_gbps = bandwidth_gbps;
  return caps;
}

TEST(EngineSegmentTest, LowLatencyTransportsKeepTheDefault) {
  unsetenv("RELAY_SEGMENT_BYTES");
  ScheduleEngine engine;
  // Loopback's and polling UCX's figures: ten latencies are 100 KB.
  EXPECT_EQ(engine.SegmentBytes(Caps(1.0, 10.0)), size_t{1} << 20);
  EXPECT_EQ(engine.SegmentBytes(Caps(2.0, 5.0)), size_t{1} << 20);
}

TEST(EngineSegmentTest, HighLatencyTransportsGetLargerSegments) {
  unsetenv("RELAY_SEGMENT_BYTES");
  ScheduleEngine engine;
  // Blocking UCX: 100 us at 5 GB/s, ten latencies = 5 MB.
  EXPECT_EQ(engine.SegmentBytes(Caps(100.0, 5.0)), size_t{5'000'000});
  // Grows with both latency and bandwidth.
  EXPECT_GT(engine.SegmentBytes(Caps(200.0, 5.0)),
            engine.SegmentBytes(Caps(100.0, 5.0)));
  EXPECT_GT(engine.SegmentBytes(Caps(100.0, 10.0)),
            engine.SegmentBytes(Caps(100.0, 5.0)));
}

TEST(EngineSegmentTest, TheEnvironmentVariableWins) {
  setenv("RELAY_SEGMENT_BYTES", "65536", 1);
  ScheduleEngine engine;
  unsetenv("RELAY_SEGMENT_BYTES");
  EXPECT_EQ(engine.SegmentBytes(Caps(100.0, 5.0)), size_t{65536});
  EXPECT_EQ(engine.SegmentBytes(Caps(1.0, 10.0)), size_t{65536});
}

ScheduleParams Params(int rank, int size, size_t count) {
  ScheduleParams p;
  p.rank = rank;
  p.size = size;
  p.count = count;
  return p;
}

// A cached schedule is the one BuildSchedule makes for exactly those
// arguments: any field that differs gets a schedule of its own.
TEST(CachedScheduleTest, ReusesOnlyAnIdenticalCall) {
  const auto kind = CollectiveKind::kAllReduce;
  const auto rd = Algorithm::kRecursiveDoubling;
  const ScheduleParams p = Params(1, 4, 10);
  std::shared_ptr<const Schedule> a = CachedSchedule(kind, rd, p);
  EXPECT_EQ(CachedSchedule(kind, rd, p), a);
  EXPECT_EQ(a->DebugString(), BuildSchedule(kind, rd, p).DebugString());

  ScheduleParams in_place = p;
  in_place.in_place = true;
  ScheduleParams average = p;
  average.average = true;
  for (const ScheduleParams& q :
       {Params(2, 4, 10), Params(1, 5, 10), Params(1, 4, 11), in_place,
        average}) {
    std::shared_ptr<const Schedule> b = CachedSchedule(kind, rd, q);
    EXPECT_NE(b, a);
    EXPECT_EQ(b->DebugString(), BuildSchedule(kind, rd, q).DebugString());
  }
  std::shared_ptr<const Schedule> ring =
      CachedSchedule(kind, Algorithm::kRing, p);
  EXPECT_EQ(ring->DebugString(),
            BuildSchedule(kind, Algorithm::kRing, p).DebugString());
  EXPECT_EQ(CachedSchedule(CollectiveKind::kBroadcast, Algorithm::kAuto, p)
                ->DebugString(),
            BuildSchedule(CollectiveKind::kBroadcast, Algorithm::kAuto, p)
                .DebugString());

  // Per thread: another thread builds its own.
  std::shared_ptr<const Schedule> other;
  std::thread([&] { other = CachedSchedule(kind, rd, p); }).join();
  EXPECT_NE(other, a);
}

TEST(CachedScheduleTest, LargeSchedulesAreNotKept) {
  ScheduleParams p = Params(0, 16, 1 << 20);
  p.lanes = 64;  // 64 lanes of 30 ring steps.
  std::shared_ptr<const Schedule> a =
      CachedSchedule(CollectiveKind::kAllReduce, Algorithm::kRing, p);
  EXPECT_NE(CachedSchedule(CollectiveKind::kAllReduce, Algorithm::kRing, p), a);
}

}  // namespace
}  // namespace relay
