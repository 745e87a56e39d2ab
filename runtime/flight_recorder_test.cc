#include "runtime/flight_recorder.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Records are written without a lock and read by Snapshot while a rank
// writes: every entry a reader sees must be whole. Each collective's fields
// are derived from its sequence number, so a record mixed from two writes
// shows. Two writers, as when one thread starts collectives and another
// completes them.
TEST(FlightRecorderTest, SnapshotsDuringWritesSeeWholeRecords) {
  constexpr uint64_t kCollectives = 20000;
  FlightRecorder r(16);
  auto args_of = [](uint64_t s) {
    CollectiveArgs a = Args(s % 2 == 0 ? CollectiveKind::kAllReduce
                                       : CollectiveKind::kBroadcast,
                            s);
    a.send.count = a.recv.count = 1 + s % 1000;
    a.root = static_cast<int>(s % 4);
    return a;
  };
  std::atomic<uint64_t> queued{0}, completed{0};
  std::atomic<bool> done{false};
  std::thread starter([&] {
    for (uint64_t s = 0; s < kCollectives; ++s) {
      // At most the ring's capacity in flight (the recorder's contract).
      while (s >= completed.load(std::memory_order_acquire) + 16) {
      }
      r.QueuedNanos(args_of(s), 4, static_cast<int64_t>(s) * 10);
      queued.store(s + 1, std::memory_order_release);
    }
  });
  std::thread completer([&] {
    for (uint64_t s = 0; s < kCollectives; ++s) {
      while (queued.load(std::memory_order_acquire) <= s) {
      }
      r.DoneNanos(s, s % 7 == 0 ? absl::InternalError(absl::StrCat("bad ", s))
                                : absl::OkStatus(),
                  static_cast<int64_t>(s) * 10 + 5);
      completed.store(s + 1, std::memory_order_release);
    }
    done.store(true);
  });
  int snapshots = 0;
  bool whole = true;
  while (!done.load() || snapshots == 0) {
    for (const FlightRecorder::Entry& e : r.Snapshot()) {
      const uint64_t s = e.sequence;
      const CollectiveArgs want = args_of(s);
      const bool fields_match =
          e.kind == want.kind && e.count == want.send.count &&
          e.root == (e.kind == CollectiveKind::kBroadcast ? want.root : -1) &&
          e.queued == absl::FromUnixNanos(static_cast<int64_t>(s) * 10);
      const bool outcome_matches =
          e.state == FlightRecorder::State::kQueued ||
          (e.finished == absl::FromUnixNanos(static_cast<int64_t>(s) * 10 + 5) &&
           (s % 7 == 0) == (e.state == FlightRecorder::State::kFailed) &&
           (e.state != FlightRecorder::State::kFailed ||
            e.message == absl::StrCat("bad ", s)));
      if (!fields_match || !outcome_matches) {
        ADD_FAILURE() << "mixed record for sequence " << s << ": count "
                      << e.count << ", root " << e.root << ", state "
                      << FlightStateName(e.state);
        whole = false;
        break;
      }
    }
    ++snapshots;
    if (!whole) break;
  }
  starter.join();
  completer.join();
  const std::vector<FlightRecorder::Entry> last = r.Snapshot();
  ASSERT_EQ(last.size(), 16u);
  EXPECT_EQ(last.back().sequence, kCollectives - 1);
  EXPECT_EQ(last.back().state, (kCollectives - 1) % 7 == 0
                                   ? FlightRecorder::State::kFailed
                                   : FlightRecorder::State::kCompleted);
}

}  // namespace
}  // namespace relay
