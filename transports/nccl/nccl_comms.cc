#include "transports/nccl/nccl_comms.h"

#include <cstdint>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "runtime/env_var.h"
#include "runtime/status_macros.h"
#include "transports/nccl/nccl_status.h"
#include "transports/nccl/ring_edges.h"

namespace relay {
namespace nccl_internal {
namespace {

// Channels of the communicator that carries point-to-point (PostBatch:
// relay's own algorithms and user send/recv), unless RELAY_NCCL_P2P_CHANNELS
// says otherwise. NCCL stripes one send over at most (its point-to-point
// channels) / (ranks) channels until a part would pass 32 chunks (16 MB),
// and its point-to-point channels are as many as its collectives'
// (rounded up to a power of two: 32 on H100s with NV18). So on 4 ranks
// a send of 8-128 MB ran on 8 channels, at 118-161 GB/s, and only from
// 256 MB on 16 (298): the ring's messages (S / (ranks x lanes)) sat in the
// slow regime. With 64 channels, the same sends moved 153-279 GB/s on 4
// H100s (bench/results/2026-11-26-nccl-p2p-channels-h100). A second
// communicator keeps NCCL's native collectives on the channels NCCL chose.
constexpr int kDefaultP2pChannels = 64;
// The smallest message along the ring (rank r to r+1) that runs on its edge's
// communicator (ring_edges.h) rather than the point-to-point one. On 4
// H100s relay's ring (2 lanes) ran slower on the edges with 32 MB
// messages (0.63 of native all_reduce against 0.66) and faster with 64 MB
// (0.77 against 0.72) and 128 MB (0.84 against 0.76), though bare NCCL
// moved a ring step 12% faster on the edges at 32 MB too
// (bench/gpu/neighbour_exchange). Queuing a step on the edges (two
// kernels, two communicators' launch work) takes the host 30-46 us
// against 15-23 on one communicator: with small messages (2 GPUs, 8 MB)
// that is as long as the step itself. On 4 GPUs a 32 MB step runs about
// 120 us, so the host does not explain the loss there; it was measured
// with 16 reduction blocks, before the default became 32
// (bench/results/2026-11-26-nccl-ring-edges-h100).
constexpr size_t kDefaultRingEdgeBytes = size_t{48} << 20;

}  // namespace

// What a core needs besides its NCCL communicator: the transport's stream,
// the event it orders callers' streams with, and the barrier's scratch.
absl::Status PrepareCore(Core& core) {
  // Non-blocking: ordered with the callers' streams by events only.
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&core.stream, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags"));
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
      ReadEnvCount("RELAY_NCCL_P2P_CHANNELS", kDefaultP2pChannels, 0, 1024,
                   "channels of the point-to-point communicator; 0: "
                   "point-to-point on the collectives' NCCL communicator"));
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

// RELAY_NCCL_RING_EDGES: whether a communicator of `size` ranks gets its
// ring edges' communicators. 1: from 2 ranks (on 2 a send already gets 32
// channels of the point-to-point communicator, so they gain most from 3).
// 0 or unset: never. Off by default: they speed up only relay's own
// algorithms over NCCL, which a caller asks for by name (kAuto picks NCCL's
// native collectives), and they cost every transport about 0.8 GB of GPU
// memory per edge on H100s (bench/gpu/edge_memory.sh: 1.7 GB more per GPU
// with both edges, bench/results/2026-11-26-nccl-ring-edges-h100) and
// about a second to connect. InvalidArgument for anything else.
absl::StatusOr<bool> RingEdgesFromEnvironment(int size) {
  absl::StatusOr<bool> wanted =
      ReadEnvSwitch("RELAY_NCCL_RING_EDGES", /*default_value=*/false,
                    "ring-edge communicators from 2 ranks");
  if (!wanted.ok()) return wanted.status();
  return *wanted && size >= 2;
}

// RELAY_NCCL_RING_EDGE_BYTES, else kDefaultRingEdgeBytes; InvalidArgument
// for anything but a byte count.
absl::StatusOr<size_t> RingEdgeBytesFromEnvironment() {
  RELAY_ASSIGN_OR_RETURN(
      const uint64_t bytes,
      ReadEnvCount("RELAY_NCCL_RING_EDGE_BYTES", kDefaultRingEdgeBytes, 0,
                   SIZE_MAX, "the smallest message a ring edge carries"));
  return static_cast<size_t>(bytes);
}

// Gives `core` (prepared, with `comm`) its ring edges' communicators where
// RELAY_NCCL_RING_EDGES asks for them: ncclCommSplit rounds as
// ring_edges.h plans them, each with the point-to-point communicator's
// channels, then one byte on every edge, in the ring's direction (the only
// one an edge carries). NCCL connects a peer's channels in the call that
// first uses them and waits there for the peer to connect too, so a first
// ring step of sends would wait around the ring (rank r on rank r+1, busy
// connecting to r+2); connected here, edge by edge in the rounds' order,
// both ends reach each edge together. Collective over the ranks of `comm`.
absl::Status MakeEdgeComms(Core& core) {
  // Both settings checked whatever the size, so a bad one shows at once.
  RELAY_ASSIGN_OR_RETURN(const bool wanted, RingEdgesFromEnvironment(core.size));
  RELAY_ASSIGN_OR_RETURN(core.edge_min_bytes, RingEdgeBytesFromEnvironment());
  if (!wanted) return absl::OkStatus();
  RELAY_ASSIGN_OR_RETURN(const int channels, P2pChannelsFromEnvironment());
  const auto failed = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(),
                                               " (RELAY_NCCL_RING_EDGES=0 runs "
                                               "without ring-edge communicators)"));
  };
  // This rank's edges in the rounds' order, and its end of each.
  absl::InlinedVector<std::pair<EdgeLink*, bool>, 2> joined_edges;  // sends?
  for (int round = 0; round < EdgeSplitRounds(core.size); ++round) {
    const EdgeSplit split = EdgeSplitFor(core.rank, core.size, round);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (channels > 0) {
      config.minCTAs = channels;
      config.maxCTAs = channels;
    }
    config.commName = "relay ring edge";
    ncclComm_t comm = nullptr;
    absl::Status made = NcclStatus(
        ncclCommSplit(core.comm, split.edge < 0 ? NCCL_SPLIT_NOCOLOR : split.edge,
                      split.key, &comm, &config),
        "ncclCommSplit (ring edge)", core.comm);
    if (!made.ok()) return failed(made);
    if (split.edge < 0) continue;
    EdgeLink& link = split.edge == core.rank ? core.to_next : core.from_prev;
    link.comm = comm;  // Destroyed with the core from here on.
    link.peer = 1 - split.key;
    // The lower end (key 0, this edge's "to next") sends.
    joined_edges.push_back({&link, split.key == 0});
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&link.stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags"));
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&link.joined, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
  }
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&core.forked, cudaEventDisableTiming),
      "cudaEventCreateWithFlags"));
  char* scratch = reinterpret_cast<char*>(core.barrier_scratch);
  for (const auto& [link, sends] : joined_edges) {
    const absl::Status s =
        sends ? NcclStatus(ncclSend(scratch, 1, ncclUint8, link->peer, link->comm, core.stream),
                           "ncclSend (connecting a ring edge)", link->comm)
              : NcclStatus(ncclRecv(scratch + 1, 1, ncclUint8, link->peer, link->comm,
                                    core.stream),
                           "ncclRecv (connecting a ring edge)", link->comm);
    if (!s.ok()) return failed(s);
  }
  return CudaStatus(cudaStreamSynchronize(core.stream),
                    "cudaStreamSynchronize (ring edges connected)");
}

}  // namespace nccl_internal
}  // namespace relay
