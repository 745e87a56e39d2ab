// File: transports/cuda_ipc/allocations.h
//
// Allocations: which CUDA allocation holds a device address, asked of the
// driver through the runtime (relay does not link libcuda). A symmetric
// window shares its region's whole allocation (its IPC handle), and a
// window must not outlive that allocation: each call into a window asks
// whether the allocation it registered is still the one there.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_ALLOCATIONS_H_
#define RELAY_TRANSPORTS_CUDA_IPC_ALLOCATIONS_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace relay {
namespace cuda_ipc {

class Allocations {
 public:
  // The driver's entry points; FailedPrecondition if it lacks one.
  static absl::StatusOr<Allocations> Load();

  struct Range {
    char* base = nullptr;
    size_t bytes = 0;
  };
  // The allocation holding `p` (cuMemGetAddressRange); InvalidArgument if
  // none does.
  absl::StatusOr<Range> RangeOf(const void* p) const;
  // The driver's id of the allocation holding `p`
  // (CU_POINTER_ATTRIBUTE_BUFFER_ID): the same for every address in it for
  // its whole life, never that of another allocation of the process, even
  // one made later at the same address. InvalidArgument if no allocation
  // holds `p` (it was freed).
  absl::StatusOr<uint64_t> IdOf(const void* p) const;

 private:
  using AddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  using PointerAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  AddressRangeFn address_range_ = nullptr;
  PointerAttributeFn pointer_attribute_ = nullptr;
};

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_ALLOCATIONS_H_
