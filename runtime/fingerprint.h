// File: runtime/fingerprint.h
//
// Collective fingerprints for mismatch detection (CheckLevel::kFingerprint):
// what a rank is about to run (kind, dtype, count, op, root, sequence number),
// encoded for exchange through the communicator's store, and the verdict over
// every rank's fingerprint. A mismatch names the ranks that differ and both
// calls, e.g.
//   "all_reduce #12: ranks disagree: rank 0 called all_reduce(float32 x 1024,
//    sum) but rank 3 called all_reduce(float32 x 512, sum)"
//
// Example:
//   Fingerprint mine = Fingerprint::Of(args);
//   std::string wire = mine.Encode();
//   ... gather every rank's `wire` ...
//   RELAY_RETURN_IF_ERROR(CompareFingerprints(all));
#ifndef RELAY_RUNTIME_FINGERPRINT_H_
#define RELAY_RUNTIME_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/collective.h"

namespace relay {

// How much a communicator checks that its ranks agree before data moves.
enum class CheckLevel : uint8_t {
  kDefault,      // RELAY_CHECK_LEVEL if set ("none" or "fingerprint"), else kNone.
  kNone,         // No check: nothing is exchanged, nothing costs.
  kFingerprint,  // Every collective's fingerprint is compared across ranks
                 // through the store first; the call blocks until every rank
                 // has arrived (or its timeout passes).
};

// Resolves kDefault from the environment; InvalidArgument for a value of
// RELAY_CHECK_LEVEL other than "none" or "fingerprint".
absl::StatusOr<CheckLevel> ResolveCheckLevel(CheckLevel level);

struct Fingerprint {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType dtype = DataType::kUint8;
  uint64_t count = 0;  // Per rank, as in runtime/collective.h.
  ReduceOp op = ReduceOp::kSum;
  int32_t root = -1;   // -1 for collectives without one.
  uint64_t sequence = 0;

  // The fields that matter for `args.kind` (dtype and count only where
  // there are buffers, op only for reductions, root only where rooted).
  static Fingerprint Of(const CollectiveArgs& args, int size);
  std::string Encode() const;
  static absl::StatusOr<Fingerprint> Decode(absl::string_view bytes);
  std::string ToString() const;  // "all_reduce(float32 x 1024, sum)"
  // The call without its sequence in 64 bits, for transports to carry
  // where ranks meet anyway (a rendezvous record, an exchange slot): kind,
  // dtype, op and the count's low 40 bits. Never 0, so 0 can mean "not a
  // collective". The root is left out (a root mismatch shows as a count
  // or a hang, as with messages).
  uint64_t Pack() const;
  static Fingerprint Unpack(uint64_t packed);  // Root -1, sequence 0.
  friend bool operator==(const Fingerprint& a, const Fingerprint& b);
  friend bool operator!=(const Fingerprint& a, const Fingerprint& b) {
    return !(a == b);
  }
};

// OK when every fingerprint equals rank 0's; otherwise InvalidArgument
// naming the first rank that differs from rank 0 and both calls.
absl::Status CompareFingerprints(const std::vector<Fingerprint>& by_rank);

// InvalidArgument for ranks whose packed calls differ at the meeting
// point `where` ("shared-memory exchange 7"): "rank 0 called
// all_reduce(float32 x 4, sum), rank 1 called all_reduce(float32 x 8,
// sum)".
absl::Status PackedMismatch(absl::string_view where, int rank_a,
                            uint64_t packed_a, int rank_b, uint64_t packed_b);

}  // namespace relay

#endif  // RELAY_RUNTIME_FINGERPRINT_H_
