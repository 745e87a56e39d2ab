// The CUDA runtime side of runtime/device_runtime.h (host code only;
// compiled by nvcc with the rest of the device code).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "runtime/device_runtime.h"

static_assert(relay::device_runtime::kNotReady == cudaErrorNotReady,
              "kNotReady must be cudaErrorNotReady");

namespace relay {
namespace device_runtime {

int DeviceCount(int* count) {
  *count = 0;
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) *count = 0;
  return e;
}

int CurrentDevice(int* device) { return cudaGetDevice(device); }

int DeviceOfPointer(const void* ptr, int* device) {
  *device = -1;
  cudaPointerAttributes a = {};
  const cudaError_t e = cudaPointerGetAttributes(&a, ptr);
  if (e == cudaErrorInvalidValue) {  // An address CUDA has never seen.
    cudaGetLastError();               // Not sticky, but clear it anyway.
    return cudaSuccess;
  }
  if (e != cudaSuccess) return e;
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) {
    *device = a.device;
  }
  return cudaSuccess;
}

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

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

int StreamId(void* stream, unsigned long long* id) {
  return cudaStreamGetId(static_cast<cudaStream_t>(stream), id);
}

int QueryEvent(void* event) {
  return cudaEventQuery(static_cast<cudaEvent_t>(event));
}

int StreamIsCapturing(void* stream, bool* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t e = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
  *capturing = e == cudaSuccess && status != cudaStreamCaptureStatusNone;
  return e;
}

int IgnoreOtherThreadsCaptures() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
  return cudaThreadExchangeStreamCaptureMode(&mode);
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
    // Every GPU that can reach this one may read and write the pool's
    // memory: a pool's memory is not covered by cudaDeviceEnablePeerAccess,
    // and loopback copies the scratch of one rank's algorithm straight
    // into another GPU's buffers ("invalid argument" on 4 H100s without
    // this).
    int count = 0;
    if (e == cudaSuccess) e = cudaGetDeviceCount(&count);
    for (int peer = 0; e == cudaSuccess && peer < count; ++peer) {
      int can = 0;
      if (peer == device ||
          cudaDeviceCanAccessPeer(&can, peer, device) != cudaSuccess || !can) {
        cudaGetLastError();
        continue;
      }
      cudaMemAccessDesc access = {};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = peer;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      e = cudaMemPoolSetAccess(pools[device], &access, 1);
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

namespace {

// Peer access is a property of a pair of devices in the process, enabled
// once (a second cudaDeviceEnablePeerAccess fails with
// cudaErrorPeerAccessAlreadyEnabled).
std::once_flag peer_once[kMaxDevices][kMaxDevices];
bool peer_reachable[kMaxDevices][kMaxDevices];  // Written once, under peer_once.

// Lets `device` read and write `peer`'s memory where the hardware can;
// the calling thread's current device is restored. True if it can.
bool EnablePeerAccess(int device, int peer) {
  if (device < 0 || peer < 0 || device >= kMaxDevices || peer >= kMaxDevices) {
    return false;
  }
  if (device == peer) return true;
  std::call_once(peer_once[device][peer], [device, peer] {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can) {
      cudaGetLastError();
      return;  // cudaMemcpyPeerAsync stages through the host instead.
    }
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    if (cudaSetDevice(device) == cudaSuccess) {
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled) {
        peer_reachable[device][peer] = true;
      }
      if (e != cudaSuccess) cudaGetLastError();
    }
    cudaSetDevice(current);
  });
  return peer_reachable[device][peer];
}

}  // namespace

namespace {

// One message's bytes from `src` to `dst`, either on any GPU that this one
// can reach (peer access; a pool's memory needs cudaMemPoolSetAccess), as
// a kernel rather than cudaMemcpy*Async. The runtime checks a copy's
// addresses when it is queued, and loopback queues a copy when the message
// is matched, which may be after the sender's algorithm has already queued
// the stream-ordered free of its scratch (cudaFreeAsync, ordered on the GPU
// after the copy, but earlier on the host): cudaMemcpyPeerAsync then
// refused the address ("invalid argument") and cudaMemcpyAsync took it for
// host memory (a segfault), on 4 H100s. A kernel reads the memory in GPU
// order, where it is still allocated.
__global__ void CopyKernel(char* dst, const char* src, size_t bytes) {
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) &
       15) == 0) {
    const size_t vectors = bytes / 16;
    const int4* from = reinterpret_cast<const int4*>(src);
    int4* to = reinterpret_cast<int4*>(dst);
    for (size_t i = first; i < vectors; i += stride) to[i] = from[i];
    done = vectors * 16;
  }
  for (size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

constexpr int kCopyThreads = 512;
constexpr int kCopyMaxBlocks = 64;  // Enough loads in flight for NVLink.

// The copy kernel, loaded on `device` before it is first queued there. CUDA
// loads kernels lazily (CUDA_MODULE_LOADING=LAZY, the default since 12.2),
// and loading one waits for the device's running kernels, among them any
// kernel waiting for a peer (NCCL's): a load in the middle of a collective
// can wait for work that waits for this thread. cudaFuncGetAttributes loads
// a kernel, as NCCL does for its own at initialisation.
std::once_flag own_kernels_once[kMaxDevices];
cudaError_t own_kernels_error[kMaxDevices];

cudaError_t LoadCopyKernel(int device) {
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(own_kernels_once[device], [device] {
    cudaFuncAttributes a;
    own_kernels_error[device] = cudaFuncGetAttributes(&a, CopyKernel);
  });
  return own_kernels_error[device];
}

}  // namespace

int SetDevice(int device) { return cudaSetDevice(device); }

int CopyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                  size_t bytes, void* stream) {
  if (bytes == 0) return cudaSuccess;
  // The kernel runs on the stream's GPU (loopback's copy lane: the
  // receiver's current one, normally the destination's), which must reach
  // both buffers.
  int runs_on = dst_device;
  const cudaError_t e =
      stream == nullptr
          ? cudaGetDevice(&runs_on)
          : cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &runs_on);
  if (e != cudaSuccess) return e;
  bool reachable = EnablePeerAccess(runs_on, src_device);
  reachable = EnablePeerAccess(runs_on, dst_device) && reachable;
  if (!reachable) {  // Staged through the host by CUDA.
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes,
                               static_cast<cudaStream_t>(stream));
  }
  const size_t per_block = static_cast<size_t>(kCopyThreads) * 16 * 4;
  const int blocks = static_cast<int>(std::min<size_t>(
      kCopyMaxBlocks, std::max<size_t>(1, bytes / per_block)));
  // Launched on the stream's GPU, from whichever thread matched the message.
  ScopedDevice on_stream_device(runs_on);
  if (on_stream_device.error() != cudaSuccess) return on_stream_device.error();
  if (const cudaError_t loaded = LoadCopyKernel(runs_on);
      loaded != cudaSuccess) {
    return loaded;
  }
  CopyKernel<<<blocks, kCopyThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  return cudaGetLastError();
}

}  // namespace device_runtime
}  // namespace relay
