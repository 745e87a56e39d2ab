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

// A malformed variable fails every call with InvalidArgument naming it.
TEST(EngineConfigTest, MalformedVariablesAreInvalidArgument) {
  struct Bad {
    const char* name;
    const char* value;
  };
  for (const Bad& bad : {Bad{"RELAY_SEGMENT_BYTES", "lots"},
                         Bad{"RELAY_SEGMENT_BYTES", "-5"},
                         Bad{"RELAY_SEGMENT_BYTES", "0"},
                         Bad{"RELAY_PIPELINE_DEPTH", "0"},
                         Bad{"RELAY_PIPELINE_DEPTH", "65537"},
                         Bad{"RELAY_RING_BIDIRECTIONAL", "yes"},
                         Bad{"RELAY_RING_BIDIRECTIONAL", "2"}}) {
    setenv(bad.name, bad.value, 1);
    ScheduleEngine engine;
    unsetenv(bad.name);
    const absl::Status s =
        engine.Supports(CollectiveKind::kAllReduce, Algorithm::kRing);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(s.message().find(bad.name), absl::string_view::npos)
        << s.message();
  }
  for (const char* good : {"0", "1"}) {
    setenv("RELAY_RING_BIDIRECTIONAL", good, 1);
    ScheduleEngine engine;
    unsetenv("RELAY_RING_BIDIRECTIONAL");
    EXPECT_TRUE(
        engine.Supports(CollectiveKind::kAllReduce, Algorithm::kRing).ok());
  }
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
  ScheduleParams both_ways = p;
  both_ways.bidirectional = true;
  for (const ScheduleParams& q :
       {Params(2, 4, 10), Params(1, 5, 10), Params(1, 4, 11), in_place,
        average, both_ways}) {
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

// A transport that moves device memory only, as NCCL's does: it matches
// messages by posting order, so a step's receive and send must go out as one
// batch. It records which path the engine took.
class DeviceOnlyTransport final : public Transport {
 public:
  absl::string_view name() const override { return "device_only"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = false;
    caps.device_memory = true;
    caps.matches_tags = false;
    caps.stream_ordered = true;
    return caps;
  }
  absl::StatusOr<Request> Isend(int, Tag, ConstBuffer, absl::Time) override {
    ++single_posts;
    return Request::Completed();
  }
  absl::StatusOr<Request> Irecv(int, Tag, Buffer, absl::Time) override {
    ++single_posts;
    return Request::Completed();
  }
  absl::StatusOr<Request> PostBatch(absl::Span<const P2POp>, void*,
                                    absl::Time) override {
    ++batches;
    return Request::Completed();
  }
  void Abort(absl::Status) override {}

  int single_posts = 0;
  int batches = 0;
};

// A barrier has no buffers, so nothing in the call says "device"; on a
// device-only transport it must still run as device work (the stream
// executor, one batch per step). The host executor posted its receive and
// send separately, and over NCCL the two launches of each rank waited on
// each other for ever (the dissemination barrier case of the conformance
// suite on 2 and 4 H100s, 2026-11-26).
TEST(EngineDeviceOnlyTest, ABarrierNeverPostsSingleMessages) {
  auto transport = std::make_shared<DeviceOnlyTransport>();
  ScheduleEngine engine;
  CollectiveArgs args;
  args.kind = CollectiveKind::kBarrier;
  args.algorithm = Algorithm::kDissemination;
  absl::StatusOr<Request> r =
      engine.Start(transport, transport->capabilities(), args);
  EXPECT_EQ(transport->single_posts, 0);
  if (r.ok()) {
    // A GPU is present: the stream executor ran it, in batches.
    EXPECT_TRUE(r->Wait().ok());
    EXPECT_GT(transport->batches, 0);
  } else {
    // No GPU: refused as device work, before anything was posted.
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
        << r.status();
  }
}

}  // namespace
}  // namespace relay
