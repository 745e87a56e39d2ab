// File: collectives/device_reduce.h
//
// Reduction kernels for device (CUDA) memory: every dtype x op, enqueued on
// the caller's stream, so relay's own algorithms can run on device buffers
// (over NCCL point-to-point, or loopback between GPUs of one process).
// float16 and bfloat16 compute in float32; integer sum and product wrap;
// kAvg is a sum followed by DeviceDivide, as on the host.
//
// A build without CUDA still has these functions: DeviceReduceAvailable()
// is false and every call returns FailedPrecondition.
//
// Example (a and b on the device, stream a cudaStream_t):
//   RELAY_RETURN_IF_ERROR(DeviceReduce(DataType::kBFloat16, ReduceOp::kSum,
//                                      a, b, a, count, stream));
#ifndef RELAY_COLLECTIVES_DEVICE_REDUCE_H_
#define RELAY_COLLECTIVES_DEVICE_REDUCE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "runtime/data_type.h"

namespace relay {

// True if this build has device code and a GPU is visible.
bool DeviceReduceAvailable();

// out[i] = a[i] op b[i] for `count` elements; `out` may alias `a` or `b`.
// Asynchronous on `stream` (a cudaStream_t; null: the default stream).
// `max_blocks` > 0 caps the kernel's grid (blocks of 512 threads), so that
// work queued beside it on other streams (NCCL's kernels) finds free
// multiprocessors; 0 fills the GPU. InvalidArgument for null pointers with
// count > 0, op kAvg (sum, then DeviceDivide) or a negative max_blocks;
// Internal with CUDA's message if the launch fails.
absl::Status DeviceReduce(DataType dtype, ReduceOp op, const void* a,
                          const void* b, void* out, size_t count,
                          void* stream, int max_blocks = 0);

// data[i] /= divisor on the device (integers truncate toward zero).
absl::Status DeviceDivide(DataType dtype, void* data, size_t count,
                          double divisor, void* stream);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_DEVICE_REDUCE_H_
