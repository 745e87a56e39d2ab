// File: collectives/device_reduce_kernels.h
//
// The CUDA side of collectives/device_reduce.h, as a plain C++ interface
// (no Abseil, no CUDA headers) so that nvcc compiles its implementation and
// a build without CUDA links a stub instead. Use device_reduce.h.
#ifndef RELAY_COLLECTIVES_DEVICE_REDUCE_KERNELS_H_
#define RELAY_COLLECTIVES_DEVICE_REDUCE_KERNELS_H_

#include <cstddef>

namespace relay {
namespace device_kernels {

enum class Type {
  kInt8, kUint8, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBFloat16, kFloat32, kFloat64,
};
enum class Op { kSum, kProd, kMin, kMax };

// True if this build has the device code (nvcc compiled it).
bool Compiled();
// CUDA devices visible to this process (0 without a driver or a GPU).
int DeviceCount();
// out[i] = a[i] op b[i] for `count` elements on device memory, enqueued on
// `stream` (a cudaStream_t; null for the legacy default stream). `out` may
// alias `a` or `b`. float16 and bfloat16 compute in float32 and round to
// nearest even; integer sum and product wrap. `max_blocks` > 0 caps the
// grid (blocks of 512 threads), leaving the other multiprocessors to work
// queued beside it; 0 fills the GPU. Returns a cudaError_t value (0:
// success).
int Reduce(Type type, Op op, const void* a, const void* b, void* out,
           size_t count, void* stream, int max_blocks = 0);
// data[i] /= divisor (integers truncate toward zero), for average.
int Divide(Type type, void* data, size_t count, double divisor, void* stream);
// Loads every kernel above onto the current device, once per device (CUDA
// loads kernels lazily, and loading one waits for the device's running
// kernels, among them a stream's wait for a peer that waits for this
// thread: transports/loopback/device_messages.h). Call it before queueing
// work that may wait for other threads; later calls return at once.
int LoadAll();
// CUDA's text for an error returned above.
const char* ErrorString(int error);

}  // namespace device_kernels
}  // namespace relay

#endif  // RELAY_COLLECTIVES_DEVICE_REDUCE_KERNELS_H_
