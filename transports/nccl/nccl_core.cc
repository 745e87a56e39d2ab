#include "transports/nccl/nccl_core.h"

#include <algorithm>

#include "runtime/fast_clock.h"
#include "transports/nccl/finished_prefix.h"

namespace relay {
namespace nccl_internal {
namespace {

// How often the watchdog looks at pending requests. It completes requests
// nobody waits on (so OnDone callbacks run), and its period bounds how late
// a timeout is noticed.
constexpr std::chrono::microseconds kWatchdogPeriod = std::chrono::milliseconds(1);
// Its shortest sleep between looks while requests are pending (see
// WatchdogLoop).
constexpr std::chrono::microseconds kWatchdogMinPause(50);
// The most pending requests the watchdog probes per look (their oldest
// first), so a look costs O(batch), not O(queue), under the lock each
// enqueue takes too: a loop that issues faster than the GPU runs queues
// thousands. Requests finish in queue order, so the next look takes the
// next batch.
constexpr size_t kWatchdogProbeBatch = 256;
// How long Abort waits for a thread inside an NCCL enqueue call before
// aborting under it (that call may be blocked on a peer that is gone, and
// ncclCommAbort is what unblocks it).
constexpr auto kAbortGrace = std::chrono::milliseconds(200);

}  // namespace

void Core::Watch(std::shared_ptr<NcclRequest> request) {
  posted.Push(std::move(request));
  if (watchdog_idle.load(std::memory_order_seq_cst)) {
    // Under the lock, the watchdog is either before its predicate (which
    // sees the push) or asleep (and woken).
    { std::lock_guard<std::mutex> lock(watch_mu); }
    watch_cv.notify_one();
  }
  // An abort that drained `posted` before this push fails it too.
  if (aborted.load(std::memory_order_seq_cst)) FailPending(AbortReason());
}

void Core::TakePostedLocked() {
  posted.TakeAll([this](std::shared_ptr<NcclRequest> r) {
    earliest_deadline = std::min(earliest_deadline, r->deadline());
    pending.push_back(std::move(r));
  });
}

void Core::Abort(absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (!aborted.load(std::memory_order_relaxed)) {
      abort_reason = why;
      aborted.store(true, std::memory_order_seq_cst);
      // Wait briefly for an enqueue in progress; one that stays is blocked
      // on a peer inside NCCL, and only the abort below frees it.
      const bool idle = enqueue_mu.try_lock_for(kAbortGrace);
      for (ncclComm_t c : OwnedComms()) ncclCommAbort(c);
      comm_aborted = true;
      if (idle) enqueue_mu.unlock();
    }
  }
  FailPending(why);
}

void Core::FailPending(const absl::Status& why) {
  std::deque<std::shared_ptr<NcclRequest>> failing;
  {
    std::lock_guard<std::mutex> lock(watch_mu);
    TakePostedLocked();
    failing.swap(pending);
  }
  for (const std::shared_ptr<NcclRequest>& r : failing) r->Complete(why);
}

void Core::WatchdogLoop() {
  // How long to sleep between looks while requests are pending: short
  // right after one completed (work is flowing, and a request nobody waits
  // on completes soon after its GPU work), doubling up to the period while
  // none does. Never zero: a watchdog that looked again at once spun on
  // cudaEventQuery while anything was queued, and its driver calls slowed
  // the thread enqueueing the next operation.
  const auto min_pause = kWatchdogMinPause;
  auto pause = min_pause;
  while (true) {
    std::shared_ptr<NcclRequest> expired;
    {
      std::unique_lock<std::mutex> lock(watch_mu);
      TakePostedLocked();
      if (pending.empty()) {
        earliest_deadline = absl::InfiniteFuture();
        watchdog_idle.store(true, std::memory_order_seq_cst);
        watch_cv.wait_for(lock, kWatchdogPeriod,
                          [&] { return stopping || !posted.empty(); });
        watchdog_idle.store(false, std::memory_order_relaxed);
        pause = min_pause;
      } else {
        watch_cv.wait_for(lock, pause, [&] { return stopping; });
      }
      if (stopping) return;
      TakePostedLocked();
      // Requests finish in the order they were queued: on one stream, or
      // each after the one before it (Core::last_done). So the boundary
      // between finished and not is found by a binary search over their
      // completion events, a few cudaEventQuery calls per look whatever
      // the queue's length. (One call per request
      // kept this thread in the driver, whose lock the thread enqueueing the
      // next operation needs too: profiled on an H100, the watchdog took a
      // third as much CPU as the enqueueing thread.)
      probe_events.clear();
      const size_t probed = std::min(pending.size(), kWatchdogProbeBatch);
      for (size_t i = 0; i < probed; ++i) {
        probe_events.push_back(pending[i]->event());
      }
      lock.unlock();
      // Only Abort removes requests other than this thread, and it sets
      // `aborted` first: the events stay valid unless that is set.
      // A failed query is reported by Check() on that request.
      const FinishedPrefixResult found =
          FinishedPrefix(probe_events.size(), [&](size_t i) {
            const cudaError_t q = cudaEventQuery(probe_events[i]);
            return q == cudaSuccess         ? ProbeResult::kFinished
                   : q == cudaErrorNotReady ? ProbeResult::kRunning
                                            : ProbeResult::kFailed;
          });
      const size_t finished = found.finished;
      const bool query_failed = found.failed;
      lock.lock();
      if (aborted.load(std::memory_order_acquire)) continue;
      completing.clear();
      for (size_t i = 0; i < finished && !pending.empty(); ++i) {
        completing.push_back(std::move(pending.front()));
        pending.pop_front();
      }
      if (query_failed && !pending.empty()) completing.push_back(pending.front());
      lock.unlock();
      // In queue order, outside the lock: completion runs callbacks, which
      // may post work.
      for (size_t i = 0; i < completing.size(); ++i) {
        if (i < finished) {
          completing[i]->Complete(absl::OkStatus());
        } else {
          completing[i]->Check();
        }
      }
      completing.clear();  // Requests may die here, outside the lock.
      lock.lock();
      if (query_failed) {
        while (!pending.empty() && pending.front()->done()) pending.pop_front();
      }
      pause = finished > 0 ? min_pause
                           : std::clamp<std::chrono::microseconds>(
                                 2 * pause, min_pause,
                                 std::max(kWatchdogPeriod, min_pause));
      const absl::Time now = FastNow();
      if (now > earliest_deadline) {
        earliest_deadline = absl::InfiniteFuture();
        for (const std::shared_ptr<NcclRequest>& r : pending) {
          if (r->done()) continue;
          if (now > r->deadline()) {
            expired = r;
            break;
          }
          earliest_deadline = std::min(earliest_deadline, r->deadline());
        }
      }
    }
    if (aborted.load(std::memory_order_acquire)) continue;
    if (expired != nullptr) {
      Abort(absl::DeadlineExceededError(absl::StrCat(
          "nccl: ", expired->Describe(), " on rank ", rank,
          " did not complete within its timeout; the NCCL communicator was "
          "aborted (a peer stopped participating or is too slow)")));
      continue;
    }
    ncclResult_t async = ncclSuccess;
    ncclComm_t failed = nullptr;
    {
      // ncclCommGetAsyncError must not race ncclCommAbort.
      std::lock_guard<std::mutex> lock(abort_mu);
      for (ncclComm_t c : OwnedComms()) {
        if (comm_aborted || failed != nullptr) continue;
        if (ncclCommGetAsyncError(c, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          failed = c;
        }
      }
    }
    if (failed != nullptr) {
      absl::Status s = NcclStatus(async, "nccl (asynchronous error)", failed);
      Abort(absl::Status(
          absl::IsInvalidArgument(s) ? absl::StatusCode::kInternal : s.code(),
          absl::StrCat(s.message(), " on rank ", rank)));
    }
  }
}

}  // namespace nccl_internal
}  // namespace relay
