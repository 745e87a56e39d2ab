// The CUDA runtime side of collectives/device_runtime.h (host code only;
// compiled by nvcc with the rest of the device code).
#include <cuda_runtime.h>

#include "collectives/device_runtime.h"

static_assert(relay::device_runtime::kNotReady == cudaErrorNotReady,
              "kNotReady must be cudaErrorNotReady");

namespace relay {
namespace device_runtime {

int CurrentDevice(int* device) { return cudaGetDevice(device); }

int CreateNonBlockingStream(void** stream) {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return e;
}

int DestroyStream(void* stream) {
  return cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

int CreateEvent(void** event) {
  cudaEvent_t e = nullptr;
  const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  *event = e;
  return r;
}

int DestroyEvent(void* event) {
  return cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

int RecordEvent(void* event, void* stream) {
  return cudaEventRecord(static_cast<cudaEvent_t>(event),
                         static_cast<cudaStream_t>(stream));
}

int StreamWaitEvent(void* stream, void* event) {
  return cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                             static_cast<cudaEvent_t>(event), 0);
}

int QueryEvent(void* event) {
  return cudaEventQuery(static_cast<cudaEvent_t>(event));
}

int SynchronizeEvent(void* event) {
  return cudaEventSynchronize(static_cast<cudaEvent_t>(event));
}

int AllocateAsync(void** ptr, size_t bytes, void* stream) {
  return cudaMallocAsync(ptr, bytes, static_cast<cudaStream_t>(stream));
}

int FreeAsync(void* ptr, void* stream) {
  return cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));
}

int CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                         static_cast<cudaStream_t>(stream));
}

}  // namespace device_runtime
}  // namespace relay
