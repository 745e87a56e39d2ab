// File: runtime/operation_order.h
//
// OperationOrder: keeps a GPU transport's operations in posting order
// whatever CUDA streams they go on. Each operation goes on the transport's
// own stream or on a caller's (StreamOrder::kOnStream); one queued on
// another stream than the operation before it first waits, on the GPU, for
// that operation's completion event. So a transport runs one operation at
// a time: NCCL requires it of one communicator (and advises it across
// communicators on one GPU, whose kernels may not all progress at once),
// and cuda_ipc's kernels count the calls they have seen.
//
// Streams are told apart by cudaStreamGetId, not by handle: CUDA hands a
// destroyed stream's handle out again while its work still runs (seen on
// an H200: cuda_ipc_transport_test, CallOnANewStreamWaitsForADestroyed-
// StreamsCall), and an id is never reused. The completion event may have
// gone back to its pool with its request: a wait captures the event's last
// record, which only a later operation, under the same lock, changes.
// Calls captured into a CUDA graph are ordered by the capture and touch
// none of this (a capturing stream has no id to give).
//
// Not thread-safe: the transport's enqueue lock guards it.
//
// Example (under the enqueue lock):
//   unsigned long long id;
//   RETURN_IF_ERROR(order.Before(stream, &id));
//   ... queue the operation on `stream`, record `done` after it ...
//   order.After(id, done);
#ifndef RELAY_RUNTIME_OPERATION_ORDER_H_
#define RELAY_RUNTIME_OPERATION_ORDER_H_

#include "absl/status/status.h"
#include "runtime/device_runtime.h"
#include "runtime/device_status.h"

namespace relay {

class OperationOrder {
 public:
  // `own_stream`: the transport's stream, whose id is asked once, here.
  absl::Status Init(void* own_stream) {
    own_ = own_stream;
    return DeviceStatus(device_runtime::StreamId(own_stream, &own_id_), "cudaStreamGetId");
  }

  // Before an operation is queued on `stream`: its id into `*id` (asked of
  // CUDA unless it is the transport's own stream), and where the last
  // operation went on another stream, a wait on `stream` for it.
  absl::Status Before(void* stream, unsigned long long* id) const {
    *id = own_id_;
    if (stream != own_) {
      if (absl::Status s = DeviceStatus(device_runtime::StreamId(stream, id), "cudaStreamGetId");
          !s.ok()) {
        return s;
      }
    }
    if (last_done_ == nullptr || *id == last_id_) return absl::OkStatus();
    return DeviceStatus(device_runtime::StreamWaitEvent(stream, last_done_),
                        "cudaStreamWaitEvent (the previous operation)");
  }

  // The operation is queued on the stream of id `id`, and `done` recorded
  // after it.
  void After(unsigned long long id, void* done) {
    last_id_ = id;
    last_done_ = done;
  }

  // Makes `stream` wait for the last operation, if any (a transport's
  // teardown, before its own stream's last work). A cudaError_t value.
  int WaitForLast(void* stream) const {
    return last_done_ == nullptr ? 0 : device_runtime::StreamWaitEvent(stream, last_done_);
  }

 private:
  void* own_ = nullptr;
  unsigned long long own_id_ = 0;
  unsigned long long last_id_ = 0;  // Meaningful once last_done_ is set.
  void* last_done_ = nullptr;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_OPERATION_ORDER_H_
