#include "runtime/device_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "runtime/device_runtime.h"
#include "runtime/device_status.h"
#include "runtime/fast_clock.h"
#include "runtime/finished_prefix.h"
#include "runtime/thread_name.h"

namespace relay {
namespace {

// How often the watchdog looks at pending requests with nothing finishing:
// its period bounds how late a timeout is noticed.
constexpr std::chrono::microseconds kPeriod = std::chrono::milliseconds(1);
// Its shortest sleep between looks while requests are pending. Never zero:
// a watchdog that looked again at once spun on cudaEventQuery while
// anything was queued, and its driver calls slowed the thread queueing the
// next operation.
constexpr std::chrono::microseconds kMinPause(50);
// The most pending requests probed per look (their oldest first), so a
// look costs O(batch), not O(queue), under the lock each Watch may take: a
// loop that queues faster than the GPU runs queues thousands.
constexpr size_t kProbeBatch = 256;

}  // namespace

DeviceWatch::~DeviceWatch() {
  Stop();
  for (void* e : taken_) device_runtime::DestroyEvent(e);
  for (void* e : returned_) device_runtime::DestroyEvent(e);
}

void DeviceWatch::Start(const char* thread_name) {
  thread_ = std::thread([this, thread_name] {
    NameThisThread(thread_name);
    // Its event queries must not invalidate a capture that a user's thread
    // began in CUDA's default (global) mode. Without CUDA there are no
    // events to query, so the stub's error changes nothing.
    device_runtime::IgnoreOtherThreadsCaptures();
    Loop();
  });
}

void DeviceWatch::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  // A last look, so that requests whose work has finished complete (their
  // OnDone callbacks run) with nobody waiting.
  std::deque<std::shared_ptr<DeviceRequest>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TakePostedLocked();
    left.swap(pending_);
  }
  for (const std::shared_ptr<DeviceRequest>& r : left) {
    if (!r->Check()) {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(r);  // Still running: the owner's abort fails it.
    }
  }
}

absl::StatusOr<void*> DeviceWatch::GetEvent() {
  if (taken_.empty()) {
    std::lock_guard<std::mutex> lock(events_mu_);
    taken_.swap(returned_);
  }
  if (!taken_.empty()) {
    void* e = taken_.back();
    taken_.pop_back();
    return e;
  }
  void* e = nullptr;
  if (const int error = device_runtime::CreateEvent(&e); error != 0) {
    return DeviceStatus(error, "cudaEventCreateWithFlags");
  }
  return e;
}

void DeviceWatch::PutEvent(void* event) {
  std::lock_guard<std::mutex> lock(events_mu_);
  returned_.push_back(event);
}

void DeviceWatch::Watch(std::shared_ptr<DeviceRequest> request) {
  posted_.Push(std::move(request));
  if (idle_.load(std::memory_order_seq_cst)) {
    // Under the lock, the watchdog is either before its predicate (which
    // sees the push) or asleep (and woken).
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_one();
  }
  // An abort that drained posted_ before this push fails it too.
  if (owner_->Aborted()) FailAll(owner_->AbortReason());
}

void DeviceWatch::TakePostedLocked() {
  posted_.TakeAll([this](std::shared_ptr<DeviceRequest> r) {
    earliest_deadline_ = std::min(earliest_deadline_, r->deadline());
    pending_.push_back(std::move(r));
  });
}

void DeviceWatch::FailAll(const absl::Status& why) {
  std::deque<std::shared_ptr<DeviceRequest>> failing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TakePostedLocked();
    failing.swap(pending_);
  }
  for (const std::shared_ptr<DeviceRequest>& r : failing) r->Complete(why);
}

void DeviceWatch::Loop() {
  // The pause between looks while requests are pending: short right after
  // one completed (work is flowing), doubling up to the period while none
  // does.
  auto pause = kMinPause;
  while (true) {
    std::shared_ptr<DeviceRequest> expired;
    {
      std::unique_lock<std::mutex> lock(mu_);
      TakePostedLocked();
      if (pending_.empty()) {
        earliest_deadline_ = absl::InfiniteFuture();
        idle_.store(true, std::memory_order_seq_cst);
        cv_.wait_for(lock, kPeriod, [&] { return stopping_ || !posted_.empty(); });
        idle_.store(false, std::memory_order_relaxed);
        pause = kMinPause;
      } else {
        cv_.wait_for(lock, pause, [&] { return stopping_; });
      }
      if (stopping_) return;
      TakePostedLocked();
      // Requests finish in posting order, so the boundary between finished
      // and not is found by a few event queries (one per request kept this
      // thread in the driver, whose lock the posting thread needs too).
      probes_.clear();
      const size_t probed = std::min(pending_.size(), kProbeBatch);
      for (size_t i = 0; i < probed; ++i) {
        probes_.push_back(pending_[i]->event());
      }
      lock.unlock();
      // Only FailAll removes requests other than this thread, after the
      // owner marks itself aborted: the events stay valid unless it has.
      const FinishedPrefixResult found = FinishedPrefix(probes_.size(), [&](size_t i) {
        const int q = device_runtime::QueryEvent(probes_[i]);
        return q == 0                         ? ProbeResult::kFinished
               : q == device_runtime::kNotReady ? ProbeResult::kRunning
                                                : ProbeResult::kFailed;
      });
      lock.lock();
      if (owner_->Aborted()) continue;
      completing_.clear();
      for (size_t i = 0; i < found.finished && !pending_.empty(); ++i) {
        completing_.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      if (found.failed && !pending_.empty()) completing_.push_back(pending_.front());
      lock.unlock();
      // In posting order, outside the lock: completion runs callbacks,
      // which may post work.
      for (size_t i = 0; i < completing_.size(); ++i) {
        if (i < found.finished) {
          completing_[i]->Finish(0);
        } else {
          completing_[i]->Check();  // Reports the failed query.
        }
      }
      completing_.clear();  // Requests may die here, outside the lock.
      lock.lock();
      if (found.failed) {
        while (!pending_.empty() && pending_.front()->done()) pending_.pop_front();
      }
      pause = found.finished > 0 ? kMinPause : std::clamp(2 * pause, kMinPause, kPeriod);
      const absl::Time now = FastNow();
      if (now > earliest_deadline_) {
        earliest_deadline_ = absl::InfiniteFuture();
        for (const std::shared_ptr<DeviceRequest>& r : pending_) {
          if (r->done()) continue;
          if (now > r->deadline()) {
            expired = r;
            break;
          }
          earliest_deadline_ = std::min(earliest_deadline_, r->deadline());
        }
      }
    }
    if (owner_->Aborted()) continue;
    if (expired != nullptr) {
      owner_->Abort(owner_->Expired(*expired));
      continue;
    }
    if (absl::Status health = owner_->Health(); !health.ok()) owner_->Abort(std::move(health));
  }
}

absl::Status DeviceRequest::StreamWait(void* cuda_stream) {
  if (done() && !status().ok()) return status();
  if (const int error = device_runtime::StreamWaitEvent(cuda_stream, done_event_); error != 0) {
    return DeviceStatus(error, "cudaStreamWaitEvent");
  }
  return absl::OkStatus();
}

bool DeviceRequest::Check() {
  if (done()) return true;
  const int q = device_runtime::QueryEvent(done_event_);
  if (q == device_runtime::kNotReady) return false;
  Finish(q);
  return true;
}

void DeviceRequest::Finish(int query_error) {
  if (done()) return;
  absl::Status outcome = query_error == 0 ? watch_->owner().Finished(*this)
                                          : DeviceStatus(query_error, "cudaEventQuery");
  // A failure after the start leaves the ranks out of step.
  if (!outcome.ok()) watch_->owner().Abort(outcome);
  Complete(std::move(outcome));
}

std::string DeviceRequest::Describe() const {
  return sequence_ == kNoSequence ? std::string(what_) : absl::StrCat(what_, " #", sequence_);
}

bool DeviceRequest::Progress() {
  if (Check()) return true;
  return !watch_->owner().Aborted();
}

}  // namespace relay
