// The CUDA runtime side of collectives/device_runtime.h (host code only;
// compiled by nvcc with the rest of the device code).
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>

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

namespace {

// relay's own stream-ordered pool for each device. The device's default
// pool gives its memory back at every synchronisation (its release
// threshold is 0), so a collective that allocates its scratch each call
// had it mapped anew each call; this pool keeps what it has (up to the
// largest scratch a call needed) and leaves the default pool, which the
// application may tune, alone.
constexpr int kMaxDevices = 64;
cudaMemPool_t pools[kMaxDevices];
std::once_flag pool_once[kMaxDevices];
cudaError_t pool_error[kMaxDevices];

cudaError_t PoolOf(int device, cudaMemPool_t* pool) {
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(pool_once[device], [device] {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaError_t e = cudaMemPoolCreate(&pools[device], &props);
    if (e == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      e = cudaMemPoolSetAttribute(pools[device],
                                  cudaMemPoolAttrReleaseThreshold, &keep);
    }
    pool_error[device] = e;
  });
  *pool = pools[device];
  return pool_error[device];
}

}  // namespace

int AllocateAsync(void** ptr, size_t bytes, void* stream) {
  // The stream's device, as cudaMallocAsync would use (the legacy stream
  // is the current device's).
  int device = 0;
  cudaError_t e = stream == nullptr
                      ? cudaGetDevice(&device)
                      : cudaStreamGetDevice(static_cast<cudaStream_t>(stream),
                                            &device);
  cudaMemPool_t pool = nullptr;
  if (e == cudaSuccess) e = PoolOf(device, &pool);
  if (e != cudaSuccess) return e;
  return cudaMallocFromPoolAsync(ptr, bytes, pool,
                                 static_cast<cudaStream_t>(stream));
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
