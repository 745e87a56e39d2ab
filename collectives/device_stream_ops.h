// File: collectives/device_stream_ops.h
//
// CUDA's StreamOps: non-blocking streams, events without timing,
// cudaMallocAsync/cudaFreeAsync from the device's default pool, the device
// reduction kernels of device_reduce.h, and Request::StreamWait. Work goes
// to the device current on the calling thread.
//
// Example:
//   if (DeviceStreamOpsAvailable()) {
//     Request r = ExecuteScheduleOnStream(schedule, ctx, stream,
//                                         DeviceStreamOps());
//   }
#ifndef RELAY_COLLECTIVES_DEVICE_STREAM_OPS_H_
#define RELAY_COLLECTIVES_DEVICE_STREAM_OPS_H_

#include <memory>

#include "absl/status/status.h"

#include "collectives/stream_ops.h"

namespace relay {

// True if this build has CUDA and a GPU is visible.
bool DeviceStreamOpsAvailable();

// One shared instance (stateless).
std::shared_ptr<StreamOps> DeviceStreamOps();

// Loads the device reduction kernels onto the current device now, once per
// process and device. A run loads them before it queues anything anyway;
// this moves the wait to when a communicator is made: CUDA waits for the
// GPU to go idle to load a kernel, so a job's first reduction would stall
// behind its compute.
absl::Status LoadDeviceKernels();

// True if work queued on `stream` (null: the legacy default stream) now
// goes into a CUDA graph being captured; false without CUDA.
bool StreamIsCapturing(void* stream);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_DEVICE_STREAM_OPS_H_
