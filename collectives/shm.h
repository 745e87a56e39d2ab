// File: collectives/shm.h
//
// The shm algorithm: every collective as one shared-memory exchange
// (Transport::Exchange, runtime/slot_exchange.h), for transports whose
// ranks share a host. Each rank copies its contribution into its slot and,
// once every rank's is there, computes its own output from them on its own
// thread, reducing in rank order so every rank gets the same bits. No
// messages, no schedule, no request per peer: it is for small messages,
// where those costs are most of the time (what Open MPI's and UCC's
// shared-memory collectives do). Over processes it costs a copy in and a
// read of every contribution, (n + 1) S, so the cost model leaves larger
// messages to the ring.
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

// The largest contribution of any rank to the exchange of a call with
// per-rank count `count` of `element_bytes`-byte elements on `size` ranks.
size_t ShmContributionBytes(CollectiveKind kind, size_t count,
                            size_t element_bytes, int size);

// Runs `args` (validated; any kind; `count` per rank as in
// runtime/collective.h, `dtype` the element type of the call: the send
// buffer's for reduce and gather, the receive buffer's otherwise) as one
// exchange. InvalidArgument naming the limit
// when the contribution does not fit the transport's slots; Unimplemented
// where the transport has no Exchange.
absl::StatusOr<Request> StartShm(Transport& transport,
                                 const CollectiveArgs& args, size_t count,
                                 DataType dtype,
                                 const TransportCapabilities& caps);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_SHM_H_
