#include "runtime/device_buffer_check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/device_runtime.h"

namespace relay {

absl::Status CheckDeviceBuffer(const ConstBuffer& b, int device,
                               absl::string_view transport,
                               absl::string_view what,
                               CheckedPointers& checked) {
  if (b.count == 0) return absl::OkStatus();
  if (b.device != Device::Cuda(device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        transport, ": ", what, " is declared on ", b.device.ToString(),
        ", but this rank's communicator runs on cuda:", device));
  }
  if (checked.Contains(b.data)) return absl::OkStatus();
  int owner = -1;
  if (const int e = device_runtime::DeviceOfPointer(b.data, &owner); e != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        transport, ": ", what, " (", absl::StrFormat("%p", b.data),
        "): CUDA could not say what memory it is: ",
        device_runtime::ErrorString(e)));
  }
  if (owner < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        transport, ": ", what, " (", absl::StrFormat("%p", b.data),
        ") is declared as cuda:", device,
        " but is host memory or an address CUDA does not know"));
  }
  if (owner != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        transport, ": ", what, " (", absl::StrFormat("%p", b.data),
        ") lives on cuda:", owner, ", but this rank's communicator runs on cuda:",
        device));
  }
  checked.Add(b.data);
  return absl::OkStatus();
}

}  // namespace relay
