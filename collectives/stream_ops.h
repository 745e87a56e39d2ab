// File: collectives/stream_ops.h
//
// StreamOps: what the stream executor (stream_executor.h) asks of a device:
// streams, events, stream-ordered memory, copies and reductions, and a way
// to order a stream after a transport's request. DeviceStreamOps
// (device_stream_ops.h) is CUDA's. A host implementation, where a "stream"
// runs each operation at once and waits on the host, lets the executor's
// logic run in tests on machines without a GPU.
//
// Handles (`void*` streams, events, memory) belong to the implementation;
// every call that enqueues work returns an error if the device refused it.
#ifndef RELAY_COLLECTIVES_STREAM_OPS_H_
#define RELAY_COLLECTIVES_STREAM_OPS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/data_type.h"
#include "runtime/request.h"

namespace relay {

class StreamOps {
 public:
  virtual ~StreamOps() = default;

  // A stream of the current device for one run; DeleteStream may be called
  // while work is still queued on it (it is released when that finishes).
  virtual absl::StatusOr<void*> NewStream() = 0;
  virtual void DeleteStream(void* stream) = 0;

  // An event; DeleteEvent may likewise be called while it is pending.
  virtual absl::StatusOr<void*> NewEvent() = 0;
  virtual void DeleteEvent(void* event) = 0;
  virtual absl::Status Record(void* event, void* stream) = 0;
  virtual absl::Status StreamWaitEvent(void* stream, void* event) = 0;
  // True once the work recorded before `event` has finished.
  virtual bool EventDone(void* event) = 0;
  // Blocks the host until then.
  virtual absl::Status Synchronize(void* event) = 0;

  // Memory that is valid for work queued on `stream` after this call, and
  // for other streams ordered after it; Free returns it once the work
  // queued on `stream` before the Free has finished.
  virtual absl::StatusOr<void*> Allocate(size_t bytes, void* stream) = 0;
  virtual absl::Status Free(void* memory, void* stream) = 0;

  virtual absl::Status Copy(void* dst, const void* src, size_t bytes,
                            void* stream) = 0;
  // out = a op b, element-wise (op is not kAvg).
  virtual absl::Status Reduce(DataType dtype, ReduceOp op, const void* a,
                              const void* b, void* out, size_t count,
                              void* stream) = 0;
  virtual absl::Status Divide(DataType dtype, void* data, size_t count,
                              double divisor, void* stream) = 0;

  // Orders `stream` after `request` (a transport's request for work posted
  // on `stream`).
  virtual absl::Status WaitRequest(Request& request, void* stream) = 0;
};

}  // namespace relay

#endif  // RELAY_COLLECTIVES_STREAM_OPS_H_
