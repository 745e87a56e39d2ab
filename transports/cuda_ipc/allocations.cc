#include "transports/cuda_ipc/allocations.h"

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace relay {
namespace cuda_ipc {
namespace {

absl::StatusOr<void*> DriverFunction(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("cuda_ipc: the CUDA driver has no ", name,
                     e != cudaSuccess ? absl::StrCat(" (", cudaGetErrorString(e), ")") : ""));
  }
  return fn;
}

absl::Status NoAllocation(const void* p, const char* call, CUresult r) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "cuda_ipc: no CUDA allocation holds %p (%s returned %d)", p, call, static_cast<int>(r)));
}

}  // namespace

absl::StatusOr<Allocations> Allocations::Load() {
  Allocations a;
  absl::StatusOr<void*> range = DriverFunction("cuMemGetAddressRange");
  if (!range.ok()) return range.status();
  absl::StatusOr<void*> attribute = DriverFunction("cuPointerGetAttribute");
  if (!attribute.ok()) return attribute.status();
  a.address_range_ = reinterpret_cast<AddressRangeFn>(*range);
  a.pointer_attribute_ = reinterpret_cast<PointerAttributeFn>(*attribute);
  return a;
}

absl::StatusOr<Allocations::Range> Allocations::RangeOf(const void* p) const {
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = address_range_(&base, &bytes, reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) return NoAllocation(p, "cuMemGetAddressRange", r);
  return Range{reinterpret_cast<char*>(base), bytes};
}

absl::StatusOr<uint64_t> Allocations::IdOf(const void* p) const {
  unsigned long long id = 0;
  const CUresult r = pointer_attribute_(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                        reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS) return NoAllocation(p, "cuPointerGetAttribute", r);
  return static_cast<uint64_t>(id);
}

}  // namespace cuda_ipc
}  // namespace relay
