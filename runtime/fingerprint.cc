#include "runtime/fingerprint.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/config.h"

namespace relay {
namespace {

constexpr size_t kEncodedSize = 1 + 1 + 8 + 1 + 4 + 8;

void Put(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}


}  // namespace

absl::StatusOr<CheckLevel> ResolveCheckLevel(CheckLevel level) {
  if (level != CheckLevel::kDefault) return level;
  absl::StatusOr<std::string> env = ReadChoice("RELAY_CHECK_LEVEL", "none");
  if (!env.ok()) return env.status();
  return *env == "fingerprint" ? CheckLevel::kFingerprint : CheckLevel::kNone;
}

Fingerprint Fingerprint::Of(const CollectiveArgs& args, int size) {
  Fingerprint f;
  f.kind = args.kind;
  f.sequence = args.sequence;
  if (args.kind == CollectiveKind::kBarrier) return f;
  // The dtype of the buffer whose count is the per-rank count: a
  // non-root's send buffer of a broadcast is ignored, whatever it holds.
  const bool by_recv = args.kind == CollectiveKind::kBroadcast ||
                       args.kind == CollectiveKind::kScatter ||
                       args.kind == CollectiveKind::kReduceScatter;
  f.dtype = by_recv ? args.recv.dtype : args.send.dtype;
  f.count = PerRankCount(args, size);
  if (IsReduction(args.kind)) f.op = args.op;
  if (IsRooted(args.kind)) f.root = args.root;
  return f;
}

std::string Fingerprint::Encode() const {
  std::string out;
  out.reserve(kEncodedSize);
  const uint8_t k = static_cast<uint8_t>(kind), d = static_cast<uint8_t>(dtype),
                o = static_cast<uint8_t>(op);
  Put(&out, &k, 1);
  Put(&out, &d, 1);
  Put(&out, &count, 8);
  Put(&out, &o, 1);
  Put(&out, &root, 4);
  Put(&out, &sequence, 8);
  return out;
}

absl::StatusOr<Fingerprint> Fingerprint::Decode(absl::string_view bytes) {
  if (bytes.size() != kEncodedSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fingerprint of ", bytes.size(), " bytes, expected ", kEncodedSize));
  }
  Fingerprint f;
  const char* p = bytes.data();
  f.kind = static_cast<CollectiveKind>(static_cast<uint8_t>(p[0]));
  f.dtype = static_cast<DataType>(static_cast<uint8_t>(p[1]));
  std::memcpy(&f.count, p + 2, 8);
  f.op = static_cast<ReduceOp>(static_cast<uint8_t>(p[10]));
  std::memcpy(&f.root, p + 11, 4);
  std::memcpy(&f.sequence, p + 15, 8);
  if (static_cast<uint8_t>(f.kind) > static_cast<uint8_t>(CollectiveKind::kBarrier) ||
      !IsValid(f.dtype) || !IsValid(f.op)) {
    return absl::InvalidArgumentError("fingerprint with an unknown kind, dtype or op");
  }
  return f;
}

std::string Fingerprint::ToString() const {
  if (kind == CollectiveKind::kBarrier) return "barrier()";
  std::string s = absl::StrCat(CollectiveName(kind), "(", DataTypeName(dtype),
                               " x ", count);
  if (IsReduction(kind)) absl::StrAppend(&s, ", ", ReduceOpName(op));
  if (IsRooted(kind) && root >= 0) absl::StrAppend(&s, ", root ", root);
  return absl::StrCat(s, ")");
}

uint64_t Fingerprint::Pack() const {
  constexpr uint64_t kCountMask = (uint64_t{1} << 40) - 1;
  return (uint64_t{1} << 63) | (uint64_t{static_cast<uint8_t>(kind)} << 56) |
         (uint64_t{static_cast<uint8_t>(dtype)} << 48) |
         (uint64_t{static_cast<uint8_t>(op)} << 40) | (count & kCountMask);
}

Fingerprint Fingerprint::Unpack(uint64_t packed) {
  Fingerprint f;
  f.kind = static_cast<CollectiveKind>((packed >> 56) & 0x7f);
  f.dtype = static_cast<DataType>((packed >> 48) & 0xff);
  f.op = static_cast<ReduceOp>((packed >> 40) & 0xff);
  f.count = packed & ((uint64_t{1} << 40) - 1);
  return f;
}

absl::Status PackedMismatch(absl::string_view where, int rank_a,
                            uint64_t packed_a, int rank_b, uint64_t packed_b) {
  const Fingerprint a = Fingerprint::Unpack(packed_a);
  const Fingerprint b = Fingerprint::Unpack(packed_b);
  return absl::InvalidArgumentError(absl::StrCat(
      CollectiveName(a.kind), ": ranks disagree (", where, "): rank ", rank_a,
      " called ", a.ToString(), ", rank ", rank_b, " called ", b.ToString()));
}

bool operator==(const Fingerprint& a, const Fingerprint& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.count == b.count &&
         a.op == b.op && a.root == b.root && a.sequence == b.sequence;
}

absl::Status CompareFingerprints(const std::vector<Fingerprint>& by_rank) {
  for (size_t r = 1; r < by_rank.size(); ++r) {
    if (by_rank[r] != by_rank[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveName(by_rank[0].kind), " #", by_rank[0].sequence,
          ": ranks disagree: rank 0 called ", by_rank[0].ToString(),
          " as collective #", by_rank[0].sequence, " but rank ", r, " called ",
          by_rank[r].ToString(), " as collective #", by_rank[r].sequence));
    }
  }
  return absl::OkStatus();
}

}  // namespace relay
