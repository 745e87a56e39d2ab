// File: transports/nccl/nccl_transport.h
//
// NcclTransportFactory: relay over NCCL, for device (CUDA) memory. One rank
// per GPU: ranks may be processes (one GPU each, under relayrun, mpirun,
// srun or torchrun) or threads of one process (one thread per GPU, like
// nccl-tests -g with threads). Each rank's transport uses the CUDA device
// that is current on the thread that connects it (call cudaSetDevice first).
//
// What it offers:
//   * NCCL's native collectives through Transport::Collective: all_reduce,
//     broadcast, reduce, all_gather, reduce_scatter directly; all_to_all,
//     gather and scatter as grouped ncclSend/ncclRecv (all_to_all on the
//     point-to-point communicator below, where sends get more channels);
//     barrier as a one-element all_reduce. Every dtype and op relay has maps onto NCCL's.
//   * Point-to-point through ncclSend/ncclRecv; PostBatch puts a batch in one
//     NCCL group. NCCL has no tags: a pair's messages match in the order they
//     are posted (capabilities().matches_tags is false), and an exchange must
//     be one batch (two separate calls on each side can deadlock, as with
//     NCCL itself). Point-to-point runs on a second NCCL communicator, split
//     from the first when the transport connects, with 64 channels
//     (RELAY_NCCL_P2P_CHANNELS; 0 = none of its own): NCCL stripes a send
//     over (its point-to-point channels) / (ranks) of them, which with the
//     collectives' 32 left 4 ranks 8 channels and half NVLink's bandwidth
//     for the messages of relay's ring (docs/design/nccl-transport.md).
//   * Stream order: an operation waits, on the GPU, for the work queued on
//     the caller's stream (CollectiveOptions::stream) before it runs on the
//     transport's own stream (an event recorded there and waited on here); its
//     request completes when the GPU work has finished. A null stream means
//     the legacy default stream. The transport's stream is non-blocking, so
//     ordering runs one way only: later work on the caller's stream does
//     not wait for the operation until the caller asks. Request::Wait polls
//     for completion (it spins, like cudaStreamSynchronize);
//     Request::StreamWait(s) makes stream s wait instead, and the host never
//     blocks. With CollectiveOptions::stream_order = kOnStream a native
//     collective is queued on the caller's stream itself, as bare NCCL
//     calls are: later work there waits for it, and the call costs no
//     event and wait of its own. Whatever the streams, the transport's
//     operations run one at a time in posting order (an operation on
//     another stream than the last one's waits for it), as NCCL requires.
//   * A watchdog thread per communicator: it completes requests (so OnDone
//     callbacks run without a waiter, 50 us to 1 ms after the GPU finished;
//     a waiter sees it at once), polls ncclCommGetAsyncError, and when
//     an operation outlives its timeout it aborts the NCCL communicator
//     (ncclCommAbort) and fails every pending request with DeadlineExceeded,
//     so a peer that stops participating is an error, not a hang.
//   * Input checks before anything is queued: host memory, memory of another
//     GPU, or a buffer declared as device memory that CUDA does not know are
//     InvalidArgument. An address that passed is remembered and not asked
//     about again (the driver's answer cost more than the rest of a small
//     call), so an address freed and reused for other memory passes
//     unchecked, as in bare NCCL.
//
// Not viable (IsViable false) where relay was built without NCCL or no GPU
// is visible. Transport::Split (Communicator::Split) makes the sub-group's
// communicator with ncclCommSplit from this one, every rank taking part
// (NCCL_SPLIT_NOCOLOR for a negative color); the ranks' colors and keys go
// through the store first, since this transport moves no host memory.
//
// Lifetime and ownership. The factory is stateless. A transport owns its
// NCCL communicator, stream and watchdog; requests share what they need, so
// a request may outlive its transport.
//
// Example (one process per GPU, launched by relayrun):
//   cudaSetDevice(local_rank);
//   RELAY_ASSIGN_OR_RETURN(auto comm,
//       CreateCommunicatorFromEnvironment({}, absl::Minutes(2), "nccl"));
//   CollectiveOptions opts;
//   opts.stream = compute_stream;
//   RELAY_ASSIGN_OR_RETURN(Request r, comm->AllReduce(
//       ConstBuffer{grads, n, DataType::kBfloat16, Device::Cuda(local_rank)},
//       Buffer{grads, n, DataType::kBfloat16, Device::Cuda(local_rank)},
//       ReduceOp::kAvg, opts));
//   RELAY_RETURN_IF_ERROR(r.StreamWait(compute_stream));  // host goes on
#ifndef RELAY_TRANSPORTS_NCCL_NCCL_TRANSPORT_H_
#define RELAY_TRANSPORTS_NCCL_NCCL_TRANSPORT_H_

#include <memory>

#include "runtime/transport.h"

namespace relay {

class NcclTransportFactory final : public TransportFactory {
 public:
  absl::string_view name() const override { return "nccl"; }
  // Built with NCCL, and at least one GPU is visible.
  bool IsViable() const override;
  bool SpansProcesses() const override { return true; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override;
};

}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_NCCL_TRANSPORT_H_
