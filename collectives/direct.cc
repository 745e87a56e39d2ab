#include "collectives/direct.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "collectives/reduce.h"
#include "runtime/fingerprint.h"
#include "runtime/tag.h"

namespace relay {
namespace {

// What one rank brings to the rendezvous: the part of its call the combine
// reads, as plain bytes (the transport copies it).
struct DirectCall {
  CollectiveKind kind;
  ReduceOp op;
  int root;
  ConstBuffer send;
  Buffer recv;
  size_t count;  // Per rank, as in runtime/collective.h.
};
static_assert(std::is_trivially_copyable_v<DirectCall>);
static_assert(sizeof(DirectCall) <= Transport::kMaxRendezvousRecord);

char* At(const void* base, size_t elements, size_t element_size) {
  return const_cast<char*>(static_cast<const char*>(base)) +
         elements * element_size;
}

// acc = reduce over ranks of element block `block` (count elements at
// element offset block * count) of every rank's send buffer, in rank order.
// Direct algorithms run small messages: their accumulator stays on the stack.
using Accumulator = absl::InlinedVector<char, 1024>;

void ReduceBlock(absl::Span<const void* const> calls, size_t offset,
                 size_t count, Accumulator& acc) {
  const auto* first = static_cast<const DirectCall*>(calls[0]);
  const DataType t = first->send.dtype;
  const size_t esize = DataTypeSize(t);
  const ReduceKernel reduce = GetReduceFn(t, first->op);
  acc.resize(count * esize);
  std::memcpy(acc.data(), At(first->send.data, offset, esize),
              count * esize);
  for (size_t r = 1; r < calls.size(); ++r) {
    const auto* c = static_cast<const DirectCall*>(calls[r]);
    reduce(acc.data(), At(c->send.data, offset, esize), acc.data(),
           count);
  }
  if (first->op == ReduceOp::kAvg) {
    DivideInPlace(t, acc.data(), count, static_cast<int>(calls.size()));
  }
}

// An all_reduce or reduce; a large one is split into parts that run on
// several ranks' threads (Transport::Rendezvous), a small one is one part
// run by Combine. Part p reduces its own slice of the elements, reading
// that slice of every rank's input once and writing it to every output, so
// the memory traffic is n S each way for the whole group however many
// threads share it (the ring moves about 2.5 n S). Each slice goes through
// an L1-sized accumulator in blocks: all of a block's inputs are read
// before any output is written, so in place is safe.
// (Streaming stores for the outputs, tried on a 2-core EPYC VM, were
// slower: 64 MB on 2 ranks took 10.7 ms against 7.6 with memcpy.)
void CombinePart(absl::Span<const void* const> calls, size_t part,
                 size_t parts) {
  const auto* first = static_cast<const DirectCall*>(calls[0]);
  const size_t esize = DataTypeSize(first->send.dtype);
  // Slices start on cache lines, so two parts never write one line.
  const size_t line = std::max<size_t>(1, 64 / esize);
  const size_t slice =
      (first->count + parts * line - 1) / (parts * line) * line;
  const size_t begin = std::min(first->count, part * slice);
  const size_t end = std::min(first->count, begin + slice);
  constexpr size_t kBlockBytes = 16 << 10;
  alignas(64) char acc[kBlockBytes];
  const size_t block = kBlockBytes / esize;
  const DataType t = first->send.dtype;
  const ReduceKernel reduce = GetReduceFn(t, first->op);
  for (size_t off = begin; off < end; off += block) {
    const size_t m = std::min(block, end - off);
    std::memcpy(acc, At(first->send.data, off, esize), m * esize);
    for (size_t r = 1; r < calls.size(); ++r) {
      const auto* c = static_cast<const DirectCall*>(calls[r]);
      reduce(acc, At(c->send.data, off, esize), acc, m);
    }
    if (first->op == ReduceOp::kAvg) {
      DivideInPlace(t, acc, m, static_cast<int>(calls.size()));
    }
    for (size_t r = 0; r < calls.size(); ++r) {
      if (first->kind == CollectiveKind::kReduce &&
          static_cast<int>(r) != first->root) {
        continue;
      }
      const auto* c = static_cast<const DirectCall*>(calls[r]);
      std::memcpy(At(c->recv.data, off, esize), acc, m * esize);
    }
  }
}

// Runs on the last rank to arrive, with every rank's DirectCall. Every
// input is read before any output it may alias is written.
void Combine(absl::Span<const void* const> calls, size_t /*part*/,
             size_t /*parts*/) {
  const size_t n = calls.size();
  auto call = [&](size_t r) { return static_cast<const DirectCall*>(calls[r]); };
  const DirectCall& a0 = *call(0);
  const size_t count = call(0)->count;
  const int root = a0.root;
  switch (a0.kind) {
    case CollectiveKind::kBarrier:
      return;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
      CombinePart(calls, 0, 1);  // The whole vector as one part.
      return;
    case CollectiveKind::kReduceScatter: {
      // Results first (each reads every rank's block r), then the writes:
      // in place, rank r's output is block r of its own input.
      std::vector<Accumulator> results(n);
      for (size_t r = 0; r < n; ++r) ReduceBlock(calls, r * count, count, results[r]);
      for (size_t r = 0; r < n; ++r) {
        std::memcpy(call(r)->recv.data, results[r].data(),
                    results[r].size());
      }
      return;
    }
    default:
      break;
  }
  const size_t esize = DataTypeSize(a0.kind == CollectiveKind::kGather
                                        ? a0.send.dtype
                                        : a0.recv.dtype);
  const size_t block = count * esize;
  switch (a0.kind) {
    case CollectiveKind::kBroadcast:
      for (size_t r = 0; r < n; ++r) {
        CopyIfDistinct(call(r)->recv.data, call(root)->send.data,
                       block);
      }
      return;
    case CollectiveKind::kAllGather:
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < n; ++i) {
          CopyIfDistinct(At(call(r)->recv.data, i * count, esize),
                         call(i)->send.data, block);
        }
      }
      return;
    case CollectiveKind::kGather:
      for (size_t i = 0; i < n; ++i) {
        CopyIfDistinct(At(call(root)->recv.data, i * count, esize),
                       call(i)->send.data, block);
      }
      return;
    case CollectiveKind::kScatter:
      for (size_t r = 0; r < n; ++r) {
        CopyIfDistinct(call(r)->recv.data,
                       At(call(root)->send.data, r * count, esize), block);
      }
      return;
    case CollectiveKind::kAllToAll:
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < n; ++i) {
          std::memcpy(At(call(r)->recv.data, i * count, esize),
                      At(call(i)->send.data, r * count, esize), block);
        }
      }
      return;
    default:
      return;
  }
}

}  // namespace

size_t DirectParts(CollectiveKind kind, size_t bytes, int size) {
  if (kind != CollectiveKind::kAllReduce && kind != CollectiveKind::kReduce) {
    return 1;
  }
  if (size < 2 || bytes * static_cast<size_t>(size) < kDirectSplitBytes) {
    return 1;
  }
  // A few parts per rank, so a thread that finishes early takes another.
  return std::clamp<size_t>(bytes / kDirectPartBytes, 2,
                            4 * static_cast<size_t>(size));
}

absl::StatusOr<Request> StartDirect(Transport& transport,
                                    const CollectiveArgs& args, size_t count) {
  const DirectCall call{args.kind, args.op,   args.root,
                        args.send, args.recv, count};
  const size_t parts =
      DirectParts(args.kind, count * DataTypeSize(args.send.dtype),
                  transport.size());
  return transport.Rendezvous(CollectiveTag(args.sequence, 0), &call,
                               sizeof(call),
                               parts > 1 ? &CombinePart : &Combine, parts,
                               args.deadline,
                               Fingerprint::Of(args, transport.size()).Pack());
}

}  // namespace relay
