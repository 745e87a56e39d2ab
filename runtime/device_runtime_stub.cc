// Built instead of device_runtime.cu where CUDA was not found at configure
// time: every call reports that there is no CUDA.
#include "runtime/device_runtime.h"

namespace relay {
namespace device_runtime {
namespace {
constexpr int kNoCuda = -1;
}  // namespace

int DeviceCount(int* count) {
  *count = 0;
  return kNoCuda;
}
int CurrentDevice(int*) { return kNoCuda; }
int SetDevice(int) { return kNoCuda; }
int DeviceOfPointer(const void*, int* device) {
  *device = -1;
  return kNoCuda;
}
const char* ErrorString(int) { return "this build of relay has no CUDA"; }
int CreateNonBlockingStream(void**) { return kNoCuda; }
int DestroyStream(void*) { return kNoCuda; }
int CreateEvent(void**) { return kNoCuda; }
int DestroyEvent(void*) { return kNoCuda; }
int RecordEvent(void*, void*) { return kNoCuda; }
int StreamWaitEvent(void*, void*) { return kNoCuda; }
int StreamId(void*, unsigned long long*) { return kNoCuda; }
int QueryEvent(void*) { return kNoCuda; }
int IgnoreOtherThreadsCaptures() { return kNoCuda; }
int StreamIsCapturing(void*, bool* capturing) {
  *capturing = false;
  return kNoCuda;
}
int SynchronizeEvent(void*) { return kNoCuda; }
int AllocateAsync(void**, size_t, void*) { return kNoCuda; }
int FreeAsync(void*, void*) { return kNoCuda; }
int CopyAsync(void*, const void*, size_t, void*) { return kNoCuda; }
int CopyPeerAsync(void*, int, const void*, int, size_t, void*) {
  return kNoCuda;
}

}  // namespace device_runtime
}  // namespace relay
