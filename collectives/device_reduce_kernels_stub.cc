// Built instead of device_reduce_kernels.cu where CUDA was not found at
// configure time: no device code, and every launch reports it.
#include "collectives/device_reduce_kernels.h"

namespace relay {
namespace device_kernels {

namespace {
constexpr int kNoCuda = -1;
}  // namespace

bool Compiled() { return false; }
int DeviceCount() { return 0; }
int Reduce(Type, Op, const void*, const void*, void*, size_t, void*, int) {
  return kNoCuda;
}
int Divide(Type, void*, size_t, double, void*) { return kNoCuda; }
int LoadAll() { return kNoCuda; }
const char* ErrorString(int) {
  return "relay was built without CUDA (no nvcc at configure time)";
}

}  // namespace device_kernels
}  // namespace relay
