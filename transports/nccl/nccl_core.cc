#include "transports/nccl/nccl_core.h"

namespace relay {
namespace nccl_internal {
namespace {

// How long Abort waits for a thread inside an NCCL enqueue call before
// aborting under it (that call may be blocked on a peer that is gone, and
// ncclCommAbort is what unblocks it).
constexpr auto kAbortGrace = std::chrono::milliseconds(200);

}  // namespace

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
  watch.FailAll(why);
}

absl::Status Core::Expired(const DeviceRequest& request) {
  return absl::DeadlineExceededError(absl::StrCat(
      "nccl: ", request.Describe(), " on rank ", rank,
      " did not complete within its timeout; the NCCL communicator was "
      "aborted (a peer stopped participating or is too slow)"));
}

absl::Status Core::Health() {
  ncclResult_t async = ncclSuccess;
  ncclComm_t failed = nullptr;
  {
    // ncclCommGetAsyncError must not race ncclCommAbort.
    std::lock_guard<std::mutex> lock(abort_mu);
    for (ncclComm_t c : OwnedComms()) {
      if (comm_aborted || failed != nullptr) continue;
      if (ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        failed = c;
      }
    }
  }
  if (failed == nullptr) return absl::OkStatus();
  absl::Status s = NcclStatus(async, "nccl (asynchronous error)", failed);
  return absl::Status(absl::IsInvalidArgument(s) ? absl::StatusCode::kInternal : s.code(),
                      absl::StrCat(s.message(), " on rank ", rank));
}

}  // namespace nccl_internal
}  // namespace relay
