// File: collectives/direct.h
//
// Direct algorithms, for transports whose ranks share an address space
// (Transport::Rendezvous): every rank publishes its call, and the last rank
// to arrive reads every input and writes every output in place, then all
// requests complete. One hand-off per collective instead of one per step,
// so it wins for small messages; the work runs on one thread, so it loses
// for large ones. Reductions run in rank order, so every rank gets the same
// bits. Cost for n ranks and S bytes per rank: one rendezvous plus about
// 2 n S beta of serial memory traffic (all_reduce).
//
// Example:
//   absl::StatusOr<Request> r = StartDirect(transport, args);
#ifndef RELAY_COLLECTIVES_DIRECT_H_
#define RELAY_COLLECTIVES_DIRECT_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/collective.h"
#include "runtime/request.h"
#include "runtime/transport.h"

namespace relay {

// Runs `args` (validated; any kind) with the direct algorithm; `count` is
// the per-rank count of runtime/collective.h's conventions. Unimplemented
// where the transport has no Rendezvous.
absl::StatusOr<Request> StartDirect(std::shared_ptr<Transport> transport,
                                    const CollectiveArgs& args, size_t count);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_DIRECT_H_
