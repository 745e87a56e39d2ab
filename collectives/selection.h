// File: collectives/selection.h
//
// Which algorithm runs a collective: the ones that implement each kind, an
// alpha-beta cost model that picks among them per call, and the override
// syntax of the RELAY_ALGORITHM environment variable.
//
// Cost model. For n ranks and S bytes, with alpha the transport's per-message
// latency, beta its time per byte (1 / bandwidth) and gamma the time per byte
// reduced (taken equal to beta: both are memory traffic), each algorithm's
// header gives its cost; the cheapest wins. The model only ranks algorithms:
// its absolute numbers are not predictions.
//
// Overrides. RELAY_ALGORITHM="all_reduce=ring,gather=linear" forces an
// algorithm per collective (CollectiveOptions::algorithm wins over it);
// a bare name ("RELAY_ALGORITHM=ring") applies to every collective it
// implements.
//
// Example:
//   Algorithm a = ChooseAlgorithm(CollectiveKind::kAllReduce, 1 << 20, 8, caps);
#ifndef RELAY_COLLECTIVES_SELECTION_H_
#define RELAY_COLLECTIVES_SELECTION_H_

#include <cstddef>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/collective.h"
#include "runtime/transport.h"

namespace relay {

// relay's own algorithms for `kind` (static storage; no allocation, no
// guard: it is looked up several times per collective).
absl::Span<const Algorithm> AlgorithmsFor(CollectiveKind kind);
bool Implements(Algorithm algorithm, CollectiveKind kind);
// Whether the algorithm runs as a Schedule (everything but kDirect).
bool IsScheduled(Algorithm algorithm);

// Modelled time in microseconds; `bytes` is the nccl-tests size S.
double EstimateMicros(Algorithm algorithm, CollectiveKind kind, size_t bytes,
                      int size, const TransportCapabilities& caps);
Algorithm ChooseAlgorithm(CollectiveKind kind, size_t bytes, int size,
                          const TransportCapabilities& caps);
// ChooseAlgorithm, remembering the last answer per kind on this thread: a
// loop of one collective asks the same question every call, and the model
// costs several hundred instructions (a third of a small collective's own
// work on loopback).
Algorithm ChooseAlgorithmCached(CollectiveKind kind, size_t bytes, int size,
                                const TransportCapabilities& caps);

using AlgorithmOverrides = absl::flat_hash_map<CollectiveKind, Algorithm>;
// Parses the RELAY_ALGORITHM syntax; InvalidArgument names the bad part.
absl::StatusOr<AlgorithmOverrides> ParseAlgorithmOverrides(
    absl::string_view spec);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_SELECTION_H_
