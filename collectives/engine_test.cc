// ScheduleEngine's choices that are not schedules: the pipeline segment it
// derives from a transport's latency and bandwidth, and RELAY_SEGMENT_BYTES
// overriding it.
#include "collectives/engine.h"

#include <cstdlib>

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

}  // namespace
}  // namespace relay
