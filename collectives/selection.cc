#include "collectives/selection.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectives/direct.h"
#include "collectives/shm.h"

namespace relay {

namespace {

// kDirect and kShm run every collective, on transports with a shared
// address space or a shared-memory exchange only (ChooseAlgorithm and the
// communicator check that). kDirect comes first: on a tie it wins.
constexpr Algorithm kAllReduceAlgorithms[] = {
    Algorithm::kRing, Algorithm::kRecursiveDoubling, Algorithm::kRabenseifner,
    Algorithm::kDirect, Algorithm::kShm};
constexpr Algorithm kRingOnly[] = {Algorithm::kRing, Algorithm::kDirect,
                                   Algorithm::kShm};
constexpr Algorithm kTree[] = {Algorithm::kBinomialTree, Algorithm::kDirect,
                               Algorithm::kShm};
constexpr Algorithm kTreeOrLinear[] = {Algorithm::kBinomialTree,
                                       Algorithm::kLinear, Algorithm::kDirect,
                                       Algorithm::kShm};
constexpr Algorithm kPairwise[] = {Algorithm::kPairwise, Algorithm::kDirect,
                                   Algorithm::kShm};
constexpr Algorithm kDissemination[] = {
    Algorithm::kDissemination, Algorithm::kDirect, Algorithm::kShm};

constexpr absl::Span<const Algorithm> AlgorithmList(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return kAllReduceAlgorithms;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter: return kRingOnly;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce: return kTree;
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: return kTreeOrLinear;
    case CollectiveKind::kAllToAll: return kPairwise;
    case CollectiveKind::kBarrier: return kDissemination;
  }
  return kDissemination;
}

static_assert(static_cast<int>(Algorithm::kShm) < 32,
              "one bit per algorithm (kShm is the last) in a uint32_t");

// AlgorithmList as one bit per algorithm and kind, built by the compiler:
// every collective asks Implements twice, and a search through the list
// was 90 instructions a call (a table built at first use, 33).
constexpr std::array<uint32_t, kCollectiveKinds> ImplementedMasks() {
  std::array<uint32_t, kCollectiveKinds> out{};
  for (int k = 0; k < kCollectiveKinds; ++k) {
    for (Algorithm a : AlgorithmList(static_cast<CollectiveKind>(k))) {
      out[k] |= uint32_t{1} << static_cast<int>(a);
    }
  }
  return out;
}
constexpr std::array<uint32_t, kCollectiveKinds> kImplementedMasks =
    ImplementedMasks();

}  // namespace

absl::Span<const Algorithm> AlgorithmsFor(CollectiveKind kind) {
  return AlgorithmList(kind);
}

bool IsScheduled(Algorithm algorithm) {
  return algorithm != Algorithm::kDirect && algorithm != Algorithm::kShm &&
         algorithm != Algorithm::kAuto && algorithm != Algorithm::kNative;
}

bool Implements(Algorithm algorithm, CollectiveKind kind) {
  // Values outside the enums (a caller's cast) implement nothing.
  const auto k = static_cast<size_t>(kind);
  const auto a = static_cast<unsigned>(algorithm);
  return k < kImplementedMasks.size() && a < 32 &&
         ((kImplementedMasks[k] >> a) & 1) != 0;
}

double EstimateMicros(Algorithm algorithm, CollectiveKind kind, size_t bytes,
                      int size, const TransportCapabilities& caps) {
  // Reads caps.latency_us, bandwidth_gbps, shared_address_space and
  // exchange_bytes only:
  // ChooseAlgorithmCached keys its memo on exactly these, so a model that
  // reads another field must add it there.
  const double n = size, S = static_cast<double>(bytes);
  const double alpha = caps.latency_us;
  const double beta = 1e-3 / std::max(caps.bandwidth_gbps, 1e-9);
  const double gamma = beta;
  int p = 1, log_p = 0;
  while (p * 2 <= size) p *= 2, ++log_p;
  const double folded = size > p ? 1.0 : 0.0;
  int ceil_log_n = 0;
  while ((1 << ceil_log_n) < size) ++ceil_log_n;
  const double log_n = ceil_log_n;
  switch (algorithm) {
    case Algorithm::kRing:
      if (kind == CollectiveKind::kAllReduce) {
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * S * beta +
               (n - 1) / n * S * gamma;
      }
      return (n - 1) * alpha + (n - 1) / n * S * beta +
             (kind == CollectiveKind::kReduceScatter ? (n - 1) / n * S * gamma
                                                     : 0.0);
    case Algorithm::kRecursiveDoubling:
      return (log_p + 2 * folded) * (alpha + S * beta) +
             (log_p + folded) * S * gamma;
    case Algorithm::kRabenseifner:
      return (2 * log_p + 2 * folded) * alpha +
             (2.0 * (p - 1) / p + 2 * folded) * S * beta +
             (1.0 * (p - 1) / p + folded) * S * gamma;
    case Algorithm::kBinomialTree:
      if (kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter) {
        // Subtrees are staged through scratch: about one more pass over S.
        return log_n * alpha + (n - 1) / n * S * beta + S * beta;
      }
      return log_n * (alpha + S * beta);
    case Algorithm::kLinear:
      return (n - 1) * alpha + (n - 1) / n * S * beta;
    case Algorithm::kPairwise:
      return (n - 1) * alpha + (n - 1) / n * S * beta;
    case Algorithm::kDissemination:
      return log_n * alpha;
    case Algorithm::kDirect: {
      if (!caps.shared_address_space) break;
      // One hand-off for the whole operation, with none of a scheduled
      // step's bookkeeping (two requests and the executor's callbacks):
      // half a step's latency. One thread then reads every input and writes
      // every output, n S each way for the reductions and all_gather-like
      // kinds, but through cache at sizes where direct is in the running:
      // counted as n S (docs/design/tuning-history.md).
      const double traffic = kind == CollectiveKind::kAllReduce ||
                                     kind == CollectiveKind::kAllGather
                                 ? n
                                 : 1;
      if (DirectParts(kind, bytes, size) == 1) {
        return alpha / 2 + traffic * S * beta;
      }
      // Where it splits (direct.h): n S past kDirectSplitBytes.
      const double T = static_cast<double>(kDirectSplitBytes) / n;
      // Past T bytes per rank an all_reduce or reduce is split over the
      // ranks' threads (direct.h), each element of each input read once and
      // each output element written once: per rank S read and S (all_reduce)
      // or S / n (reduce) written. The ring's term above, 3 (n-1)/n S beta,
      // stands for its 5 (n-1)/n S memory operations per rank, so one
      // operation counts 0.6 beta. The first T bytes keep the one-thread
      // rate, so the estimate still grows with S (docs/design/tuning-history.md).
      const double written = kind == CollectiveKind::kAllReduce ? 1.0 : 1.0 / n;
      return alpha / 2 + traffic * T * beta +
             0.6 * (1.0 + written) * (S - T) * beta;
    }
    case Algorithm::kShm:
      // One exchange, or all_reduce's pipeline of them (shm.h).
      return ShmEstimateMicros(kind, bytes, size, caps);
    case Algorithm::kAuto:
    case Algorithm::kNative:
      break;
  }
  return std::numeric_limits<double>::infinity();
}

Algorithm ChooseAlgorithm(CollectiveKind kind, size_t bytes, int size,
                          const TransportCapabilities& caps) {
  Algorithm best = AlgorithmsFor(kind).front();
  double best_cost = std::numeric_limits<double>::infinity();
  for (Algorithm a : AlgorithmsFor(kind)) {
    const double cost = EstimateMicros(a, kind, bytes, size, caps);
    if (cost < best_cost) best = a, best_cost = cost;
  }
  return best;
}

Algorithm ChooseAlgorithmCached(CollectiveKind kind, size_t bytes, int size,
                                const TransportCapabilities& caps) {
  // The inputs the model reads, per kind; a hit needs them all equal.
  struct Memo {
    bool valid = false;
    size_t bytes = 0;
    int size = 0;
    double latency_us = 0, bandwidth_gbps = 0;
    bool shared_address_space = false;
    size_t exchange_bytes = 0;
    Algorithm chosen = Algorithm::kAuto;
  };
  thread_local Memo memo[kCollectiveKinds];
  Memo& m = memo[static_cast<int>(kind)];
  if (m.valid && m.bytes == bytes && m.size == size &&
      m.latency_us == caps.latency_us &&
      m.bandwidth_gbps == caps.bandwidth_gbps &&
      m.shared_address_space == caps.shared_address_space &&
      m.exchange_bytes == caps.exchange_bytes) {
    return m.chosen;
  }
  m = {true,
       bytes,
       size,
       caps.latency_us,
       caps.bandwidth_gbps,
       caps.shared_address_space,
       caps.exchange_bytes,
       ChooseAlgorithm(kind, bytes, size, caps)};
  return m.chosen;
}

absl::StatusOr<AlgorithmOverrides> ParseAlgorithmOverrides(
    absl::string_view spec) {
  AlgorithmOverrides out;
  for (absl::string_view part :
       absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (part.find('=') == absl::string_view::npos) {
      // A bare algorithm name: every collective it implements.
      absl::StatusOr<Algorithm> a = ParseAlgorithm(kv.first);
      if (!a.ok()) return a.status();
      bool any = false;
      for (CollectiveKind k : AllCollectiveKinds()) {
        if (Implements(*a, k)) out[k] = *a, any = true;
      }
      if (!any) {
        return absl::InvalidArgumentError(absl::StrCat(
            "algorithm '", kv.first, "' implements no collective"));
      }
      continue;
    }
    if (kv.second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' names no algorithm after '='"));
    }
    absl::StatusOr<CollectiveKind> k = ParseCollective(kv.first);
    if (!k.ok()) return k.status();
    absl::StatusOr<Algorithm> a = ParseAlgorithm(kv.second);
    if (!a.ok()) return a.status();
    if (*a != Algorithm::kAuto && !Implements(*a, *k)) {
      return absl::InvalidArgumentError(
          absl::StrCat("algorithm '", AlgorithmName(*a), "' does not implement ",
                       CollectiveName(*k)));
    }
    out[*k] = *a;
  }
  return out;
}

}  // namespace relay
