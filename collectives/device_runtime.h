// File: collectives/device_runtime.h
//
// The CUDA runtime calls the stream executor needs (streams, events,
// stream-ordered memory, copies), as a plain C++ interface (no Abseil, no
// CUDA headers) so a build without CUDA links a stub. Every call returns a
// cudaError_t value (0: success; the stub returns -1); ErrorString in
// device_reduce_kernels.h explains it. Use collectives/device_stream_ops.h.
#ifndef RELAY_COLLECTIVES_DEVICE_RUNTIME_H_
#define RELAY_COLLECTIVES_DEVICE_RUNTIME_H_

#include <cstddef>

namespace relay {
namespace device_runtime {

// The device current on this thread.
int CurrentDevice(int* device);
// A stream that does not synchronise with the legacy default stream.
int CreateNonBlockingStream(void** stream);
// Returns at once; the stream is released when its queued work finishes.
int DestroyStream(void* stream);
// An event without timing (cheapest to record and wait on).
int CreateEvent(void** event);
int DestroyEvent(void* event);
int RecordEvent(void* event, void* stream);
int StreamWaitEvent(void* stream, void* event);
// 0 once the work before the event's record has finished; 600
// (cudaErrorNotReady) while it has not.
int QueryEvent(void* event);
int SynchronizeEvent(void* event);
// Stream-ordered allocation from relay's own pool on the current device,
// which keeps its memory between calls (see device_runtime.cu).
int AllocateAsync(void** ptr, size_t bytes, void* stream);
int FreeAsync(void* ptr, void* stream);
int CopyAsync(void* dst, const void* src, size_t bytes, void* stream);

constexpr int kNotReady = 600;  // cudaErrorNotReady

}  // namespace device_runtime
}  // namespace relay

#endif  // RELAY_COLLECTIVES_DEVICE_RUNTIME_H_
