// File: transports/nccl/nccl_core.h
//
// What an NCCL transport shares with its requests and its watchdog thread
// (Core), and its requests (NcclRequest): the communicators, the stream and
// events that order work on the GPU, the pending requests and the watchdog
// that completes them, enforces their deadlines and turns NCCL's
// asynchronous errors into an abort. nccl_transport.cc posts the work;
// nccl_comms.h makes the communicators. Internal to transports/nccl/.
#ifndef RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_
#define RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "runtime/device_buffer_check.h"
#include "runtime/request.h"
#include "runtime/status_macros.h"
#include "runtime/transport.h"
#include "transports/nccl/nccl_status.h"
#include "transports/nccl/posted_list.h"

namespace relay {
namespace nccl_internal {


// cudaEvent_t recycling: creating an event costs more than recording one,
// and every operation needs one (its completion).
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : taken_) cudaEventDestroy(e);
    for (cudaEvent_t e : returned_) cudaEventDestroy(e);
  }
  // One caller at a time (Launch holds the transport's enqueue lock). It
  // takes the events given back since its last refill in one go: a lock
  // per event, shared with the threads giving them back (the watchdog's,
  // mostly), moved a cache line between cores on every call.
  absl::StatusOr<cudaEvent_t> Get() {
    if (taken_.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      taken_.swap(returned_);
    }
    if (!taken_.empty()) {
      cudaEvent_t e = taken_.back();
      taken_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
    return e;
  }
  // Any thread. A stream that waits on `e` captured its state at
  // cudaStreamWaitEvent, so `e` may be recorded again at once.
  void Put(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    returned_.push_back(e);
  }

 private:
  std::vector<cudaEvent_t> taken_;  // Get's own.
  std::mutex mu_;
  std::vector<cudaEvent_t> returned_;  // Guarded by mu_.
};

class NcclRequest;

// What a transport shares with its requests and its watchdog.
struct Core {
  int rank = 0;
  int size = 1;
  int device = 0;
  ncclComm_t comm = nullptr;
  // Point-to-point's communicator (kDefaultP2pChannels): its own, split
  // from `comm`, or `comm` itself when RELAY_NCCL_P2P_CHANNELS is 0. Both
  // queue on `stream` (but native collectives with StreamOrder::kOnStream
  // on the caller's), so every rank runs their operations in the order it
  // posted them.
  ncclComm_t p2p_comm = nullptr;
  bool OwnsP2pComm() const { return p2p_comm != nullptr && p2p_comm != comm; }
  // Every NCCL communicator this core made (no allocation: the watchdog
  // asks on every look).
  absl::InlinedVector<ncclComm_t, 4> OwnedComms() const {
    absl::InlinedVector<ncclComm_t, 4> all;
    for (ncclComm_t c : {comm, OwnsP2pComm() ? p2p_comm : nullptr}) {
      if (c != nullptr) all.push_back(c);
    }
    return all;
  }
  cudaStream_t stream = nullptr;
  int32_t* barrier_scratch = nullptr;  // One device int for barriers.
  // Recorded on a caller's stream for `stream` to wait on; guarded by
  // enqueue_mu. One is enough: a stream waiting on an event captures its
  // state at cudaStreamWaitEvent, so it may be recorded again at once.
  cudaEvent_t ready = nullptr;
  // The stream and completion event of the operation queued last; guarded
  // by enqueue_mu. An operation queued on another stream (a caller's, with
  // StreamOrder::kOnStream) first waits for it, so this transport's NCCL
  // work runs one operation at a time in posting order, as NCCL requires
  // of one communicator and advises across communicators on one GPU
  // (kernels of two that run at once may not both progress). The event
  // may have gone back to the pool with its request: a wait captures its
  // last record, which only a later Launch, under the same lock, changes.
  // A stream destroyed and a new one at the same address compare equal,
  // but CUDA frees a stream only once its work has finished.
  cudaStream_t last_stream = nullptr;
  cudaEvent_t last_done = nullptr;
  EventPool events;
  CheckedPointers checked_pointers;

  // NCCL communicators are not thread-safe: one enqueue at a time. Timed, so
  // Abort can give up on a caller stuck inside NCCL (kAbortGrace).
  std::timed_mutex enqueue_mu;
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  absl::Status abort_reason;  // Guarded by abort_mu.
  bool comm_aborted = false;  // Guarded by abort_mu: ncclCommAbort ran.

  // Requests posted since the watchdog last took them (posted_list.h):
  // Watch pushes, the watchdog takes them all at each look
  // (TakePostedLocked).
  PostedList<NcclRequest> posted;
  // Requests not yet complete, oldest first, for the watchdog.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  std::deque<std::shared_ptr<NcclRequest>> pending;  // Guarded by watch_mu.
  bool stopping = false;                              // Guarded by watch_mu.
  // Guarded by watch_mu: no pending request's deadline is earlier (some
  // may be later: requests that finished leave it until the next scan), so
  // the watchdog scans the queue for an expired request only once `now`
  // passes it, not on every look.
  absl::Time earliest_deadline = absl::InfiniteFuture();
  // The watchdog sleeps with nothing pending, and the next Watch must wake
  // it (only then: a wake-up is a system call, and one per operation cost
  // the enqueueing thread more than any CUDA call). Set under watch_mu;
  // seq_cst, as `posted` is: either the watchdog sees the new request
  // before it sleeps, or the poster sees it asleep.
  std::atomic<bool> watchdog_idle{false};
  // The watchdog's scratch, kept to avoid allocating on every look.
  std::vector<cudaEvent_t> probe_events;
  std::vector<std::shared_ptr<NcclRequest>> completing;

  ~Core() {
    if (!comm_aborted) {
      for (ncclComm_t c : OwnedComms()) ncclCommDestroy(c);
    }
    if (barrier_scratch != nullptr) cudaFree(barrier_scratch);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status AbortReason() {
    std::lock_guard<std::mutex> lock(abort_mu);
    return abort_reason;
  }
  // Aborts the NCCL communicator once and fails every pending request with
  // `why`. Safe from any thread, the watchdog included.
  void Abort(absl::Status why);
  // Fails every request posted or pending with `why` (after an abort).
  void FailPending(const absl::Status& why);
  void Watch(std::shared_ptr<NcclRequest> request);
  // Moves `posted` to the back of `pending`, oldest first. Holds watch_mu.
  void TakePostedLocked();
  void WatchdogLoop();
};

// One queued operation: done when its completion event has fired on the
// transport's stream.
class NcclRequest final : public RequestState {
 public:
  NcclRequest(std::shared_ptr<Core> core, cudaEvent_t done_event,
              absl::Time deadline, const char* what, uint64_t sequence)
      : RequestState(deadline),
        core_(std::move(core)),
        done_event_(done_event),
        what_(what),
        sequence_(sequence) {}
  ~NcclRequest() override { core_->events.Put(done_event_); }

  absl::Status StreamWait(void* cuda_stream) override {
    if (done() && !status().ok()) return status();
    return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream),
                                          done_event_, 0),
                      "cudaStreamWaitEvent");
  }

  // Completes the request if its GPU work has finished; true if done now.
  bool Check() {
    if (done()) return true;
    const cudaError_t q = cudaEventQuery(done_event_);
    if (q == cudaErrorNotReady) return false;
    Complete(CudaStatus(q, "cudaEventQuery"));
    return true;
  }

  cudaEvent_t event() const { return done_event_; }

  // Core::posted's, while this request is on it (posted_list.h).
  NcclRequest* next_posted = nullptr;
  std::shared_ptr<NcclRequest> posted_ref;

  std::string Describe() const {
    return sequence_ == kNoSequence ? std::string(what_)
                                    : absl::StrCat(what_, " #", sequence_);
  }

  static constexpr uint64_t kNoSequence = ~uint64_t{0};

 protected:
  // Wait keeps polling while this returns true: the GPU work is moving and
  // only a poll sees it finish (the watchdog would, a period later).
  bool Progress() override {
    if (Check()) return true;
    return !core_->aborted.load(std::memory_order_relaxed);
  }

 private:
  const std::shared_ptr<Core> core_;
  const cudaEvent_t done_event_;
  const char* const what_;
  const uint64_t sequence_;
};

}  // namespace nccl_internal
}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_
