#include "collectives/shm.h"

#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"
#include "runtime/tag.h"

namespace relay {
namespace {

// What a rank's finish needs of its own call; the transport copies it.
struct ShmCall {
  CollectiveKind kind;
  ReduceOp op;
  DataType dtype;
  int root;
  int rank;
  void* recv;
  size_t count;  // Per rank, as in runtime/collective.h.
};
static_assert(std::is_trivially_copyable_v<ShmCall>);
static_assert(sizeof(ShmCall) <= SlotExchange::kMaxContextBytes);

const char* At(const void* base, size_t offset_bytes) {
  return static_cast<const char*>(base) + offset_bytes;
}

// out = every rank's `count` elements at element `offset`, reduced in rank
// order (so every rank computes the same bits); reads only the slots, so
// `out` may be the caller's own send buffer.
void ReduceInto(absl::Span<const Contribution> all, const ShmCall& c,
                size_t offset, void* out) {
  const size_t esize = DataTypeSize(c.dtype);
  const size_t from = offset * esize;
  if (all.size() == 1) {
    std::memcpy(out, At(all[0].data, from), c.count * esize);
  } else {
    const ReduceKernel reduce = GetReduceFn(c.dtype, c.op);
    reduce(At(all[0].data, from), At(all[1].data, from), out, c.count);
    for (size_t r = 2; r < all.size(); ++r) {
      reduce(out, At(all[r].data, from), out, c.count);
    }
  }
  if (c.op == ReduceOp::kAvg) {
    DivideInPlace(c.dtype, out, c.count, static_cast<int>(all.size()));
  }
}

void Finish(absl::Span<const Contribution> all, const void* context) {
  const ShmCall& c = *static_cast<const ShmCall*>(context);
  const size_t n = all.size();
  const size_t block = c.count * DataTypeSize(c.dtype);
  const size_t mine = static_cast<size_t>(c.rank);
  char* recv = static_cast<char*>(c.recv);
  switch (c.kind) {
    case CollectiveKind::kBarrier:
      return;
    case CollectiveKind::kAllReduce:
      ReduceInto(all, c, 0, recv);
      return;
    case CollectiveKind::kReduce:
      if (c.rank == c.root) ReduceInto(all, c, 0, recv);
      return;
    case CollectiveKind::kReduceScatter:
      ReduceInto(all, c, mine * c.count, recv);
      return;
    case CollectiveKind::kBroadcast:
      std::memcpy(recv, all[static_cast<size_t>(c.root)].data, block);
      return;
    case CollectiveKind::kScatter:
      std::memcpy(recv, At(all[static_cast<size_t>(c.root)].data, mine * block),
                  block);
      return;
    case CollectiveKind::kGather:
      if (c.rank != c.root) return;
      [[fallthrough]];
    case CollectiveKind::kAllGather:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(recv + i * block, all[i].data, block);
      }
      return;
    case CollectiveKind::kAllToAll:
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(recv + i * block, At(all[i].data, mine * block), block);
      }
      return;
  }
}

}  // namespace

size_t ShmContributionBytes(CollectiveKind kind, size_t count,
                            size_t element_bytes, int size) {
  const size_t block = count * element_bytes;
  switch (kind) {
    case CollectiveKind::kBarrier:
      return 0;
    case CollectiveKind::kScatter:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
      return block * static_cast<size_t>(size);
    default:
      return block;
  }
}

absl::StatusOr<Request> StartShm(Transport& transport,
                                 const CollectiveArgs& args, size_t count,
                                 DataType dtype,
                                 const TransportCapabilities& caps) {
  const int size = transport.size(), rank = transport.rank();
  const size_t largest =
      ShmContributionBytes(args.kind, count, DataTypeSize(dtype), size);
  if (largest > caps.exchange_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": algorithm 'shm' takes contributions "
        "of at most ", caps.exchange_bytes, " bytes on ", transport.name(),
        "; this call's is ", largest, " (choose another algorithm)"));
  }
  // Ranks with nothing to give (broadcast and scatter off the root,
  // barrier) contribute no bytes.
  const bool rooted_source = args.kind == CollectiveKind::kBroadcast ||
                             args.kind == CollectiveKind::kScatter;
  const size_t bytes =
      rooted_source && rank != args.root ? 0 : largest;
  const ShmCall call{args.kind, args.op,   dtype, args.root,
                     rank,      args.recv.data, count};
  return transport.Exchange(CollectiveTag(args.sequence, 0), args.send.data,
                            bytes, &Finish, &call, sizeof(call),
                            args.deadline);
}

}  // namespace relay
