// File: transports/cuda_ipc/cuda_ipc_transport.h
//
// CudaIpcTransportFactory: relay's own wiring between the GPUs of one host.
// One rank per GPU, ranks as processes (under relayrun, torchrun, mpirun)
// or as threads of one process, every GPU able to reach every other's
// memory (cudaDeviceCanAccessPeer: NVLink or PCIe peer-to-peer). Each rank's
// transport uses the CUDA device current on the thread that connects it.
//
// Memory. Each rank allocates one arena (RELAY_CUDA_IPC_ARENA_BYTES, default
// 256 MiB on 2 ranks and 1 GiB on more, for two data halves used in turn,
// plus 40 MiB of flags, low-latency words and lines, and point-to-point
// channels) with cudaMalloc and shares it through cudaIpcGetMemHandle, the handle
// passing through the communicator's store; a peer in another process
// opens it with cudaIpcOpenMemHandle, a peer thread of the same process
// uses the pointer after cudaDeviceEnablePeerAccess. The legacy IPC handle, not cuMem's
// exportable allocations: it needs no file descriptor passing between
// processes (a Unix socket beside the store), and every CUDA version and
// container setup relay runs on supports it.
//
// Collectives. all_reduce by relay's kernels (ipc_kernels.h): one-shot (each
// rank stores its contribution into every peer's arena and reduces what it
// received) while (ranks - 1) x the bytes stay within
// RELAY_CUDA_IPC_ONE_SHOT_BYTES (8 MiB on 2 ranks), two-shot (each rank
// reduces one slice and stores the result into every peer's arena) above,
// in pieces that fit the arena (a quarter of it on 2 ranks); every dtype
// and op, the 16-bit floats accumulating in float32. Up to
// RELAY_CUDA_IPC_LOW_LATENCY_BYTES (256 KiB on 2 ranks, 64 KiB on more) the
// one-shot sends each 4 data bytes with the call's epoch in one 8-byte
// store, and receivers poll the data itself (no barrier). all_gather,
// reduce_scatter, broadcast, all_to_all, gather, scatter and reduce are one
// exchange each: every rank stores what each peer needs into that peer's
// arena, the ranks meet at a flag barrier, and each copies or reduces what
// it received into its output (in pieces of up to half the arena / ranks;
// from 64 MiB a call in 4 steps, one step's stores travelling while the
// last is copied or reduced). barrier is a one-element all_reduce.
//
// Point-to-point. Isend, Irecv and PostBatch move device memory in 1 MiB
// chunks through a two-chunk channel per pair in the receiver's arena, by
// one kernel per batch whose every op runs at once. Tags are not carried
// (as NCCL's): a pair's messages match in posting order, and a receive's
// count must equal its send's (else InvalidArgument naming the sender). A
// send of more than two chunks completes only once its receive runs, so
// two ranks that send to each other must post both sides in one batch
// (BatchSendRecv), as relay's schedules do. At most 32 ops a batch.
//
// Streams. As the NCCL transport: an operation waits on the GPU for the work
// queued on the caller's stream and runs on the transport's own stream, or,
// with StreamOrder::kOnStream, on the caller's stream itself; either way
// after this transport's previous operation. Its request completes when the
// kernel has finished (a watchdog thread completes requests nobody waits on,
// so OnDone runs). The synchronisation between GPUs is flags in device
// memory: nothing on the host is in a launched collective's path.
//
// CUDA graphs. A call made with kOnStream on a stream being captured goes
// into the graph and returns a request that is complete on the device. The
// kernels count this transport's calls, so every rank must run its calls
// and replays in the same order, one at a time: a replay must not overlap
// another call of the same communicator (order them on one stream).
//
// Failure. A kernel waiting for a peer gives up when the call's deadline
// passes (measured on the GPU) or the transport is aborted (a host-mapped
// flag every kernel polls); the request then fails with DeadlineExceeded or
// Cancelled naming the peer, and the transport aborts. The watchdog also
// aborts the transport when a request outlives its deadline.
//
// Not viable (IsViable false) without CUDA or a visible GPU; connecting
// fails with FailedPrecondition, naming the ranks, when the ranks are not on
// one host, more than 8, or their GPUs cannot reach each other.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_CUDA_IPC_TRANSPORT_H_
#define RELAY_TRANSPORTS_CUDA_IPC_CUDA_IPC_TRANSPORT_H_

#include <memory>

#include "runtime/transport.h"

namespace relay {

class CudaIpcTransportFactory final : public TransportFactory {
 public:
  absl::string_view name() const override { return "cuda_ipc"; }
  // Built with CUDA, and at least one GPU is visible.
  bool IsViable() const override;
  bool SpansProcesses() const override { return true; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override;
};

}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_CUDA_IPC_TRANSPORT_H_
