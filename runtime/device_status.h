// File: runtime/device_status.h
//
// A device_runtime call's result (a cudaError_t value) as an absl::Status,
// for the code above the shim that reports CUDA failures: OK for 0, else
// Internal naming the call and CUDA's reason. device_runtime.h itself stays
// free of Abseil.
//
// Example:
//   RELAY_RETURN_IF_ERROR(DeviceStatus(device_runtime::StreamId(s, &id), "cudaStreamGetId"));
#ifndef RELAY_RUNTIME_DEVICE_STATUS_H_
#define RELAY_RUNTIME_DEVICE_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/device_runtime.h"

namespace relay {

inline absl::Status DeviceStatus(int error, const char* call) {
  if (error == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", device_runtime::ErrorString(error),
                                          " (CUDA error ", error, ")"));
}

}  // namespace relay

#endif  // RELAY_RUNTIME_DEVICE_STATUS_H_
