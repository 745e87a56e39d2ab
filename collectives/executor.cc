#include "collectives/executor.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/fixed_array.h"
#include "absl/container/inlined_vector.h"
#include "collectives/reduce.h"
#include "runtime/tag.h"

namespace relay {
namespace {

// A staging buffer for a fallback RecvReduce (see ScheduleRun::TakeStaging).
struct Staging {
  std::unique_ptr<char[]> bytes;
  size_t capacity = 0;
};

// Staging buffers kept between collectives, so that a loop of large
// all_reduces over a transport without fused receive-and-reduce does not
// map, fault in and unmap fresh memory on every call. Bounded: a handful
// of buffers (the pipeline depth of a few concurrent collectives).
class StagingCache {
 public:
  static StagingCache& Global() {
    static auto* cache = new StagingCache();
    return *cache;
  }
  bool Take(size_t bytes, Staging* out) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity >= bytes) {
        *out = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<long>(i));
        return true;
      }
    }
    return false;
  }
  void Give(Staging s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxBuffers) free_.push_back(std::move(s));
  }

 private:
  static constexpr size_t kMaxBuffers = 8;
  std::mutex mu_;
  std::vector<Staging> free_;  // Guarded by mu_.
};

// One run of a schedule, and the collective's request: one allocation per
// call (the run was a second object beside its request). Waiting on it
// drives the transport's progress.
class ScheduleRun final : public RequestState,
                          public std::enable_shared_from_this<ScheduleRun> {
 public:
  ~ScheduleRun() override { ReleaseMemory(); }

  ScheduleRun(std::shared_ptr<const Schedule> schedule, ExecutionContext ctx)
      : RequestState(ctx.deadline),
        schedule_(std::move(schedule)),
        ctx_(std::move(ctx)),
        transport_(ctx_.transport),
        element_size_(DataTypeSize(ctx_.dtype)),
        reduce_(GetReduceFn(ctx_.dtype, ctx_.op)),
        lanes_(schedule_->lanes.size()) {
    if (schedule_->scratch_count > 0) {
      scratch_.reset(new char[schedule_->scratch_count * element_size_]);
    }
    for (LaneState& lane : lanes_) lane.run = this;
  }

  Request Start() {
    Request out(shared_from_this());
    const size_t first = std::min(std::max<size_t>(ctx_.window, 1), lanes_.size());
    for (size_t l = 0; l < first; ++l) active_.push_back(l);
    next_lane_ = first;
    Kick();
    return out;
  }

 private:
  struct LaneState {
    ScheduleRun* run = nullptr;
    size_t step = 0;
    bool posted = false;
    std::atomic<int> pending{0};
    // Fallback RecvReduce: incoming bytes land in a staging buffer, reduced
    // after the step.
    struct Deferred {
      Staging incoming;
      Region local, dst;
    };
    absl::InlinedVector<Deferred, 1> deferred;
  };

  bool Progress() override {
    std::shared_ptr<Transport> t = transport_.lock();
    return t != nullptr && t->Progress();
  }
  void StoppedPolling() override {
    std::shared_ptr<Transport> t = transport_.lock();
    if (t != nullptr) t->StoppedPolling();
  }
  void StartedPolling() override {
    std::shared_ptr<Transport> t = transport_.lock();
    if (t != nullptr) t->StartedPolling();
  }
  void FinishedPolling() override {
    std::shared_ptr<Transport> t = transport_.lock();
    if (t != nullptr) t->FinishedPolling();
  }
  std::chrono::nanoseconds SpinBudget() const override {
    return ctx_.caps.wait_spin;
  }

  // The scratch and staging memory, given back once nothing can write into
  // it: the request (this object) may be held long after it completed.
  void ReleaseMemory() {
    for (Staging& st : staging_pool_) StagingCache::Global().Give(std::move(st));
    staging_pool_.clear();
    scratch_.reset();
  }

  // Several threads may complete requests at once; exactly one of them
  // advances the state machine, and re-runs it if more completions arrived
  // meanwhile (a kick counter instead of a lock held across the work, so an
  // inline completion during posting never deadlocks).
  void Kick() {
    if (kicks_.fetch_add(1, std::memory_order_acq_rel) != 0) return;
    // The whole drive runs inside the communicator's gate, so an Abort that
    // closes it waits until this thread has finished (the run completed)
    // and nothing here touches the buffers after Abort returns.
    const bool entered = ctx_.gate == nullptr || ctx_.gate->Enter();
    int seen = 1;
    do {
      if (entered) {
        Advance();
      } else if (!finished_) {
        Finish(absl::CancelledError("communicator aborted"));
      }
      seen = kicks_.fetch_sub(seen, std::memory_order_acq_rel) - seen;
    } while (seen != 0);
    if (entered && ctx_.gate != nullptr) ctx_.gate->Exit();
  }

  void Advance() {
    if (finished_) return;
    if (absl::Status error = FirstError(); !error.ok()) {
      Finish(std::move(error));
      return;
    }
    for (size_t i = 0; i < active_.size();) {
      const size_t l = active_[i];
      if (RunLane(l)) {
        ++i;
        continue;
      }
      // Lane finished: start the next one in its place.
      if (next_lane_ < lanes_.size()) {
        active_[i] = next_lane_++;
      } else {
        active_.erase(active_.begin() + static_cast<long>(i));
      }
    }
    if (absl::Status error = FirstError(); !error.ok()) {
      Finish(std::move(error));
    } else if (active_.empty()) {
      Finish(absl::OkStatus());
    }
  }

  // Moves lane `l` as far as it can go; false once it has run every step.
  bool RunLane(size_t l) {
    LaneState& lane = lanes_[l];
    const std::vector<Step>& steps = schedule_->lanes[l].steps;
    while (lane.step < steps.size()) {
      if (!lane.posted) {
        lane.posted = true;
        Post(l, steps[lane.step]);
      }
      if (lane.pending.load(std::memory_order_acquire) != 0) return true;
      if (!FirstError().ok()) return true;
      RunLocal(lane, steps[lane.step]);
      ++lane.step;
      lane.posted = false;
    }
    return false;
  }

  void Post(size_t l, const Step& step) {
    LaneState& lane = lanes_[l];
    lane.deferred.clear();
    // One extra count until every action is posted, so completions that
    // arrive inline cannot finish the step early.
    lane.pending.store(1, std::memory_order_relaxed);
    const Tag tag = CollectiveTag(ctx_.sequence, static_cast<int>(l));
    // Receives before sends: over UCX a message that finds its receive
    // posted lands in place, where one that arrives first waits in the
    // unexpected queue and is copied again (loopback copies once either
    // way). The order of one pair's sends, and of its receives, is
    // unchanged, which is all a transport without tags matches by.
    for (const Action& a : step.actions) {
      if (a.is_communication() && a.kind != Action::Kind::kSend) {
        PostOne(lane, a, tag);
      }
    }
    for (const Action& a : step.actions) {
      if (a.kind == Action::Kind::kSend) PostOne(lane, a, tag);
    }
    lane.pending.fetch_sub(1, std::memory_order_acq_rel);
  }

  void PostOne(LaneState& lane, const Action& a, Tag tag) {
    Transport& t = *ctx_.transport;
    absl::StatusOr<Request> posted;
    switch (a.kind) {
      case Action::Kind::kSend:
        posted = t.Isend(a.peer, tag, ConstRegion(a.src), ctx_.deadline);
        break;
      case Action::Kind::kRecv:
        posted = t.Irecv(a.peer, tag, MutableRegion(a.dst), ctx_.deadline);
        break;
      case Action::Kind::kRecvReduce:
        if (ctx_.caps.fused_recv_reduce) {
          posted = t.IrecvReduce(a.peer, tag, ConstRegion(a.src),
                                 MutableRegion(a.dst), reduce_,
                                 ctx_.deadline);
        } else {
          LaneState::Deferred d;
          d.incoming = TakeStaging(a.dst.count * element_size_);
          d.local = a.src;
          d.dst = a.dst;
          Buffer into{d.incoming.bytes.get(), a.dst.count, ctx_.dtype,
                      ctx_.recv.device};
          lane.deferred.push_back(std::move(d));
          posted = t.Irecv(a.peer, tag, into, ctx_.deadline);
        }
        break;
      default:
        return;
    }
    if (!posted.ok()) {
      RecordError(posted.status());
      return;
    }
    lane.pending.fetch_add(1, std::memory_order_relaxed);
    // A pointer to the lane that owns the whole run (aliasing): 16 bytes,
    // so the callback is stored inline, with no allocation per message.
    posted->OnDone([lane_ref = std::shared_ptr<LaneState>(
                        shared_from_this(), &lane)](absl::Status s) {
      ScheduleRun* run = lane_ref->run;
      if (!s.ok()) run->RecordError(std::move(s));
      lane_ref->pending.fetch_sub(1, std::memory_order_acq_rel);
      run->Kick();
    });
  }

  void RunLocal(LaneState& lane, const Step& step) {
    for (LaneState::Deferred& d : lane.deferred) {
      reduce_(Pointer(d.local), d.incoming.bytes.get(), Pointer(d.dst),
              d.dst.count);
      staging_pool_.push_back(std::move(d.incoming));
    }
    lane.deferred.clear();
    for (const Action& a : step.actions) {
      switch (a.kind) {
        case Action::Kind::kCopy:
          if (Pointer(a.src) != Pointer(a.dst) && a.dst.count > 0) {
            std::memcpy(Pointer(a.dst), Pointer(a.src),
                        a.dst.count * element_size_);
          }
          break;
        case Action::Kind::kReduce:
          reduce_(Pointer(a.dst), Pointer(a.src), Pointer(a.dst), a.dst.count);
          break;
        case Action::Kind::kDivide:
          DivideInPlace(ctx_.dtype, Pointer(a.dst), a.dst.count,
                        ctx_.transport->size());
          break;
        default:
          break;
      }
    }
  }

  char* Pointer(const Region& r) const {
    return RegionAddress(ctx_, scratch_.get(), r);
  }
  ConstBuffer ConstRegion(const Region& r) const {
    return {Pointer(r), r.count, ctx_.dtype, ctx_.recv.device};
  }
  Buffer MutableRegion(const Region& r) const {
    return {Pointer(r), r.count, ctx_.dtype, ctx_.recv.device};
  }

  void RecordError(absl::Status s) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (error_.ok()) error_ = std::move(s);
    has_error_.store(true, std::memory_order_release);
  }
  absl::Status FirstError() {
    if (!has_error_.load(std::memory_order_acquire)) return absl::OkStatus();
    std::lock_guard<std::mutex> lock(error_mu_);
    return error_;
  }

  void Finish(absl::Status status) {
    finished_ = true;
    // Other lanes may still have messages posted that point into the
    // caller's buffers: let the communicator retire them first.
    if (!status.ok() && ctx_.on_failure) (*ctx_.on_failure)(status);
    // The run lets go of the transport before its request completes, while
    // the caller (who waits for that request, or at least holds the
    // communicator until then) still holds it too. Held until the run
    // itself died, the last reference could go on the thread that ran the
    // final completion: a transport's progress thread, whose transport then
    // tried to join it from itself (std::system_error "Resource deadlock
    // avoided", seen in ucx_conformance_test over TCP). Nothing runs the
    // transport after Finish: Advance returns at once.
    ctx_.transport.reset();
    // After a failure other lanes' messages may still land in scratch:
    // their memory then lives as long as the run.
    if (status.ok()) ReleaseMemory();
    Complete(std::move(status));
  }

  const std::shared_ptr<const Schedule> schedule_;
  ExecutionContext ctx_;  // Its transport is released by Finish.
  const std::weak_ptr<Transport> transport_;  // For Progress after that.
  const size_t element_size_;
  const ReduceKernel reduce_;
  std::unique_ptr<char[]> scratch_;
  // Staging buffers not in use. Buffers go back here once their step's
  // reduction ran, and the next step of any lane takes them again: reuse
  // keeps them warm in cache between the transport's write and the
  // reduction's read, where a fresh allocation per segment (an mmap for
  // anything large) would page-fault on every byte. Only the thread
  // driving the run (see Kick) touches it.
  std::vector<Staging> staging_pool_;

  Staging TakeStaging(size_t bytes) {
    Staging s;
    if (!staging_pool_.empty()) {
      s = std::move(staging_pool_.back());
      staging_pool_.pop_back();
    }
    if (s.capacity < bytes) StagingCache::Global().Take(bytes, &s);
    if (s.capacity < bytes) {
      s.bytes.reset(new char[bytes]);
      s.capacity = bytes;
    }
    return s;
  }
  // Fixed at construction (LaneState holds an atomic); one lane inline.
  absl::FixedArray<LaneState, 1> lanes_;
  // Touched only by the thread inside Kick().
  absl::InlinedVector<size_t, 4> active_;
  size_t next_lane_ = 0;
  bool finished_ = false;

  std::atomic<int> kicks_{0};
  std::atomic<bool> has_error_{false};
  std::mutex error_mu_;
  absl::Status error_;  // Guarded by error_mu_.
};

}  // namespace

char* RegionAddress(const ExecutionContext& context, void* scratch,
                    const Region& r) {
  char* base = nullptr;
  switch (r.buffer) {
    case BufferId::kSend:
      base = const_cast<char*>(static_cast<const char*>(context.send.data));
      break;
    case BufferId::kRecv:
      base = static_cast<char*>(context.recv.data);
      break;
    case BufferId::kScratch:
      base = static_cast<char*>(scratch);
      break;
  }
  return base == nullptr ? nullptr
                         : base + r.offset * DataTypeSize(context.dtype);
}

Request ExecuteSchedule(std::shared_ptr<const Schedule> schedule,
                        ExecutionContext context) {
  auto run = std::make_shared<ScheduleRun>(std::move(schedule),
                                           std::move(context));
  return run->Start();
}


}  // namespace relay
