#include "transports/nccl/nccl_comms.h"

#include <cstdint>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "runtime/config.h"
#include "runtime/status_macros.h"
#include "transports/nccl/nccl_status.h"

namespace relay {
namespace nccl_internal {
namespace {

// Channels of the communicator that carries point-to-point (PostBatch:
// relay's own algorithms and user send/recv), unless RELAY_NCCL_P2P_CHANNELS
// says otherwise. NCCL stripes one send over at most (its point-to-point
// channels) / (ranks) channels, and its point-to-point channels are as many
// as its collectives': a ring's messages on 4 ranks got a quarter of them
// (docs/design/tuning-history.md). A second communicator keeps NCCL's native collectives on the
// channels NCCL chose.
constexpr int kDefaultP2pChannels = 64;

}  // namespace

// What a core needs besides its NCCL communicator: the transport's stream,
// the event it orders callers' streams with, and the barrier's scratch.
absl::Status PrepareCore(Core& core) {
  // Non-blocking: ordered with the callers' streams by events only.
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&core.stream, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags"));
  RELAY_RETURN_IF_ERROR(core.order.Init(core.stream));
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&core.ready, cudaEventDisableTiming),
      "cudaEventCreateWithFlags"));
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(reinterpret_cast<void**>(&core.barrier_scratch),
                 sizeof(int32_t)),
      "cudaMalloc"));
  return CudaStatus(cudaMemset(core.barrier_scratch, 0, sizeof(int32_t)),
                    "cudaMemset");
}

// RELAY_NCCL_P2P_CHANNELS, else kDefaultP2pChannels (0: no communicator
// of its own); InvalidArgument for anything but a count of 0-1024.
absl::StatusOr<int> P2pChannelsFromEnvironment() {
  RELAY_ASSIGN_OR_RETURN(
      const uint64_t channels,
      ReadCount("RELAY_NCCL_P2P_CHANNELS", kDefaultP2pChannels));
  return static_cast<int>(channels);
}

// Gives `core` (whose `comm` is made) its point-to-point communicator: a
// split of `comm` with every rank in it, asking NCCL for the channels
// RELAY_NCCL_P2P_CHANNELS says (ncclConfig_t::minCTAs and maxCTAs; NCCL
// caps them at its limit, 64 in 2.28). Collective over the ranks of
// `comm`, as making `comm` was.
absl::Status MakeP2pComm(Core& core) {
  RELAY_ASSIGN_OR_RETURN(const int channels, P2pChannelsFromEnvironment());
  if (channels == 0) {
    core.p2p_comm = core.comm;
    return absl::OkStatus();
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Both bounds: NCCL 2.28 refuses a minimum with the maximum left unset
  // (it compares the minimum with the unset marker).
  config.minCTAs = channels;
  config.maxCTAs = channels;
  config.commName = "relay point-to-point";
  absl::Status made = NcclStatus(
      ncclCommSplit(core.comm, 0, core.rank, &core.p2p_comm, &config),
      "ncclCommSplit (point-to-point communicator)", core.comm);
  if (!made.ok()) {
    return absl::Status(
        made.code(),
        absl::StrCat(made.message(), " (RELAY_NCCL_P2P_CHANNELS=0 runs "
                                     "point-to-point on the collectives' "
                                     "communicator instead)"));
  }
  return absl::OkStatus();
}

}  // namespace nccl_internal
}  // namespace relay
