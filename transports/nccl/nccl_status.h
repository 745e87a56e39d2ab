// File: transports/nccl/nccl_status.h
//
// NCCL and CUDA results as absl::Status, in one place. Every message names
// the call that failed and carries NCCL's own last-error text, so a user sees
// "ncclAllReduce: unhandled cuda error (... detail ...)" rather than a code.
//   ncclInvalidArgument, ncclInvalidUsage  -> InvalidArgument
//   ncclRemoteError (a peer failed)        -> Unavailable
//   everything else                        -> Internal
//   any CUDA error                         -> Internal
//
// Example:
//   RELAY_RETURN_IF_ERROR(NcclStatus(ncclGroupEnd(), "ncclGroupEnd", comm));
#ifndef RELAY_TRANSPORTS_NCCL_NCCL_STATUS_H_
#define RELAY_TRANSPORTS_NCCL_NCCL_STATUS_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace relay {

inline absl::Status NcclStatus(ncclResult_t result, const char* call,
                               ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return absl::OkStatus();
  std::string message = absl::StrCat(call, ": ", ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, " (", last, ")");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

inline absl::Status CudaStatus(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", cudaGetErrorName(error),
                                          ": ", cudaGetErrorString(error)));
}

}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_NCCL_STATUS_H_
