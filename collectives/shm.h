// File: collectives/shm.h
//
// The shm algorithm: collectives through shared-memory exchanges
// (Transport::Exchange, runtime/slot_exchange.h), for transports whose
// ranks share a host.
//
// One exchange (every kind). Each rank copies its contribution into its
// slot and, once every rank's is there, computes its own output from them
// on its own thread, reducing in rank order so every rank gets the same
// bits. No messages, no schedule, no request per peer: for small messages
// that is most of the time (what Open MPI's and UCC's shared-memory
// collectives do). It costs a copy in and a read of every contribution,
// (n + 1) S per rank, so the cost model offers it up to kShmOneShotBytes.
//
// The pipeline (all_reduce). Larger all_reduces run as a reduce-scatter
// and an all-gather per chunk of the slots' size, two exchanges per chunk:
// each rank puts the chunk but its own 1/n piece into its slot, reduces
// its piece from its peers' slots and its own buffer, then contributes
// that piece, and copies the others' pieces out. No messages; (5 - 1/n) S
// of loads and stores per rank; reductions still run in rank order, so
// every rank's result has the same bits.
// ShmAllReducePipelines says which of the two an all_reduce takes.
//
// What each rank contributes (S = count elements of the call's type):
//   all_reduce, reduce, all_gather, gather   its send buffer (S)
//   broadcast                                the root its buffer, others nothing
//   scatter                                  the root its whole send buffer (n S)
//   reduce_scatter, all_to_all               its whole send buffer (n S)
//   barrier                                  nothing
// The largest contribution must fit the transport's slots
// (TransportCapabilities::exchange_bytes): ShmContributionBytes says how
// large a call's is, the same on every rank.
//
// Example:
//   absl::StatusOr<Request> r = StartShm(*transport, args, count, dtype, caps);
#ifndef RELAY_COLLECTIVES_SHM_H_
#define RELAY_COLLECTIVES_SHM_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/collective.h"
#include "runtime/request.h"
#include "runtime/transport.h"

namespace relay {

// The largest one-exchange contribution the cost model offers shm (per
// rank): as far as it was measured against the message algorithms (docs/design/tuning-history.md).
// A forced `shm` runs one exchange up to the transport's slots.
inline constexpr size_t kShmOneShotBytes = size_t{64} << 10;

// What the model credits one exchange with on two ranks of one address
// space, against direct: the hand-off of the result to the rank that
// arrived first, which direct makes after its work and shm does not
// (ShmEstimateMicros). So loopback's 2 ranks run shm up to about 1.5 KB,
// where the two cross (docs/design/tuning-history.md).
inline constexpr double kTwoRankHandOffMicros = 0.15;

// The largest contribution of any rank to the exchange of a call with
// per-rank count `count` of `element_bytes`-byte elements on `size` ranks.
size_t ShmContributionBytes(CollectiveKind kind, size_t count,
                            size_t element_bytes, int size);

// Whether an all_reduce of `bytes` per rank runs as the pipeline rather
// than one exchange: past kShmOneShotBytes or the slots, and below that
// where the model finds it cheaper (more ranks: one exchange reads n S),
// except where ranks share an address space.
bool ShmAllReducePipelines(size_t bytes, int size,
                           const TransportCapabilities& caps);

// The cost model's estimate for shm (collectives/selection.h), in
// microseconds for the nccl-tests size `bytes`; infinite where shm does
// not run the call (no exchange, or one exchange too large).
double ShmEstimateMicros(CollectiveKind kind, size_t bytes, int size,
                         const TransportCapabilities& caps);

// Runs `args` (validated; any kind; `count` per rank as in
// runtime/collective.h, `dtype` the element type of the call: the send
// buffer's for reduce and gather, the receive buffer's otherwise) as one
// exchange, or an all_reduce as the pipeline. InvalidArgument naming the
// limit when a one-exchange contribution does not fit the transport's
// slots; Unimplemented where the transport has no Exchange.
absl::StatusOr<Request> StartShm(Transport& transport,
                                 const CollectiveArgs& args, size_t count,
                                 DataType dtype,
                                 const TransportCapabilities& caps);

// StartShm's blocking form: returns once the call is done on this rank. One
// exchange runs on the calling thread with no request
// (Transport::RunExchange); the pipeline starts and waits. On
// DeadlineExceeded the call may still be in flight: the caller aborts
// (CollectiveEngine::Run's contract).
absl::Status RunShm(Transport& transport, const CollectiveArgs& args,
                    size_t count, DataType dtype,
                    const TransportCapabilities& caps);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_SHM_H_
