// Built instead of device_runtime.cu where CUDA was not found at configure
// time: every call reports that there is no CUDA.
#include "collectives/device_runtime.h"

namespace relay {
namespace device_runtime {
namespace {
constexpr int kNoCuda = -1;
}  // namespace

int CurrentDevice(int*) { return kNoCuda; }
int CreateNonBlockingStream(void**) { return kNoCuda; }
int DestroyStream(void*) { return kNoCuda; }
int CreateEvent(void**) { return kNoCuda; }
int DestroyEvent(void*) { return kNoCuda; }
int RecordEvent(void*, void*) { return kNoCuda; }
int StreamWaitEvent(void*, void*) { return kNoCuda; }
int QueryEvent(void*) { return kNoCuda; }
int SynchronizeEvent(void*) { return kNoCuda; }
int AllocateAsync(void**, size_t, void*) { return kNoCuda; }
int FreeAsync(void*, void*) { return kNoCuda; }
int CopyAsync(void*, const void*, size_t, void*) { return kNoCuda; }

}  // namespace device_runtime
}  // namespace relay
