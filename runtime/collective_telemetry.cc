#include "runtime/collective_telemetry.h"

#include <utility>

namespace relay {
// The completion recorder of a collective in flight: small enough for a
// callback's inline storage. Releases its slot when run or dropped (a
// request destroyed without completing; its flight record stays queued).
class CollectiveTelemetry::SlotCallback {
 public:
  SlotCallback(CollectiveTelemetry* owner, size_t index)
      : owner_(owner), index_(index) {}
  SlotCallback(SlotCallback&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)), index_(other.index_) {}
  SlotCallback& operator=(SlotCallback&&) = delete;
  ~SlotCallback() {
    if (owner_ != nullptr) Release();  // Dropped without running.
  }

  void operator()(const absl::Status& status) {
    owner_->Finish(owner_->slots_[index_].ticket, status);
    Release();
  }

 private:
  void Release() {
    Slot& slot = owner_->slots_[index_];
    // Out of the slot before it is marked free (the next user sets it);
    // the telemetry may die with it, after its last use here.
    std::shared_ptr<CollectiveTelemetry> keep = std::move(slot.keep_alive);
    slot.busy.store(false, std::memory_order_release);
    owner_ = nullptr;
  }

  CollectiveTelemetry* owner_;
  size_t index_;
};

// The completion recorder when every slot is busy: allocated.
class CollectiveTelemetry::HeapCallback {
 public:
  HeapCallback(std::shared_ptr<CollectiveTelemetry> owner, const Ticket& ticket)
      : owner_(std::move(owner)), ticket_(ticket) {}

  void operator()(const absl::Status& status) {
    owner_->Finish(ticket_, status);
    owner_.reset();
  }

 private:
  std::shared_ptr<CollectiveTelemetry> owner_;
  Ticket ticket_;
};

std::shared_ptr<CollectiveTelemetry> CollectiveTelemetry::Create(
    std::shared_ptr<FlightRecorder> recorder,
    std::shared_ptr<CollectiveMetrics> metrics) {
  return std::shared_ptr<CollectiveTelemetry>(
      new CollectiveTelemetry(std::move(recorder), std::move(metrics)));
}

void CollectiveTelemetry::Finish(const Ticket& ticket,
                                 const absl::Status& status) {
  // Integer nanoseconds: absl's Time and Duration arithmetic is out of
  // line in Debian's shared Abseil, and this runs on every collective.
  const int64_t now_ns = FastNowNanos();
  if (recorder_ != nullptr) {
    recorder_->DoneNanos(ticket.token, status, now_ns);
  }
  metrics_->RecordNanos(ticket.kind, ticket.bytes, now_ns - ticket.start_ns,
                        status.ok());
  if (!status.ok() && on_failure_ != nullptr && *on_failure_ &&
      !absl::IsInvalidArgument(status) && !absl::IsCancelled(status)) {
    (*on_failure_)(status);
  }
}

CollectiveTelemetry::Ticket CollectiveTelemetry::Queue(
    const CollectiveArgs& args, int size, int64_t start_ns) {
  Ticket t;
  t.token = recorder_ != nullptr
                ? recorder_->QueuedNanos(args, size, start_ns)
                : 0;
  t.bytes = PerRankCount(args, size) *
            DataTypeSize(args.send.count > 0 ? args.send.dtype
                                             : args.recv.dtype);
  t.start_ns = start_ns;
  t.kind = args.kind;
  return t;
}

void CollectiveTelemetry::Started(const Ticket& ticket,
                                  const Request& request) {
  const std::shared_ptr<RequestState>& state = request.state();
  if (state == nullptr || state->done()) {
    // Done already (a small collective whose last rank is this one):
    // recorded here, with no callback at all.
    Finish(ticket, state == nullptr ? absl::OkStatus() : state->status());
    return;
  }
  // Recorded before the request is published as done (OnCompleting, not
  // OnDone): a rank whose Wait returned finds its metrics and flight record
  // up to date even when another rank's thread completed the request.
  // Slots are tried in turn; one still busy (a long collective) is skipped.
  uint64_t hint = next_slot_.load(std::memory_order_relaxed);
  for (int tries = 0; tries < 4; ++tries) {
    const size_t index = hint++ % kSlots;
    next_slot_.store(hint, std::memory_order_relaxed);
    Slot& slot = slots_[index];
    if (slot.busy.load(std::memory_order_acquire) ||
        slot.busy.exchange(true, std::memory_order_acquire)) {
      continue;
    }
    slot.keep_alive = shared_from_this();
    slot.ticket = ticket;
    // Registering the recorder publishes the slot's fields to the thread
    // that runs it (the request's lock orders them).
    state->OnCompleting(SlotCallback(this, index));
    return;
  }
  // Every slot tried is busy: many collectives in flight. An allocated
  // recorder then, as a general one would be.
  state->OnCompleting(HeapCallback(shared_from_this(), ticket));
}

void CollectiveTelemetry::Refused(const Ticket& ticket,
                                  const absl::Status& why) {
  if (recorder_ != nullptr) {
    recorder_->DoneNanos(ticket.token, why, ticket.start_ns);
  }
  metrics_->RecordNanos(ticket.kind, ticket.bytes, 0, false);
}

}  // namespace relay
