#include "runtime/collective_telemetry.h"

#include <utility>

namespace relay {
namespace {

uint64_t BytesOf(const CollectiveArgs& args, int size) {
  return PerRankCount(args, size) *
         DataTypeSize(args.send.count > 0 ? args.send.dtype : args.recv.dtype);
}

}  // namespace

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
    if (owner_ != nullptr) Release();  // Dropped without running.
  }

  void operator()(const absl::Status& status) {
    const Slot& slot = owner_->slots_[index_];
    owner_->Finish(slot.token, slot.bytes, slot.start, slot.kind, status);
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

std::shared_ptr<CollectiveTelemetry> CollectiveTelemetry::Create(
    std::shared_ptr<FlightRecorder> recorder,
    std::shared_ptr<CollectiveMetrics> metrics) {
  return std::shared_ptr<CollectiveTelemetry>(
      new CollectiveTelemetry(std::move(recorder), std::move(metrics)));
}

void CollectiveTelemetry::Finish(uint64_t token, uint64_t bytes,
                                 absl::Time start, CollectiveKind kind,
                                 const absl::Status& status) {
  const absl::Time now = FastNow();
  if (recorder_ != nullptr) recorder_->Done(token, status, now);
  metrics_->Record(kind, bytes, now - start, status.ok());
}

void CollectiveTelemetry::Track(const CollectiveArgs& args, int size,
                                absl::Time start, const Request& request) {
  const uint64_t token =
      recorder_ != nullptr ? recorder_->Queued(args, size, start) : 0;
  const uint64_t bytes = BytesOf(args, size);
  const std::shared_ptr<RequestState>& state = request.state();
  if (state == nullptr || state->done()) {
    // Done already (a small collective whose last rank is this one):
    // recorded here, with no callback at all.
    Finish(token, bytes, start, args.kind,
           state == nullptr ? absl::OkStatus() : state->status());
    return;
  }
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
    slot.token = token;
    slot.bytes = bytes;
    slot.start = start;
    slot.kind = args.kind;
    // Registering the callback publishes the slot's fields to the thread
    // that runs it (the request's lock orders them).
    request.state()->OnDone(SlotCallback(this, index));
    return;
  }
  // Every slot tried is busy: many collectives in flight. An allocated
  // callback then, as a general one would be.
  request.state()->OnDone(
      [self = shared_from_this(), token, bytes, start,
       kind = args.kind](const absl::Status& status) {
        self->Finish(token, bytes, start, kind, status);
      });
}

void CollectiveTelemetry::Refused(const CollectiveArgs& args, int size,
                                  absl::Time start, const absl::Status& why) {
  const uint64_t token =
      recorder_ != nullptr ? recorder_->Queued(args, size, start) : 0;
  if (recorder_ != nullptr) recorder_->Done(token, why, start);
  metrics_->Record(args.kind, BytesOf(args, size), absl::ZeroDuration(),
                   false);
}

}  // namespace relay
