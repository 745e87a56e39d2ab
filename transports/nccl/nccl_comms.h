// File: transports/nccl/nccl_comms.h
//
// Making an NCCL transport's communicators and what goes with them, once
// its first communicator (Core::comm) is initialised: the core's stream
// and events (PrepareCore), the point-to-point communicator
// (MakeP2pComm, RELAY_NCCL_P2P_CHANNELS), which reads its setting and
// returns InvalidArgument for a malformed one. MakeP2pComm is collective
// over the ranks of Core::comm.
// Internal to transports/nccl/.
//
// Example (nccl_transport.cc's Connect, after ncclCommInitRank):
//   RELAY_RETURN_IF_ERROR(PrepareCore(*core));
//   RELAY_RETURN_IF_ERROR(MakeP2pComm(*core));
#ifndef RELAY_TRANSPORTS_NCCL_NCCL_COMMS_H_
#define RELAY_TRANSPORTS_NCCL_NCCL_COMMS_H_

#include "absl/status/status.h"
#include "transports/nccl/nccl_core.h"

namespace relay {
namespace nccl_internal {

// The transport's stream, the event it orders callers' streams with, and
// the barrier's scratch.
absl::Status PrepareCore(Core& core);

// The point-to-point communicator: a split of `comm` with
// RELAY_NCCL_P2P_CHANNELS channels (default 64), or `comm` itself for 0.
absl::Status MakeP2pComm(Core& core);

}  // namespace nccl_internal
}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_NCCL_COMMS_H_
