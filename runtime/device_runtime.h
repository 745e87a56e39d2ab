// File: runtime/device_runtime.h
//
// The CUDA runtime calls that relay's algorithms and transports make
// (streams, events, stream-ordered memory, copies between GPUs), as a plain
// C++ interface (no Abseil, no CUDA headers), so a build without CUDA links
// a stub and code above it compiles either way. It lives in runtime/ so that
// collectives/ (the stream executor, through device_stream_ops.h) and
// transports/ (loopback's copies between GPUs) share one shim. Every call
// returns a cudaError_t value (0: success; the stub returns -1), which
// ErrorString explains.
#ifndef RELAY_RUNTIME_DEVICE_RUNTIME_H_
#define RELAY_RUNTIME_DEVICE_RUNTIME_H_

#include <cstddef>
#include <cstdint>

namespace relay {
namespace device_runtime {

// Visible GPUs; 0 (and an error) without CUDA or a driver.
int DeviceCount(int* count);
// The device current on this thread, and cudaSetDevice.
int CurrentDevice(int* device);
int SetDevice(int device);

// Makes `device` current on this thread for a scope, and the one before
// current again at its end: a thread may work for several GPUs (loopback's
// matching thread queues a copy on the receiver's; a transport's caller
// may have another GPU current). error() is the switch's (0: done, or not
// needed).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    error_ = CurrentDevice(&previous_);
    if (error_ == 0 && previous_ != device) {
      error_ = SetDevice(device);
      switched_ = error_ == 0;
    }
  }
  ~ScopedDevice() {
    if (switched_) SetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  int error() const { return error_; }

 private:
  int previous_ = -1;
  int error_ = 0;
  bool switched_ = false;
};
// The device memory at `ptr` lives on, or -1 for host memory (registered,
// pinned or pageable) and addresses CUDA does not know.
int DeviceOfPointer(const void* ptr, int* device);
// What an error value means (cudaGetErrorString; "no CUDA" in the stub).
const char* ErrorString(int error);
// A stream that does not synchronise with the legacy default stream.
int CreateNonBlockingStream(void** stream);
// Returns at once; the stream is released when its queued work finishes.
int DestroyStream(void* stream);
// An event without timing (cheapest to record and wait on).
int CreateEvent(void** event);
int DestroyEvent(void* event);
int RecordEvent(void* event, void* stream);
int StreamWaitEvent(void* stream, void* event);
// cudaStreamGetId: an id no other stream ever gets, unlike its handle.
int StreamId(void* stream, unsigned long long* id);
// 0 once the work before the event's record has finished; 600
// (cudaErrorNotReady) while it has not.
int QueryEvent(void* event);
// Lets the calling thread make calls that a capture in global mode on
// another thread forbids (cudaEventQuery among them), by setting the
// thread's capture mode to thread-local: for a thread that watches work
// queued by others (DeviceWatch's watchdog), whose queries would otherwise
// invalidate a user's capture and fail.
int IgnoreOtherThreadsCaptures();
// Whether work queued on `stream` (null: the legacy default stream) now
// goes into a CUDA graph being captured.
int StreamIsCapturing(void* stream, bool* capturing);
int SynchronizeEvent(void* event);
// Stream-ordered allocation from relay's own pool on the current device,
// which keeps its memory between calls (see device_runtime.cu).
int AllocateAsync(void** ptr, size_t bytes, void* stream);
int FreeAsync(void* ptr, void* stream);
int CopyAsync(void* dst, const void* src, size_t bytes, void* stream);
// `bytes` from GPU `src_device` to GPU `dst_device` (the same one or
// another) on `stream`, by a copy kernel on the stream's GPU that reads or
// writes the other GPU's memory directly: its addresses are used in GPU
// order only, so memory whose stream-ordered free was queued on the host
// before this copy, but runs after it on the GPU, is still fine
// (device_runtime.cu says why that matters). The first copy from a GPU
// enables its peer access to the buffers' GPUs; between GPUs without it,
// CUDA's cudaMemcpyPeerAsync stages the copy through host memory (and
// checks its addresses when queued). Memory from a stream-ordered pool must
// be accessible to the other GPU (cudaMemPoolSetAccess; relay's own pool
// is). Thread-safe; leaves the calling thread's current device as it was.
int CopyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                  size_t bytes, void* stream);

constexpr int kNotReady = 600;  // cudaErrorNotReady

}  // namespace device_runtime
}  // namespace relay

#endif  // RELAY_RUNTIME_DEVICE_RUNTIME_H_
