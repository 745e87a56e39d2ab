// File: runtime/collective_telemetry.h
//
// CollectiveTelemetry: what a communicator records about each collective it
// starts (its flight record and its metrics), and the hook that records the
// completion of one still in flight.
//
// Why a class of its own: the completion is recorded by a callback on
// whichever thread completes the request, often another rank's, before the
// request is published as done (RequestState::OnCompleting), so a rank whose
// Wait returned reads its own metrics and flight record up to date. A lambda
// holding the recorder, the metrics and the call's figures is too large for
// a callback's inline storage, so it would be allocated by this rank and
// freed by the other: the allocator's per-thread caches then drain into a
// locked arena on every small collective, which measured as a futex call on
// one collective in six (2 loopback ranks, 8 B all_reduce). Here the figures
// go into a slot of a ring owned by the telemetry, and the callback holds
// only a pointer and a slot number. A slot is reused once its callback has
// run (or been dropped); when every slot is busy, Started falls back to an
// allocated callback.
//
// Lifetime and ownership. Created by Create() and shared: callbacks in
// flight hold a reference, so the telemetry outlives its communicator as
// long as they need it. Thread-safe.
//
// Example:
//   std::shared_ptr<CollectiveTelemetry> t =
//       CollectiveTelemetry::Create(recorder, metrics);
//   CollectiveTelemetry::Ticket ticket = t->Queue(args, size, FastNowNanos());
//   absl::StatusOr<Request> r = Start(args);
//   if (r.ok()) t->Started(ticket, *r); else t->Refused(ticket, r.status());
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

// One collective, from CollectiveTelemetry::Queue to its outcome.
struct CollectiveTicket {
  uint64_t token = 0;  // Its flight record entry.
  uint64_t bytes = 0;  // Per rank.
  int64_t start_ns = 0;  // Unix nanoseconds (FastNowNanos).
  CollectiveKind kind = CollectiveKind::kBarrier;
};

class CollectiveTelemetry
    : public std::enable_shared_from_this<CollectiveTelemetry> {
 public:
  // `recorder` may be null (no flight record); `metrics` may not.
  static std::shared_ptr<CollectiveTelemetry> Create(
      std::shared_ptr<FlightRecorder> recorder,
      std::shared_ptr<CollectiveMetrics> metrics);

  using Ticket = CollectiveTicket;
  // Records a collective about to be started (queued) at `start_ns` (Unix
  // nanoseconds, FastNowNanos), before anything is sent: a dump taken while
  // it starts, or hangs starting, shows it.
  Ticket Queue(const CollectiveArgs& args, int size, int64_t start_ns);
  // The collective started as `request`: records its outcome now if it is
  // done, else when it completes.
  void Started(const Ticket& ticket, const Request& request);
  // The collective failed to start.
  void Refused(const Ticket& ticket, const absl::Status& why);
  // The collective ran to `outcome` on the caller's thread (a blocking
  // call: Communicator::RunCollective), with no request to watch.
  void Ran(const Ticket& ticket, const absl::Status& outcome) {
    Finish(ticket, outcome);
  }

  // Runs after a started collective's failure is recorded (any code but
  // InvalidArgument, a call refused as given, and Cancelled, which an abort
  // already handled): the communicator's failure hook, so that a failure
  // inside any algorithm (the shared-memory exchange's among them) aborts,
  // writes the flight record and tells the peers, as the scheduled
  // algorithms' own hook does. Set before the first collective.
  void SetFailureHook(std::shared_ptr<const FailureHook> hook) {
    on_failure_ = std::move(hook);
  }

 private:
  struct Slot {
    std::atomic<bool> busy{false};
    // Set while busy: the telemetry keeps itself alive until the slot's
    // callback has run or been dropped, whatever happens to its owner.
    std::shared_ptr<CollectiveTelemetry> keep_alive;
    Ticket ticket;
  };
  class SlotCallback;
  class HeapCallback;
  static constexpr size_t kSlots = 64;

  CollectiveTelemetry(std::shared_ptr<FlightRecorder> recorder,
                      std::shared_ptr<CollectiveMetrics> metrics)
      : recorder_(std::move(recorder)), metrics_(std::move(metrics)) {}
  void Finish(const Ticket& ticket, const absl::Status& status);

  const std::shared_ptr<FlightRecorder> recorder_;
  const std::shared_ptr<CollectiveMetrics> metrics_;
  std::shared_ptr<const FailureHook> on_failure_;  // SetFailureHook's.
  Slot slots_[kSlots];
  // Where the next search for a free slot starts: a hint, read and written
  // without a read-modify-write (two threads starting at the same slot is
  // harmless: the slot's busy flag decides which takes it).
  std::atomic<uint64_t> next_slot_{0};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_COLLECTIVE_TELEMETRY_H_
