// File: runtime/request.h
//
// Request: the asynchronous handle every relay operation returns, and
// RequestState, the completion record that transports and algorithms fill in.
//
// What "complete" means. A request is complete when its result is in the
// output buffer (for host memory), or when it has failed. Completion happens
// exactly once, with one absl::Status:
//   OK                 the result is in place.
//   DeadlineExceeded   (from Wait only) the deadline passed first; the operation
//                      is still in flight: wait again, or Abort the communicator.
//   Cancelled          the communicator was aborted.
//   Unavailable        a peer was lost; the message names it.
//   Internal           a native library failed; the message names the call.
//
// Host wait versus stream wait (device memory, with the CUDA transports):
//   Wait() blocks the calling host thread until the operation has finished,
//   GPU work included (it polls, like cudaStreamSynchronize spins). Use it
//   when the host needs the result: to copy it out, to free the buffer.
//   StreamWait(stream) returns at once and makes `stream` wait, on the GPU,
//   for the operation: later kernels on that stream see the result, and the
//   host never blocks. This is the difference between "the request is done"
//   and "the stream is synchronized": a device operation's output is not
//   ready for a kernel on another stream until that stream waits for it,
//   and a cudaDeviceSynchronize is never needed. Test() never blocks.
//   Host-memory operations do not support StreamWait (Unimplemented): wait
//   on the host instead.
//
//   Overlapping compute and communication on two streams (the gradients of
//   layer k are reduced while layer k-1's backward pass runs):
//     CollectiveOptions on_compute;
//     on_compute.stream = compute;                  // waits for layer k's grads
//     RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(grads_k, grads_k,
//                                                      ReduceOp::kAvg, on_compute));
//     LaunchBackward(layer_k_minus_1, compute);    // runs while r is in flight
//     RELAY_RETURN_IF_ERROR(r.StreamWait(optimizer));  // no host block
//     LaunchOptimizerStep(grads_k, optimizer);     // sees the reduced grads
//   (transports/nccl/nccl_transport_test.cc, StreamWaitOrdersWithoutHost-
//   Blocking, runs this pattern and checks the values.)
//   A caller that consumes the result on the very stream it passed, with
//   nothing to overlap, can ask for NCCL's own semantics instead:
//   CollectiveOptions::stream_order = StreamOrder::kOnStream queues the
//   operation on that stream, so its later work waits with no StreamWait
//   (and the NCCL transport saves an event and a wait a call).
//
// Lifetime and ownership. Request is a small movable handle sharing one
// RequestState with the transport or algorithm that completes it; dropping the
// handle does not cancel the operation, and the buffers must stay valid until
// it completes. OnDone callbacks run exactly once, on whichever thread
// completes the request (inline if it already has): keep them short and never
// block in them.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(in, out, ReduceOp::kSum));
//   ComputeSomethingElse();                       // overlaps the all_reduce
//   RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(30)));
#ifndef RELAY_RUNTIME_REQUEST_H_
#define RELAY_RUNTIME_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/fast_clock.h"  // FastNow, used with requests' deadlines.
#include "runtime/spin_lock.h"

namespace relay {

using DoneCallback = absl::AnyInvocable<void(absl::Status)>;
using DoneCallbacks = absl::InlinedVector<DoneCallback, 1>;

// The shared completion record behind a Request. Transports and algorithms
// create one per operation and call Complete() once; subclasses that need a
// progress engine to be driven (polling transports) override Progress().
class RequestState {
 public:
  // `deadline` is what Request::Wait() with no argument waits until.
  explicit RequestState(absl::Time deadline = absl::InfiniteFuture())
      : deadline_(deadline) {}
  virtual ~RequestState() = default;
  RequestState(const RequestState&) = delete;
  RequestState& operator=(const RequestState&) = delete;

  // Records the outcome, runs the recorders (OnCompleting), publishes the
  // request as done, then runs the callbacks (OnDone). Only the first call
  // counts; it returns true, later ones return false and change nothing.
  bool Complete(absl::Status status);

  // Complete() in two halves, for a transport that must publish several
  // completions before any callback runs: runs the recorders, marks the
  // request done and moves its callbacks into `*to_run`; the caller then runs
  // each with status().
  bool MarkDone(absl::Status status, DoneCallbacks* to_run);

  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // The outcome; meaningful once done() is true.
  const absl::Status& status() const { return status_; }
  absl::Time deadline() const { return deadline_; }

  // Blocks until done or `deadline`: spins briefly (a peer thread often
  // completes within microseconds), then sleeps on a condition variable.
  absl::Status Wait(absl::Time deadline);
  // SpinBudget() unless a subclass says otherwise.
  static constexpr std::chrono::nanoseconds kDefaultSpinBudget{500};
  // The spin for a transport whose `local_ranks` ranks share this host's
  // usable cores (UsableCores): kOwnCoreSpinBudget when each has a core of
  // its own, so the peer it waits for is running and answers within
  // microseconds; else the default, since a spinning rank would hold the
  // core its peer needs. On a 2-core VM, 8 B all_reduce on 2 loopback ranks
  // took 0.99 us with 5 us against 1.06 with 0.5 us, while on 4 ranks the
  // long spin took 11.2 us against 7.5.
  static constexpr std::chrono::nanoseconds kOwnCoreSpinBudget{5000};
  // After the spin, how long Wait keeps polling but yields the core between
  // polls (with more ranks than cores the peer may need exactly this one)
  // before it sleeps.
  static constexpr std::chrono::nanoseconds kYieldBudget{200000};
  static std::chrono::nanoseconds SpinBudgetFor(int local_ranks);
  // Whether a waiter with this spin budget has a core of its own: the spin
  // budget is how SpinBudgetFor tells the waiter, and every waiter's budget
  // comes from it (a transport's wait_spin, a request's SpinBudget).
  static constexpr bool HasCoreOfItsOwn(std::chrono::nanoseconds spin) {
    return spin >= kOwnCoreSpinBudget;
  }
  // Non-blocking: drives progress once; true when done.
  bool Poll() {
    if (done()) return true;
    Progress();
    return done();
  }
  // Tells whoever Progress() drives that this waiter stopped polling (it is
  // going to sleep), so a transport with a progress thread of its own takes
  // over at once instead of after its stand-aside interval.
  void StopPolling() { StoppedPolling(); }
  void OnDone(DoneCallback callback);
  // Runs `recorder` once with the final status on the completing thread,
  // before the request is published as done; inline if the outcome is
  // already decided. For bookkeeping a waiter must find finished once Wait()
  // or Test() reports the request done (a communicator's metrics and flight
  // record): OnDone callbacks may still be running on another thread when
  // Wait() returns, recorders never are. Register before the request reaches
  // anyone who could wait on it, and keep recorders to a few atomics and
  // short locks: every waiter's wake-up waits for them.
  void OnCompleting(DoneCallback recorder);

  // Device operations: makes `cuda_stream` wait, on the GPU, for this
  // operation (Request::StreamWait). Host operations: Unimplemented.
  virtual absl::Status StreamWait(void* cuda_stream);

  // True for a transport's own request, which its Transport::Abort fails
  // while pending: a Communicator then need not track it to cancel it on
  // Abort (a mutex and a weak reference per pending call). False for
  // requests an algorithm builds, which only the communicator can cancel.
  virtual bool CancelledByTransportAbort() const { return false; }

 protected:
  // Complete() for a request no other thread can have seen: created by the
  // caller and not yet handed out, so nothing is registered on it and
  // nobody waits. Then completion is two plain stores, not Complete()'s
  // lock, seq_cst publication and callback walk (two atomic exchanges; a
  // small collective whose last rank is this one completes this way).
  // Handing the request out afterwards publishes it as any value is.
  void CompleteUnshared(absl::Status status) {
    completing_ = true;
    status_ = std::move(status);
    done_.store(1, std::memory_order_release);
  }

  // Complete() on the spot, for a transport that finds the operation done
  // while it holds a lock of its own (UCX's completion callback runs under
  // the worker lock): when no recorder or callback is registered and nobody
  // sleeps on the request, publishes `status` (moved from) and returns true;
  // also true if the outcome was decided already. Otherwise false, and
  // `status` untouched: the caller completes the request with Complete()
  // once it has dropped its lock, since a callback may call back into it,
  // and a sleeper's wake-up is a system call. Saves the transport queueing
  // the completion, and a waiter that polls sees it as the poll returns.
  bool CompleteIfNothingToRun(absl::Status& status);

  // Called repeatedly by Wait() and Request::Test() while not done; returns
  // true if it did some work (Wait keeps polling, rather than sleeping,
  // while work keeps coming).
  virtual bool Progress() { return false; }
  // Called by Wait() when it stops calling Progress() to sleep; subclasses
  // that forward Progress() forward this too.
  virtual void StoppedPolling() {}
  // Called by Wait() before its first Progress(): a thread now polls this
  // request and will keep doing so until it is done or StoppedPolling()
  // runs, so a transport may leave its completion to that thread (which
  // then runs the callbacks on its own core). Test() does not call it.
  virtual void StartedPolling() {}
  // Called as that Wait() returns (done, or past its deadline): from here
  // no thread waits on the request on its behalf.
  virtual void FinishedPolling() {}
  // How long Wait() polls without giving up the core before it starts
  // yielding between polls. Short by default: measured on a 2-core VM
  // (bench/collectives, 8 B all_reduce, 2 to 16 loopback ranks), a shorter
  // spin was better at every rank count, as ranks often share a core with
  // the peer they wait for. A transport that knows its peers each have a
  // core may spin longer.
  virtual std::chrono::nanoseconds SpinBudget() const {
    return kDefaultSpinBudget;
  }
  // How Wait() sleeps once it stops polling: at most `timeout`, and may
  // return early (it then polls once and sleeps again). By default until
  // this request is completed by another thread. A request that completes
  // only when polled may instead sleep until its peers make progress it
  // can poll for (the shm algorithm's exchange wakes on a peer's write).
  virtual void Sleep(std::chrono::nanoseconds timeout);

 private:
  // Decides the outcome, runs the recorders and publishes it; false if it
  // was decided already.
  bool Publish(absl::Status status);
  // Wakes the waiters asleep on done_, if any; after done_ is set.
  void WakeSleepers();

  // 0 while pending, 1 once done; also the word sleeping waiters wait on
  // (a futex on Linux). A condition variable would do, but
  // std::condition_variable_any allocates a mutex per instance, and a
  // request is made for every operation.
  std::atomic<uint32_t> done_{0};
  std::atomic<int> sleepers_{0};  // Waiters asleep on done_, or going to.
  absl::Status status_;  // Written once, before completing_ is set.
  const absl::Time deadline_;
  // A spin lock, not a mutex: the completing thread and a thread adding a
  // callback meet here (runtime/spin_lock.h).
  SpinLock mu_;
  bool completing_ = false;  // Guarded by mu_: the outcome is decided.
  // Guarded by mu_ until completing_ (recorders_) or done_ (callbacks_) is
  // set; after that only the completing thread touches them.
  DoneCallbacks recorders_;
  DoneCallbacks callbacks_;
};

class Request {
 public:
  // An empty handle: Wait() and Test() report FailedPrecondition / true.
  Request() = default;
  explicit Request(std::shared_ptr<RequestState> state)
      : state_(std::move(state)) {}

  // A request that is already complete with `status`.
  static Request Completed(absl::Status status = absl::OkStatus());
  // The same for a device operation that had nothing to move (a collective
  // of zero elements on device buffers): StreamWait succeeds at once, as
  // any device operation's does, with nothing for the stream to wait on.
  static Request CompletedOnDevice();

  // Blocks until the operation completes or its own deadline (the timeout of
  // the call that created it) passes. The deadline is fixed at the call:
  // once it has passed, Wait() returns DeadlineExceeded at once while the
  // operation is still in flight (Wait(timeout) waits afresh). A timed-out
  // operation is not cancelled: abort the communicator before freeing its
  // buffers.
  absl::Status Wait();
  // Blocks at most `timeout`; DeadlineExceeded leaves the operation in flight.
  absl::Status Wait(absl::Duration timeout);
  // Non-blocking: drives progress once and reports whether it completed.
  bool Test();
  // The final status once Test() is true; OK while the operation is in
  // flight, even past its deadline (check Test first).
  absl::Status status() const;
  // Runs `callback` once with the final status (inline if already complete).
  void OnDone(DoneCallback callback);
  // Device operations: make `cuda_stream` wait for completion without
  // blocking the host. Host operations return Unimplemented.
  absl::Status StreamWait(void* cuda_stream);

  bool valid() const { return state_ != nullptr; }
  const std::shared_ptr<RequestState>& state() const { return state_; }

 private:
  std::shared_ptr<RequestState> state_;
};

// Cores this process may run on (its CPU affinity), at least 1.
int UsableCores();

// A request that completes when every one of `requests` has: with the first
// error among them, or OK. `deadline` is the combined request's own deadline.
Request WhenAll(std::vector<Request> requests,
                absl::Time deadline = absl::InfiniteFuture());

}  // namespace relay

#endif  // RELAY_RUNTIME_REQUEST_H_
