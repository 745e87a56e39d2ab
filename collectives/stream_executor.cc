#include "collectives/stream_executor.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/status_macros.h"
#include "runtime/tag.h"

namespace relay {
namespace {

// The run and its request in one object: everything the completions of the
// batches need lives here.
class StreamRun final : public RequestState,
                        public std::enable_shared_from_this<StreamRun> {
 public:
  StreamRun(ExecutionContext ctx, void* stream, std::shared_ptr<StreamOps> ops)
      : RequestState(ctx.deadline),
        ctx_(std::move(ctx)),
        stream_(stream),
        ops_(std::move(ops)),
        element_size_(DataTypeSize(ctx_.dtype)),
        // An average is a sum and then a Divide action (schedule.h).
        op_(ctx_.op == ReduceOp::kAvg ? ReduceOp::kSum : ctx_.op) {}

  ~StreamRun() override {
    if (final_event_ != nullptr) ops_->DeleteEvent(final_event_);
  }

  // Queues the whole schedule; errors are recorded and end the posting.
  void Post(const Schedule& schedule) {
    RecordError(PostAll(schedule));
    posted_.store(true, std::memory_order_release);
    // Batches that already completed could not finish the run while it was
    // posting; with none left in flight, finish it here (the GPU is at
    // most some local work away).
    if (pending_.load(std::memory_order_acquire) == 0) MaybeFinish(true);
  }

  // Callers get the request only after Post, so posting is over here.
  absl::Status StreamWait(void* cuda_stream) override {
    if (final_event_ == nullptr) {
      return done() ? status() : absl::InternalError("no completion event");
    }
    return ops_->StreamWaitEvent(cuda_stream, final_event_);
  }

 protected:
  bool Progress() override {
    MaybeFinish(false);
    return false;
  }

 private:
  struct Deferred {  // A RecvReduce's incoming data, reduced after the batch.
    void* incoming;
    Region local, dst;
  };

  absl::Status PostAll(const Schedule& schedule) {
    const size_t lanes = schedule.lanes.size();
    const size_t window = std::clamp<size_t>(ctx_.window, 1, std::max<size_t>(lanes, 1));
    if (schedule.scratch_count > 0) {
      RELAY_ASSIGN_OR_RETURN(
          scratch_, ops_->Allocate(schedule.scratch_count * element_size_, stream_));
    }
    std::vector<void*> lane_streams;
    absl::Status status = Fork(window, &lane_streams);
    const size_t steps = schedule.MaxSteps();
    for (size_t k = 0; k < steps && status.ok(); ++k) {
      for (size_t l = 0; l < lanes && status.ok(); ++l) {
        const std::vector<Step>& lane = schedule.lanes[l].steps;
        if (k >= lane.size()) continue;
        status = PostStep(static_cast<int>(l), lane[k],
                          lane_streams[l % lane_streams.size()]);
      }
    }
    // Join and record the end even after an error: the request must not
    // complete before the work already queued has finished.
    status.Update(Join(lane_streams));
    if (scratch_ != nullptr) status.Update(ops_->Free(scratch_, stream_));
    absl::StatusOr<void*> end = ops_->NewEvent();
    if (!end.ok()) return end.status();
    if (absl::Status s = ops_->Record(*end, stream_); !s.ok()) {
      ops_->DeleteEvent(*end);
      return s;
    }
    final_event_ = *end;
    return status;
  }

  // Lane streams that start after the work queued on the caller's stream.
  absl::Status Fork(size_t window, std::vector<void*>* lane_streams) {
    RELAY_ASSIGN_OR_RETURN(void* start, ops_->NewEvent());
    absl::Status status = ops_->Record(start, stream_);
    for (size_t i = 0; i < window && status.ok(); ++i) {
      absl::StatusOr<void*> s = ops_->NewStream();
      if (!s.ok()) {
        status = s.status();
        break;
      }
      lane_streams->push_back(*s);
      status = ops_->StreamWaitEvent(*s, start);
    }
    ops_->DeleteEvent(start);
    return status;
  }

  // The caller's stream continues after every lane stream's work.
  absl::Status Join(const std::vector<void*>& lane_streams) {
    absl::Status status;
    for (void* s : lane_streams) {
      absl::StatusOr<void*> done = ops_->NewEvent();
      if (done.ok()) {
        absl::Status joined = ops_->Record(*done, s);
        if (joined.ok()) joined = ops_->StreamWaitEvent(stream_, *done);
        status.Update(joined);
        ops_->DeleteEvent(*done);
      } else {
        status.Update(done.status());
      }
      ops_->DeleteStream(s);
    }
    return status;
  }

  absl::Status PostStep(int lane, const Step& step, void* s) {
    const Tag tag = CollectiveTag(ctx_.sequence, lane);
    std::vector<P2POp> batch;
    std::vector<Deferred> deferred;
    absl::Status status;
    for (const Action& a : step.actions) {
      if (!a.is_communication()) continue;
      // Empty messages are posted too: a barrier is made of them.
      const size_t count = a.kind == Action::Kind::kSend ? a.src.count : a.dst.count;
      P2POp op;
      op.peer = a.peer;
      op.tag = tag;
      switch (a.kind) {
        case Action::Kind::kSend:
          op.kind = P2POp::Kind::kSend;
          op.data = View(a.src);
          break;
        case Action::Kind::kRecv:
          op.kind = P2POp::Kind::kRecv;
          op.data = View(a.dst);
          break;
        default: {  // kRecvReduce: no transport reduces on receipt here.
          void* incoming = nullptr;
          if (count > 0) {
            absl::StatusOr<void*> allocated =
                ops_->Allocate(count * element_size_, s);
            if (!allocated.ok()) {
              status = allocated.status();
              break;
            }
            incoming = *allocated;
            deferred.push_back({incoming, a.src, a.dst});
          }
          op.kind = P2POp::Kind::kRecv;
          op.data = {incoming, count, ctx_.dtype, ctx_.recv.device};
          break;
        }
      }
      if (!status.ok()) break;
      batch.push_back(op);
    }
    if (status.ok() && !batch.empty()) {
      absl::StatusOr<Request> posted =
          ctx_.transport->PostBatch(batch, s, ctx_.deadline);
      if (posted.ok()) {
        Track(*posted);
        status = ops_->WaitRequest(*posted, s);
      } else {
        status = posted.status();
      }
    }
    for (const Deferred& d : deferred) {
      if (status.ok()) {
        status = ops_->Reduce(ctx_.dtype, op_, Pointer(d.local), d.incoming,
                              Pointer(d.dst), d.dst.count, s);
      }
      // Freed on the lane stream, after the reduction (or the batch) that
      // reads it.
      status.Update(ops_->Free(d.incoming, s));
    }
    for (const Action& a : step.actions) {
      if (!status.ok()) break;
      if (a.dst.count == 0) continue;
      switch (a.kind) {
        case Action::Kind::kCopy:
          if (Pointer(a.src) != Pointer(a.dst)) {
            status = ops_->Copy(Pointer(a.dst), Pointer(a.src),
                                a.dst.count * element_size_, s);
          }
          break;
        case Action::Kind::kReduce:
          status = ops_->Reduce(ctx_.dtype, op_, Pointer(a.dst), Pointer(a.src),
                                Pointer(a.dst), a.dst.count, s);
          break;
        case Action::Kind::kDivide:
          status = ops_->Divide(ctx_.dtype, Pointer(a.dst), a.dst.count,
                                ctx_.transport->size(), s);
          break;
        default:
          break;
      }
    }
    return status;
  }

  void Track(Request& batch) {
    pending_.fetch_add(1, std::memory_order_acq_rel);
    batch.OnDone([run = shared_from_this()](absl::Status s) {
      run->RecordError(std::move(s));
      if (run->pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        run->MaybeFinish(true);
      }
    });
  }

  // Completes the request once posting is over, no batch is in flight and
  // the caller's stream has passed the end (waiting for that on the host
  // if `may_block`).
  void MaybeFinish(bool may_block) {
    if (done() || !posted_.load(std::memory_order_acquire) ||
        pending_.load(std::memory_order_acquire) != 0) {
      return;
    }
    if (final_event_ != nullptr && !ops_->EventDone(final_event_)) {
      if (!may_block) return;
      RecordError(ops_->Synchronize(final_event_));
    }
    if (finishing_.exchange(true, std::memory_order_acq_rel)) return;
    absl::Status status = FirstError();
    if (!status.ok() && ctx_.on_failure) (*ctx_.on_failure)(status);
    // Released before the request completes, while the caller still holds
    // the transport: the last reference must not go on a transport's own
    // thread (NCCL's watchdog runs completions), which would join itself
    // (see ScheduleRun::Finish). Posting is over: nothing reads it again.
    ctx_.transport.reset();
    Complete(std::move(status));
  }

  char* Pointer(const Region& r) const { return RegionAddress(ctx_, scratch_, r); }
  Buffer View(const Region& r) const {
    return {Pointer(r), r.count, ctx_.dtype, ctx_.recv.device};
  }

  void RecordError(absl::Status s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.ok()) error_ = std::move(s);
  }
  absl::Status FirstError() {
    std::lock_guard<std::mutex> lock(error_mu_);
    return error_;
  }

  ExecutionContext ctx_;  // Its transport is released by MaybeFinish.
  void* const stream_;
  const std::shared_ptr<StreamOps> ops_;
  const size_t element_size_;
  const ReduceOp op_;
  void* scratch_ = nullptr;      // Written while posting only.
  void* final_event_ = nullptr;  // Written before posted_ is released.
  std::atomic<bool> posted_{false};
  std::atomic<int> pending_{0};  // Batches in flight.
  std::atomic<bool> finishing_{false};
  std::mutex error_mu_;
  absl::Status error_;  // Guarded by error_mu_.
};

}  // namespace

Request ExecuteScheduleOnStream(Schedule schedule, ExecutionContext context,
                                void* stream, std::shared_ptr<StreamOps> ops) {
  std::shared_ptr<ActivityGate> gate = context.gate;
  auto run = std::make_shared<StreamRun>(std::move(context), stream,
                                         std::move(ops));
  // Inside the communicator's gate, as executor.h: an Abort waits until the
  // posting is over.
  if (gate != nullptr && !gate->Enter()) {
    return Request::Completed(absl::CancelledError("communicator aborted"));
  }
  run->Post(schedule);
  if (gate != nullptr) gate->Exit();
  return Request(run);
}

}  // namespace relay
