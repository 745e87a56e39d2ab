// File: runtime/device_watch.h
//
// The completion side of a GPU transport (nccl, cuda_ipc). Each operation
// it queues on a CUDA stream ends with a completion event; its request
// (DeviceRequest) is done once that event has fired. DeviceWatch recycles
// the events and runs the watchdog thread that completes requests nobody
// waits on (so OnDone callbacks run), fails the transport when one passes
// its deadline, and asks the transport between looks whether it is still
// healthy (NCCL's asynchronous errors). What a finished request's outcome
// is, and how the transport aborts, is the owner's (DeviceWatchOwner).
//
// Requests must finish in posting order (one stream, or each operation
// queued after the one before it), which lets the watchdog find the
// finished ones with a few event queries whatever the queue's length
// (finished_prefix.h). CUDA through device_runtime only: events are void*.
//
// Example (a transport's core owns the watch and is its owner):
//   struct Core : DeviceWatchOwner { DeviceWatch watch{this}; ... };
//   core->watch.Start("relay-watchdog");
//   void* done = *core->watch.GetEvent();   // under the enqueue lock
//   ... queue the work, record `done` after it ...
//   auto r = std::make_shared<DeviceRequest>(
//       std::shared_ptr<DeviceWatch>(core, &core->watch), done, deadline, "send");
//   core->watch.Watch(r);
//   ~Transport: core->watch.Stop();
#ifndef RELAY_RUNTIME_DEVICE_WATCH_H_
#define RELAY_RUNTIME_DEVICE_WATCH_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/posted_list.h"
#include "runtime/request.h"

namespace relay {

class DeviceRequest;

// What the transport decides for its DeviceWatch. Called from the
// watchdog thread and from threads waiting on requests.
class DeviceWatchOwner {
 public:
  virtual ~DeviceWatchOwner() = default;
  // The outcome of a request whose completion event fired: OK, or an
  // error its GPU work reported (cuda_ipc's kernels leave an error word).
  // A non-OK outcome fails the request and aborts the transport.
  virtual absl::Status Finished(const DeviceRequest& /*request*/) { return absl::OkStatus(); }
  // Asked after every look: non-OK aborts the transport (NCCL's
  // asynchronous errors).
  virtual absl::Status Health() { return absl::OkStatus(); }
  // The error of a request past its deadline, which aborts the transport.
  virtual absl::Status Expired(const DeviceRequest& request) = 0;
  // Aborts the transport (once; later calls do nothing) and then fails
  // every request it watches: DeviceWatch::FailAll(why).
  virtual void Abort(absl::Status why) = 0;
  virtual bool Aborted() const = 0;
  virtual absl::Status AbortReason() const = 0;
};

class DeviceWatch {
 public:
  explicit DeviceWatch(DeviceWatchOwner* owner) : owner_(owner) {}
  // Stops the watchdog if it still runs (the owner should have) and
  // destroys the pooled events.
  ~DeviceWatch();
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

  // Starts the watchdog thread, named `thread_name` (15 characters at most).
  void Start(const char* thread_name);
  // Stops and joins it, then completes the requests whose work has
  // finished. Those still running stay pending; the owner's abort fails
  // them.
  void Stop();

  // A completion event: recycled, else created on the current device. One
  // caller at a time (the transport's enqueue lock).
  absl::StatusOr<void*> GetEvent();
  // Any thread. A stream that waits on the event captured its state at the
  // wait, so it may be recorded again at once.
  void PutEvent(void* event);

  // Hands a posted request to the watchdog. Any thread; a request posted
  // after an abort fails at once.
  void Watch(std::shared_ptr<DeviceRequest> request);
  // Fails every request posted or pending with `why` (the owner's abort).
  void FailAll(const absl::Status& why);

  DeviceWatchOwner& owner() const { return *owner_; }

 private:
  void Loop();
  // Moves `posted_` to the back of `pending_`, oldest first. Holds mu_.
  void TakePostedLocked();

  DeviceWatchOwner* const owner_;

  // Events: GetEvent takes those given back since its last refill in one
  // go (a lock per event moved a cache line between cores on every call).
  std::vector<void*> taken_;  // GetEvent's own.
  std::mutex events_mu_;
  std::vector<void*> returned_;  // Guarded by events_mu_.

  // Requests posted since the watchdog last took them (lock-free).
  PostedList<DeviceRequest> posted_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<DeviceRequest>> pending_;  // Guarded by mu_.
  bool stopping_ = false;                                // Guarded by mu_.
  // Guarded by mu_: no pending request's deadline is earlier, so the
  // watchdog scans for an expired one only once the clock passes it.
  absl::Time earliest_deadline_ = absl::InfiniteFuture();
  // The watchdog sleeps with nothing pending, and the next Watch must wake
  // it (only then: a wake-up is a system call, and one per operation cost
  // the posting thread more than any CUDA call). seq_cst, as posted_ is:
  // either the watchdog sees the new request before it sleeps, or the
  // poster sees it asleep.
  std::atomic<bool> idle_{false};
  std::thread thread_;
  // The watchdog's scratch, kept to avoid allocating on every look: the
  // probed requests' events.
  std::vector<void*> probes_;
  std::vector<std::shared_ptr<DeviceRequest>> completing_;
};

// One queued operation: done when its completion event has fired, with the
// owner's verdict (DeviceWatchOwner::Finished).
class DeviceRequest final : public RequestState {
 public:
  static constexpr uint64_t kNoSequence = ~uint64_t{0};

  // `watch` keeps the transport's core alive (an aliasing pointer into it);
  // `done_event` comes from watch->GetEvent() and goes back with the
  // request. `what` is a string literal naming the operation.
  DeviceRequest(std::shared_ptr<DeviceWatch> watch, void* done_event, absl::Time deadline,
                const char* what, uint64_t sequence = kNoSequence)
      : RequestState(deadline),
        watch_(std::move(watch)),
        done_event_(done_event),
        what_(what),
        sequence_(sequence) {}
  ~DeviceRequest() override {
    if (done_event_ != nullptr) watch_->PutEvent(done_event_);
  }

  absl::Status StreamWait(void* cuda_stream) override;
  // The owner's Abort fails every watched request (DeviceWatch::FailAll),
  // so the communicator need not keep it in its own list.
  bool CancelledByTransportAbort() const override { return true; }

  // Completes the request if its GPU work has finished; true if done now.
  bool Check();
  // Completes it with the owner's verdict once its event has fired
  // (`query_error`: the event query's error, 0 if it fired).
  void Finish(int query_error);

  void* event() const { return done_event_; }
  const char* what() const { return what_; }
  // "what #sequence", or "what" without a sequence number.
  std::string Describe() const;

  // DeviceWatch's posted list's, while this request is on it.
  DeviceRequest* next_posted = nullptr;
  std::shared_ptr<DeviceRequest> posted_ref;

 protected:
  // Wait keeps polling while this returns true: the GPU work is moving and
  // only a poll sees it finish (the watchdog would, a period later).
  bool Progress() override;

 private:
  const std::shared_ptr<DeviceWatch> watch_;
  void* const done_event_;
  const char* const what_;
  const uint64_t sequence_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_DEVICE_WATCH_H_
