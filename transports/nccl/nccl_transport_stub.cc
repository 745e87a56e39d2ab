// Built instead of nccl_transport.cc where NCCL was not found at configure
// time (third_party/cuda/cuda_configure.bzl): the transport is registered but
// not viable, and connecting says why.
#include "transports/nccl/nccl_transport.h"

namespace relay {

bool NcclTransportFactory::IsViable() const { return false; }

absl::StatusOr<std::unique_ptr<Transport>> NcclTransportFactory::Connect(
    const TransportConfig& /*config*/) {
  return absl::FailedPreconditionError(
      "relay was built without NCCL (nccl.h and libnccl.so were not found "
      "under CUDA_HOME, NCCL_HOME or /usr/local/cuda at configure time)");
}

}  // namespace relay
