// File: runtime/flight_recorder.h
//
// FlightRecorder: the last N collectives of one communicator (sequence,
// kind, dtype, count, root, algorithm, state, timestamps), kept at the cost
// of a few stores per call, and dumped as JSON when something goes wrong, so
// tools/relay_analyze can read every rank's dump and say which rank never
// entered which collective.
//
// States: queued (the call returned its request), completed, failed (with
// the status code). A collective that a rank never called is absent from
// that rank's record: the analyzer finds it by comparing sequence numbers
// across ranks.
//
// Lifetime and ownership. Owned by its Communicator and shared with the
// completion callbacks of operations in flight. Thread-safe.
//
// Cost. The ring is indexed by the collective's sequence number, which the
// communicator hands out with an atomic increment already, so a record
// needs no lock and no read-modify-write of its own: Queued and Done are
// plain stores, published by a per-record sequence lock that Snapshot
// reads (a spin lock taken twice per collective was a third of the atomic
// read-modify-writes of a small all_reduce). A
// failure's message, rare and not storable atomically, goes under a lock.
// Sequence numbers must be unique per recorder (one per collective of one
// communicator). A record can come out mixed only when more than the
// ring's capacity of collectives are in flight at once, so that one
// collective's completion and a later one's start write the same record.
//
// Example:
//   auto recorder = std::make_shared<FlightRecorder>(/*capacity=*/1024);
//   uint64_t token = recorder->Queued(args, size);  // args.sequence set
//   request.state()->OnCompleting(
//       [recorder, token](absl::Status s) { recorder->Done(token, s); });
//   std::string json = recorder->ToJson(rank, size, "timeout");
#ifndef RELAY_RUNTIME_FLIGHT_RECORDER_H_
#define RELAY_RUNTIME_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/collective.h"
#include "runtime/request.h"
#include "runtime/spin_lock.h"

namespace relay {

class FlightRecorder {
 public:
  enum class State : uint8_t { kQueued, kCompleted, kFailed };

  struct Entry {
    uint64_t sequence = 0;
    CollectiveKind kind = CollectiveKind::kBarrier;
    DataType dtype = DataType::kUint8;
    uint64_t count = 0;
    int32_t root = -1;
    Algorithm algorithm = Algorithm::kAuto;
    State state = State::kQueued;
    absl::StatusCode code = absl::StatusCode::kOk;
    std::string message;  // The failure's message (first 200 bytes).
    absl::Time queued;
    absl::Time finished;  // InfinitePast while queued.
  };

  // The last `capacity` collectives at least: the ring holds `capacity`
  // rounded up to a power of two (at least one), so finding an entry's
  // slot is a mask, not a 64-bit division (two a collective).
  explicit FlightRecorder(size_t capacity);

  // Records a collective queued at `now`; returns its token for Done()
  // (its sequence number). (The caller passes the time it read anyway: a
  // clock read is a noticeable part of a small collective.)
  uint64_t Queued(const CollectiveArgs& args, int size, absl::Time now) {
    return QueuedNanos(args, size, absl::ToUnixNanos(now));
  }
  uint64_t Queued(const CollectiveArgs& args, int size) {
    return QueuedNanos(args, size, FastNowNanos());
  }
  // The same with `now_ns` from FastNowNanos (what the communicator has):
  // the ring keeps integer nanoseconds, as absl's Time arithmetic is out of
  // line in Debian's shared Abseil, and converts only in Snapshot.
  uint64_t QueuedNanos(const CollectiveArgs& args, int size, int64_t now_ns);
  // Marks the entry of `token` completed or failed at `now` (a no-op if the
  // ring has since reused its slot).
  void Done(uint64_t token, const absl::Status& status, absl::Time now) {
    DoneNanos(token, status, absl::ToUnixNanos(now));
  }
  void Done(uint64_t token, const absl::Status& status) {
    DoneNanos(token, status, FastNowNanos());
  }
  void DoneNanos(uint64_t token, const absl::Status& status, int64_t now_ns);
  // The entries still held, oldest first.
  std::vector<Entry> Snapshot() const;
  // The oldest entry still queued (started, never finished), if any.
  std::optional<Entry> OldestQueued() const;
  // {"rank": R, "size": N, "dumped_at": "...", "reason": "...",
  //  "entries": [{"sequence": ..., "kind": "all_reduce", "dtype": ...,
  //  "count": ..., "root": ..., "algorithm": ..., "state": "queued",
  //  "code": "OK", "message": "...", "queued": "<RFC 3339>",
  //  "finished": "<RFC 3339>" or null},
  //  ...]}
  std::string ToJson(int rank, int size, absl::string_view reason) const;

 private:
  // An Entry as the ring holds it, times in nanoseconds since the epoch,
  // each field an atomic so Snapshot may read while a rank writes: a
  // writer makes `version` odd, stores the fields (release), and makes it
  // even again; a reader keeps a copy only if it saw the same even version
  // before and after. On x86 every one of these is a plain move.
  struct Record {
    std::atomic<uint64_t> version{0};
    std::atomic<uint64_t> sequence_plus_one{0};  // 0: never written.
    std::atomic<uint64_t> count{0};
    std::atomic<int64_t> queued_ns{0};
    std::atomic<int64_t> finished_ns{0};  // Meaningful once not queued.
    std::atomic<int32_t> root{-1};
    std::atomic<int32_t> code{0};  // absl::StatusCode.
    std::atomic<uint8_t> kind{0};
    std::atomic<uint8_t> dtype{0};
    std::atomic<uint8_t> algorithm{0};
    std::atomic<uint8_t> state{0};
  };
  // A failed collective's message (its first 200 bytes), by ring slot, and
  // the sequence number it belongs to (a later collective reusing the slot
  // leaves it stale, and Snapshot ignores it then).
  struct Message {
    uint64_t sequence = 0;
    std::string text;
  };

  Record& RecordOf(uint64_t sequence) { return ring_[sequence & mask_]; }
  // The version a writer starts from: even, so its last store leaves the
  // record readable even if another writer raced it (more collectives in
  // flight than the ring holds) and it read that one's odd value.
  static uint64_t EvenVersion(const Record& r) {
    return r.version.load(std::memory_order_relaxed) & ~uint64_t{1};
  }

  std::vector<Record> ring_;  // Its size is a power of two.
  const uint64_t mask_;       // ring_.size() - 1.
  mutable SpinLock messages_mu_;
  std::vector<Message> messages_;  // Guarded by messages_mu_; ring_'s size.
};

absl::string_view FlightStateName(FlightRecorder::State state);

}  // namespace relay

#endif  // RELAY_RUNTIME_FLIGHT_RECORDER_H_
