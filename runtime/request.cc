#include "runtime/request.h"

#include <utility>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "runtime/futex.h"
#include "runtime/spin_lock.h"
#include "runtime/wait_phases.h"

namespace relay {

int UsableCores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

std::chrono::nanoseconds RequestState::SpinBudgetFor(int local_ranks) {
  static const int cores = UsableCores();
  return local_ranks <= cores ? kOwnCoreSpinBudget : kDefaultSpinBudget;
}

bool RequestState::Publish(absl::Status status) {
  bool record = false;
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (completing_) return false;
    completing_ = true;
    status_ = std::move(status);
    record = !recorders_.empty();
    // seq_cst with the sleepers_ check below, and a sleeper's increment and
    // check: either it sees done, or this sees it and wakes it.
    if (!record) done_.store(1, std::memory_order_seq_cst);
  }
  if (record) {
    // Before the outcome is published, so a waiter that sees done sees what
    // they wrote; outside the lock, as a recorder takes locks of its own.
    // In place: once completing_ is set nobody adds to recorders_.
    for (DoneCallback& r : recorders_) std::move(r)(status_);
    recorders_.clear();
    std::lock_guard<SpinLock> lock(mu_);
    done_.store(1, std::memory_order_seq_cst);
  }
  // The caller holds a reference, so this is alive here.
  WakeSleepers();
  return true;
}

void RequestState::WakeSleepers() {
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    FutexWakeAll(&done_, FutexScope::kProcess);
  }
}

bool RequestState::CompleteIfNothingToRun(absl::Status& status) {
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (completing_) return true;
    if (!recorders_.empty() || !callbacks_.empty() ||
        sleepers_.load(std::memory_order_seq_cst) > 0) {
      return false;
    }
    completing_ = true;
    status_ = std::move(status);
    done_.store(1, std::memory_order_seq_cst);
  }
  // A waiter may have started to sleep since the check above (it looked at
  // done_ before the store): wake it, as Publish does. Rare, so it is worth
  // the system call under the caller's lock.
  WakeSleepers();
  return true;
}

void RequestState::Sleep(std::chrono::nanoseconds timeout) {
  FutexWait(&done_, /*expected=*/0, timeout, FutexScope::kProcess);
}

bool RequestState::MarkDone(absl::Status status, DoneCallbacks* to_run) {
  if (!Publish(std::move(status))) return false;
  // Done: OnDone runs new callbacks inline now, and leaves callbacks_ alone.
  to_run->swap(callbacks_);
  return true;
}

bool RequestState::Complete(absl::Status status) {
  if (!Publish(std::move(status))) return false;
  // In place (no swap into a local vector, which moved every callback
  // through its manager): nobody adds to callbacks_ once done is set.
  for (DoneCallback& cb : callbacks_) std::move(cb)(status_);
  callbacks_.clear();
  return true;
}

absl::Status RequestState::Wait(absl::Time deadline) {
  if (done()) return status_;
  StartedPolling();
  // FinishedPolling on every way out.
  struct Leaving {
    RequestState* state;
    ~Leaving() { state->FinishedPolling(); }
  } leaving{this};
  auto poll = [this] {
    if (done()) return WaitPoll::kDone;
    const bool moved = Progress();
    if (done()) return WaitPoll::kDone;
    return moved ? WaitPoll::kBusy : WaitPoll::kIdle;
  };
  if (PollBeforeSleeping(poll, [] {}, SpinBudget(), deadline)) return status_;

  // From here this thread sleeps: a transport's own progress thread, which
  // stands aside while callers poll, must drive the operation now.
  StoppedPolling();
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (done_.load(std::memory_order_seq_cst) == 0) {
    // Wake up now and then to drive progress for polling transports.
    const absl::Duration left = deadline - FastNow();
    if (left <= absl::ZeroDuration()) {
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      return absl::DeadlineExceededError(
          "operation did not complete before its deadline");
    }
    Sleep(absl::ToChronoNanoseconds(std::min(left, absl::Milliseconds(1))));
    if (done()) break;
    Progress();
    StoppedPolling();  // One poll, then back to sleep.
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return status_;
}

void RequestState::OnDone(DoneCallback callback) {
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (done_.load(std::memory_order_relaxed) == 0) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  std::move(callback)(status_);
}

void RequestState::OnCompleting(DoneCallback recorder) {
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (!completing_) {
      recorders_.push_back(std::move(recorder));
      return;
    }
  }
  // Decided already (the caller registers it before anyone can wait).
  std::move(recorder)(status_);
}

namespace {

// Request::CompletedOnDevice's state.
class EmptyDeviceOperation final : public RequestState {
 public:
  absl::Status StreamWait(void* /*cuda_stream*/) override {
    return absl::OkStatus();
  }
};

}  // namespace

Request Request::CompletedOnDevice() {
  auto state = std::make_shared<EmptyDeviceOperation>();
  state->Complete(absl::OkStatus());
  return Request(std::move(state));
}

Request Request::Completed(absl::Status status) {
  auto state = std::make_shared<RequestState>();
  state->Complete(std::move(status));
  return Request(std::move(state));
}

absl::Status Request::Wait() {
  if (!state_) return absl::FailedPreconditionError("Wait on an empty Request");
  return state_->Wait(state_->deadline());
}

absl::Status Request::Wait(absl::Duration timeout) {
  if (!state_) return absl::FailedPreconditionError("Wait on an empty Request");
  return state_->Wait(FastNow() + timeout);
}

bool Request::Test() {
  if (!state_) return true;
  return state_->Poll();
}

absl::Status Request::status() const {
  if (!state_) return absl::FailedPreconditionError("empty Request");
  return state_->done() ? state_->status() : absl::OkStatus();
}

void Request::OnDone(DoneCallback callback) {
  if (!state_) {
    std::move(callback)(absl::FailedPreconditionError("empty Request"));
    return;
  }
  state_->OnDone(std::move(callback));
}

absl::Status RequestState::StreamWait(void* /*cuda_stream*/) {
  return absl::UnimplementedError(
      "StreamWait applies to device operations; this request is a host "
      "operation: use Wait()");
}

absl::Status Request::StreamWait(void* cuda_stream) {
  if (!state_) {
    return absl::FailedPreconditionError("StreamWait on an empty Request");
  }
  return state_->StreamWait(cuda_stream);
}

namespace {

// WhenAll's request: completes when its parts have, and drives their
// progress while waited on (a polling transport's operations move only when
// someone polls them).
class JointState final : public RequestState {
 public:
  JointState(absl::Time deadline, std::vector<std::shared_ptr<RequestState>> parts)
      : RequestState(deadline), parts_(std::move(parts)) {}

 protected:
  bool Progress() override {
    // The first unfinished part: parts usually share one transport, whose
    // progress moves them all.
    for (const std::shared_ptr<RequestState>& part : parts_) {
      if (!part->done()) return part->Poll();
    }
    return false;
  }
  void StoppedPolling() override {
    for (const std::shared_ptr<RequestState>& part : parts_) {
      if (!part->done()) part->StopPolling();
    }
  }

 public:
  // The stream waits for every part (a batch of device operations).
  absl::Status StreamWait(void* cuda_stream) override {
    for (const std::shared_ptr<RequestState>& part : parts_) {
      absl::Status s = part->StreamWait(cuda_stream);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  const std::vector<std::shared_ptr<RequestState>> parts_;  // Immutable.
};

}  // namespace

Request WhenAll(std::vector<Request> requests, absl::Time deadline) {
  struct Joint {
    std::shared_ptr<RequestState> state;
    std::atomic<size_t> remaining;
    std::mutex mu;
    absl::Status first_error;  // Guarded by mu.
  };
  std::vector<std::shared_ptr<RequestState>> parts;
  parts.reserve(requests.size());
  for (const Request& r : requests) {
    if (r.valid()) parts.push_back(r.state());
  }
  auto joint = std::make_shared<Joint>();
  joint->state = std::make_shared<JointState>(deadline, std::move(parts));
  joint->remaining.store(requests.size() + 1);  // +1 until all are attached.
  auto arrive = [joint](absl::Status status) {
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(joint->mu);
      if (joint->first_error.ok()) joint->first_error = std::move(status);
    }
    if (joint->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::Status result;
      {
        std::lock_guard<std::mutex> lock(joint->mu);
        result = joint->first_error;
      }
      joint->state->Complete(std::move(result));
    }
  };
  Request out(joint->state);
  for (Request& r : requests) r.OnDone(arrive);
  arrive(absl::OkStatus());
  return out;
}

}  // namespace relay
