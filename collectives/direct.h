// File: collectives/direct.h
//
// Direct algorithms, for transports whose ranks share an address space
// (Transport::Rendezvous): every rank publishes its call, and the last rank
// to arrive reads every input and writes every output in place, then all
// requests complete. One hand-off per collective instead of one per step,
// so it wins for small messages. A large all_reduce or reduce (at least
// kDirectSplitBytes over all ranks) is split into parts by element range, which
// the ranks' threads share: each element of every input is read once and
// each output written once, less memory traffic than the ring's steps.
// Reductions run in rank order, so every rank gets the same bits.
//
// Example:
//   absl::StatusOr<Request> r = StartDirect(*transport, args, count);
#ifndef RELAY_COLLECTIVES_DIRECT_H_
#define RELAY_COLLECTIVES_DIRECT_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/collective.h"
#include "runtime/request.h"
#include "runtime/transport.h"

namespace relay {

// Over all ranks (n S): below it one thread does the whole collective,
// which reads and writes that much. (2 ranks of 16 KB, where splitting
// measured faster on a 2-core VM.)
inline constexpr size_t kDirectSplitBytes = 32 << 10;
// The smallest part a split collective is cut into.
inline constexpr size_t kDirectPartBytes = 8 << 10;

// How many parts StartDirect splits a collective into (1: not split).
size_t DirectParts(CollectiveKind kind, size_t bytes, int size);

// Runs `args` (validated; any kind) with the direct algorithm; `count` is
// the per-rank count of runtime/collective.h's conventions. Unimplemented
// where the transport has no Rendezvous.
absl::StatusOr<Request> StartDirect(Transport& transport,
                                    const CollectiveArgs& args, size_t count);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_DIRECT_H_
