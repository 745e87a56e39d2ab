#include "runtime/collective.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace relay {

const std::vector<CollectiveKind>& AllCollectiveKinds() {
  static const auto* kinds = new std::vector<CollectiveKind>{
      CollectiveKind::kBroadcast,     CollectiveKind::kReduce,
      CollectiveKind::kAllReduce,     CollectiveKind::kAllGather,
      CollectiveKind::kReduceScatter, CollectiveKind::kGather,
      CollectiveKind::kScatter,       CollectiveKind::kAllToAll,
      CollectiveKind::kBarrier};
  return *kinds;
}

absl::string_view CollectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBarrier: return "barrier";
  }
  return "invalid";
}

absl::StatusOr<CollectiveKind> ParseCollective(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (CollectiveKind k : AllCollectiveKinds()) {
    if (n == CollectiveName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown collective '", name,
      "' (expected broadcast, reduce, all_reduce, all_gather, "
      "reduce_scatter, gather, scatter, all_to_all or barrier)"));
}

absl::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kNative: return "native";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kRabenseifner: return "rabenseifner";
    case Algorithm::kBinomialTree: return "binomial";
    case Algorithm::kLinear: return "linear";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kShm: return "shm";
  }
  return "invalid";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (Algorithm a :
       {Algorithm::kAuto, Algorithm::kNative, Algorithm::kRing,
        Algorithm::kRecursiveDoubling, Algorithm::kRabenseifner,
        Algorithm::kBinomialTree, Algorithm::kLinear, Algorithm::kPairwise,
        Algorithm::kDissemination, Algorithm::kDirect, Algorithm::kShm}) {
    if (n == AlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown algorithm '", name,
      "' (expected auto, native, ring, recursive_doubling, rabenseifner, "
      "binomial, linear, pairwise, dissemination, direct or shm)"));
}

absl::Status CollectiveEngine::Run(const std::shared_ptr<Transport>& transport,
                                   const TransportCapabilities& caps,
                                   const CollectiveArgs& args) const {
  absl::StatusOr<Request> started = Start(transport, caps, args);
  if (!started.ok()) return started.status();
  return started->Wait();
}

}  // namespace relay
