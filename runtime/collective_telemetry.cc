#include "runtime/collective_telemetry.h"

#include <utility>

namespace relay {
// The completion callback of a tracked collective: small enough for a
// callback's inline storage. Releases its slot when run or dropped.
class CollectiveTelemetry::SlotCallback {
 public:
  SlotCallback(CollectiveTelemetry* owner, size_t index)
      : owner_(owner), index_(index) {}
  SlotCallback(SlotCallback&& other) noexcept
      : owner_(std::exchange(other.owner_, nullptr)), index_(other.index_) {}
  SlotCallback& operator=(SlotCallback&&) = delete;
  ~SlotCallback() {
    if (owner_ != nullptr) {  // Dropped without running.
      owner_->Untrack(owner_->slots_[index_].ticket);
      Release();
    }
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

// The completion callback when every slot is busy: allocated, and, like
// SlotCallback, it tells the flight recorder when dropped without running.
class CollectiveTelemetry::HeapCallback {
 public:
  HeapCallback(std::shared_ptr<CollectiveTelemetry> owner, const Ticket& ticket)
      : owner_(std::move(owner)), ticket_(ticket) {}
  HeapCallback(HeapCallback&& other) noexcept
      : owner_(std::move(other.owner_)), ticket_(other.ticket_) {}
  HeapCallback& operator=(HeapCallback&&) = delete;
  ~HeapCallback() {
    if (owner_ != nullptr) owner_->Untrack(ticket_);
  }

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
  const absl::Time now = FastNow();
  if (recorder_ != nullptr) recorder_->Done(ticket.token, status, now);
  metrics_->Record(ticket.kind, ticket.bytes, now - ticket.start, status.ok());
}

CollectiveTelemetry::Ticket CollectiveTelemetry::Queue(
    const CollectiveArgs& args, int size, absl::Time start) {
  Ticket t;
  t.token = recorder_ != nullptr ? recorder_->Queued(args, size, start) : 0;
  t.bytes = PerRankCount(args, size) *
            DataTypeSize(args.send.count > 0 ? args.send.dtype
                                             : args.recv.dtype);
  t.start = start;
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
  if (recorder_ != nullptr) recorder_->Track(ticket.token, state.get());
  // Slots are tried in turn; one still busy (a long collective) is skipped.
  for (int tries = 0; tries < 4; ++tries) {
    const size_t index =
        next_slot_.fetch_add(1, std::memory_order_relaxed) % kSlots;
    Slot& slot = slots_[index];
    if (slot.busy.load(std::memory_order_acquire) ||
        slot.busy.exchange(true, std::memory_order_acquire)) {
      continue;
    }
    slot.keep_alive = shared_from_this();
    slot.ticket = ticket;
    // Registering the callback publishes the slot's fields to the thread
    // that runs it (the request's lock orders them).
    state->OnDone(SlotCallback(this, index));
    return;
  }
  // Every slot tried is busy: many collectives in flight. An allocated
  // callback then, as a general one would be.
  state->OnDone(HeapCallback(shared_from_this(), ticket));
}

void CollectiveTelemetry::Untrack(const Ticket& ticket) {
  if (recorder_ != nullptr) recorder_->Untrack(ticket.token);
}

void CollectiveTelemetry::Refused(const Ticket& ticket,
                                  const absl::Status& why) {
  if (recorder_ != nullptr) recorder_->Done(ticket.token, why, ticket.start);
  metrics_->Record(ticket.kind, ticket.bytes, absl::ZeroDuration(), false);
}

}  // namespace relay
