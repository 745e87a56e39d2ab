// File: transports/nccl/nccl_core.h
//
// What an NCCL transport shares with its requests and its watchdog thread
// (Core): the communicators, the stream and events that order work on the
// GPU, and the DeviceWatch (runtime/device_watch.h) that completes the
// requests, enforces their deadlines and, through Health, turns NCCL's
// asynchronous errors into an abort. nccl_transport.cc posts the work;
// nccl_comms.h makes the communicators. Internal to transports/nccl/.
#ifndef RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_
#define RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/device_buffer_check.h"
#include "runtime/device_watch.h"
#include "runtime/operation_order.h"
#include "runtime/request.h"
#include "runtime/status_macros.h"
#include "runtime/transport.h"
#include "transports/nccl/nccl_status.h"

namespace relay {
namespace nccl_internal {

// What a transport shares with its requests and its watchdog.
struct Core final : DeviceWatchOwner {
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
  // One operation at a time, in posting order, whatever the streams (NCCL
  // requires it of one communicator); guarded by enqueue_mu.
  OperationOrder order;
  CheckedPointers checked_pointers;

  // NCCL communicators are not thread-safe: one enqueue at a time. Timed, so
  // Abort can give up on a caller stuck inside NCCL (kAbortGrace).
  std::timed_mutex enqueue_mu;
  std::atomic<bool> aborted{false};
  mutable std::mutex abort_mu;
  absl::Status abort_reason;  // Guarded by abort_mu.
  bool comm_aborted = false;  // Guarded by abort_mu: ncclCommAbort ran.

  // The requests' completion events and the watchdog.
  DeviceWatch watch{this};

  ~Core() {
    watch.Stop();  // The transport stopped it; Health must not outlive the comms.
    if (!comm_aborted) {
      for (ncclComm_t c : OwnedComms()) ncclCommDestroy(c);
    }
    if (barrier_scratch != nullptr) cudaFree(barrier_scratch);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // DeviceWatchOwner. Abort aborts the NCCL communicators once and fails
  // every request with `why`; safe from any thread, the watchdog included.
  void Abort(absl::Status why) override;
  bool Aborted() const override { return aborted.load(std::memory_order_acquire); }
  absl::Status AbortReason() const override {
    std::lock_guard<std::mutex> lock(abort_mu);
    return abort_reason;
  }
  absl::Status Expired(const DeviceRequest& request) override;
  // NCCL's asynchronous errors.
  absl::Status Health() override;
};

}  // namespace nccl_internal
}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_NCCL_CORE_H_
