#include "runtime/flight_recorder.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace relay {
namespace {

CollectiveArgs Args(CollectiveKind kind, uint64_t sequence) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = {reinterpret_cast<const void*>(0x10), 100, DataType::kFloat32, Device::Host()};
  a.recv = {reinterpret_cast<void*>(0x20), 100, DataType::kFloat32, Device::Host()};
  a.sequence = sequence;
  a.root = 1;
  return a;
}

TEST(FlightRecorderTest, RecordsStatesInOrder) {
  FlightRecorder r(8);
  const uint64_t a = r.Queued(Args(CollectiveKind::kAllReduce, 0), 4);
  const uint64_t b = r.Queued(Args(CollectiveKind::kBroadcast, 1), 4);
  r.Queued(Args(CollectiveKind::kBarrier, 2), 4);
  r.Done(a, absl::OkStatus());
  r.Done(b, absl::DeadlineExceededError("too slow"));
  const std::vector<FlightRecorder::Entry> e = r.Snapshot();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].state, FlightRecorder::State::kCompleted);
  EXPECT_EQ(e[1].state, FlightRecorder::State::kFailed);
  EXPECT_EQ(e[1].code, absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(e[1].message, "too slow");
  EXPECT_EQ(e[1].root, 1);
  EXPECT_EQ(e[0].root, -1);
  EXPECT_EQ(e[2].state, FlightRecorder::State::kQueued);
  EXPECT_EQ(e[2].sequence, 2u);
}

// The ring keeps the last `capacity` entries; a late Done for an evicted
// entry changes nothing.
TEST(FlightRecorderTest, KeepsTheLastEntriesOnly) {
  FlightRecorder r(4);
  const uint64_t first = r.Queued(Args(CollectiveKind::kAllReduce, 0), 2);
  for (uint64_t s = 1; s < 10; ++s) r.Queued(Args(CollectiveKind::kAllReduce, s), 2);
  r.Done(first, absl::OkStatus());
  const std::vector<FlightRecorder::Entry> e = r.Snapshot();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.front().sequence, 6u);
  EXPECT_EQ(e.back().sequence, 9u);
  for (const auto& entry : e) EXPECT_EQ(entry.state, FlightRecorder::State::kQueued);
}

// A capacity that is not a power of two is rounded up (slots are found by
// mask), and 0 still keeps one entry.
TEST(FlightRecorderTest, CapacityRoundsUpToAPowerOfTwo) {
  FlightRecorder five(5), none(0);
  for (uint64_t s = 0; s < 10; ++s) {
    five.Queued(Args(CollectiveKind::kAllReduce, s), 2);
    none.Queued(Args(CollectiveKind::kAllReduce, s), 2);
  }
  const std::vector<FlightRecorder::Entry> e = five.Snapshot();
  ASSERT_EQ(e.size(), 8u);
  EXPECT_EQ(e.front().sequence, 2u);
  EXPECT_EQ(e.back().sequence, 9u);
  ASSERT_EQ(none.Snapshot().size(), 1u);
  EXPECT_EQ(none.Snapshot()[0].sequence, 9u);
}

TEST(FlightRecorderTest, JsonNamesEveryField) {
  FlightRecorder r(4);
  const uint64_t t = r.Queued(Args(CollectiveKind::kReduce, 7), 2);
  r.Done(t, absl::UnavailableError("rank 1 \"lost\""));
  const std::string json = r.ToJson(0, 2, "test");
  for (const char* want :
       {"\"rank\": 0", "\"size\": 2", "\"reason\": \"test\"", "\"sequence\": 7",
        "\"kind\": \"reduce\"", "\"dtype\": \"float32\"", "\"count\": 100",
        "\"root\": 1", "\"state\": \"failed\"", "\"code\": \"UNAVAILABLE\"",
        "\"message\": \"rank 1 \\\"lost\\\"\"", "\"finished\": \""}) {
    EXPECT_NE(json.find(want), std::string::npos) << want << " in " << json;
  }
}

}  // namespace
}  // namespace relay
