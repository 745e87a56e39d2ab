// Built instead of cuda_ipc_transport.cc where CUDA was not found at
// configure time: the transport is registered but not viable.
#include "transports/cuda_ipc/cuda_ipc_transport.h"

namespace relay {

bool CudaIpcTransportFactory::IsViable() const { return false; }

absl::StatusOr<std::unique_ptr<Transport>> CudaIpcTransportFactory::Connect(
    const TransportConfig& /*config*/) {
  return absl::FailedPreconditionError(
      "cuda_ipc: relay was built without CUDA (the CUDA toolkit was not "
      "found under CUDA_HOME or /usr/local/cuda at configure time)");
}

}  // namespace relay
