#include "runtime/collective_telemetry.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

CollectiveArgs Args(CollectiveKind kind, uint64_t sequence, uint64_t count) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = {reinterpret_cast<const void*>(0x10), count, DataType::kFloat32,
            Device::Host()};
  a.recv = {reinterpret_cast<void*>(0x20), count, DataType::kFloat32,
            Device::Host()};
  a.sequence = sequence;
  return a;
}

struct Fixture {
  std::shared_ptr<FlightRecorder> recorder = std::make_shared<FlightRecorder>(512);
  std::shared_ptr<CollectiveMetrics> metrics = std::make_shared<CollectiveMetrics>();
  std::shared_ptr<CollectiveTelemetry> telemetry =
      CollectiveTelemetry::Create(recorder, metrics);
};

// Verifies that a collective done by the time it started is recorded at
// once: completed in the flight record, counted with its bytes.
TEST(CollectiveTelemetryTest, RecordsADoneCollectiveAtOnce) {
  Fixture f;
  f.telemetry->Started(
      f.telemetry->Queue(Args(CollectiveKind::kAllReduce, 0, 25), 2,
                         FastNowNanos()),
      Request::Completed());
  const std::vector<FlightRecorder::Entry> e = f.recorder->Snapshot();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, FlightRecorder::State::kCompleted);
  const CollectiveMetrics::Counts c = f.metrics->Totals(CollectiveKind::kAllReduce);
  EXPECT_EQ(c.operations, 1u);
  EXPECT_EQ(c.bytes, 100u);
  EXPECT_EQ(c.errors, 0u);
}

// Verifies that collectives in flight are queued until they complete, on
// another thread, with their own outcome, including more at once than the
// telemetry has slots (the allocated fallback).
TEST(CollectiveTelemetryTest, RecordsCompletionsOfManyInFlight) {
  Fixture f;
  constexpr int kInFlight = 200;
  std::vector<std::shared_ptr<RequestState>> states;
  for (int i = 0; i < kInFlight; ++i) {
    states.push_back(std::make_shared<RequestState>());
    f.telemetry->Started(
        f.telemetry->Queue(Args(CollectiveKind::kBroadcast, i, i + 1), 2,
                           FastNowNanos()),
        Request(states.back()));
  }
  for (const FlightRecorder::Entry& e : f.recorder->Snapshot()) {
    EXPECT_EQ(e.state, FlightRecorder::State::kQueued);
  }
  std::thread completer([&] {
    for (int i = 0; i < kInFlight; ++i) {
      states[i]->Complete(i % 3 == 0 ? absl::UnavailableError("lost")
                                     : absl::OkStatus());
    }
  });
  completer.join();
  const std::vector<FlightRecorder::Entry> e = f.recorder->Snapshot();
  ASSERT_EQ(e.size(), static_cast<size_t>(kInFlight));
  uint64_t bytes = 0;
  for (int i = 0; i < kInFlight; ++i) {
    EXPECT_EQ(e[i].sequence, static_cast<uint64_t>(i));
    EXPECT_EQ(e[i].state, i % 3 == 0 ? FlightRecorder::State::kFailed
                                     : FlightRecorder::State::kCompleted)
        << i;
    bytes += 4 * (i + 1);
  }
  const CollectiveMetrics::Counts c = f.metrics->Totals(CollectiveKind::kBroadcast);
  EXPECT_EQ(c.operations, static_cast<uint64_t>(kInFlight));
  EXPECT_EQ(c.errors, static_cast<uint64_t>((kInFlight + 2) / 3));
  EXPECT_EQ(c.bytes, bytes);
}

// Verifies that slots come back both when their callback runs and when it
// is dropped unrun (a request destroyed without completing), so tracking
// never runs out: rounds of more collectives than slots, each completed or
// dropped, are all recorded.
TEST(CollectiveTelemetryTest, SlotsComeBackWhenCallbacksRunOrAreDropped) {
  Fixture f;
  uint64_t completed = 0;
  for (int round = 0; round < 10; ++round) {
    std::vector<std::shared_ptr<RequestState>> states;
    for (int i = 0; i < 100; ++i) {
      states.push_back(std::make_shared<RequestState>());
      f.telemetry->Started(
          f.telemetry->Queue(Args(CollectiveKind::kBarrier, round * 100 + i, 0),
                             2, FastNowNanos()),
          Request(states.back()));
    }
    for (int i = 0; i < 100; i += 2) {
      states[i]->Complete(absl::OkStatus());
      ++completed;
    }
    states.clear();  // The odd ones are dropped unrun.
  }
  EXPECT_EQ(f.metrics->Totals(CollectiveKind::kBarrier).operations, completed);
}

// Verifies that the telemetry lives on while a callback needs it: the
// owner lets go before the collective completes, the completion is still
// recorded, and the telemetry goes away after.
TEST(CollectiveTelemetryTest, OutlivesItsOwnerWhileCallbacksPend) {
  Fixture f;
  auto state = std::make_shared<RequestState>();
  f.telemetry->Started(
      f.telemetry->Queue(Args(CollectiveKind::kAllGather, 0, 1), 2,
                         FastNowNanos()),
      Request(state));
  std::weak_ptr<CollectiveTelemetry> weak = f.telemetry;
  f.telemetry.reset();
  EXPECT_FALSE(weak.expired());
  state->Complete(absl::OkStatus());
  EXPECT_TRUE(weak.expired());
  EXPECT_EQ(f.metrics->Totals(CollectiveKind::kAllGather).operations, 1u);
}

// Verifies that a refused collective is recorded as failed, with no bytes
// moved counted as an error.
TEST(CollectiveTelemetryTest, RecordsRefusals) {
  Fixture f;
  const CollectiveTelemetry::Ticket t =
      f.telemetry->Queue(Args(CollectiveKind::kReduce, 3, 4), 2,
                         FastNowNanos());
  EXPECT_EQ(f.recorder->Snapshot()[0].state, FlightRecorder::State::kQueued);
  f.telemetry->Refused(t, absl::InternalError("native call failed"));
  const std::vector<FlightRecorder::Entry> e = f.recorder->Snapshot();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].state, FlightRecorder::State::kFailed);
  EXPECT_EQ(e[0].message, "native call failed");
  EXPECT_EQ(f.metrics->Totals(CollectiveKind::kReduce).errors, 1u);
}

}  // namespace
}  // namespace relay
