// File: runtime/collective_telemetry.h
//
// CollectiveTelemetry: what a communicator records about each collective it
// starts (its flight record and its metrics), and the hook that records the
// completion of one still in flight.
//
// Why a class of its own: the completion is recorded by a callback on
// whichever thread completes the request, often another rank's. A lambda
// holding the recorder, the metrics and the call's figures is too large for
// a callback's inline storage, so it would be allocated by this rank and
// freed by the other: the allocator's per-thread caches then drain into a
// locked arena on every small collective, which measured as a futex call on
// one collective in six (2 loopback ranks, 8 B all_reduce). Here the figures
// go into a slot of a ring owned by the telemetry, and the callback holds
// only a pointer and a slot number. A slot is reused once its callback has
// run (or been dropped); when every slot is busy, Track falls back to an
// allocated callback.
//
// Lifetime and ownership. Created by Create() and shared: callbacks in
// flight hold a reference, so the telemetry outlives its communicator as
// long as they need it. Thread-safe.
//
// Example:
//   std::shared_ptr<CollectiveTelemetry> t =
//       CollectiveTelemetry::Create(recorder, metrics);
//   t->Track(args, size, start, request);  // records queued, and done later
#ifndef RELAY_RUNTIME_COLLECTIVE_TELEMETRY_H_
#define RELAY_RUNTIME_COLLECTIVE_TELEMETRY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/collective.h"
#include "runtime/flight_recorder.h"
#include "runtime/metrics.h"
#include "runtime/request.h"

namespace relay {

class CollectiveTelemetry
    : public std::enable_shared_from_this<CollectiveTelemetry> {
 public:
  // `recorder` may be null (no flight record); `metrics` may not.
  static std::shared_ptr<CollectiveTelemetry> Create(
      std::shared_ptr<FlightRecorder> recorder,
      std::shared_ptr<CollectiveMetrics> metrics);

  // A collective that started at `start`: records it as queued, and its
  // completion (now if `request` is done, else when it completes).
  void Track(const CollectiveArgs& args, int size, absl::Time start,
             const Request& request);
  // A collective refused after its sequence number was taken.
  void Refused(const CollectiveArgs& args, int size, absl::Time start,
               const absl::Status& why);

 private:
  struct Slot {
    std::atomic<bool> busy{false};
    // Set while busy: the telemetry keeps itself alive until the slot's
    // callback has run or been dropped, whatever happens to its owner.
    std::shared_ptr<CollectiveTelemetry> keep_alive;
    uint64_t token = 0;
    uint64_t bytes = 0;
    absl::Time start;
    CollectiveKind kind = CollectiveKind::kBarrier;
  };
  class SlotCallback;
  static constexpr size_t kSlots = 64;

  CollectiveTelemetry(std::shared_ptr<FlightRecorder> recorder,
                      std::shared_ptr<CollectiveMetrics> metrics)
      : recorder_(std::move(recorder)), metrics_(std::move(metrics)) {}
  void Finish(uint64_t token, uint64_t bytes, absl::Time start,
              CollectiveKind kind, const absl::Status& status);

  const std::shared_ptr<FlightRecorder> recorder_;
  const std::shared_ptr<CollectiveMetrics> metrics_;
  Slot slots_[kSlots];
  std::atomic<uint64_t> next_slot_{0};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_COLLECTIVE_TELEMETRY_H_
