#include "collectives/direct.h"

#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "collectives/reduce.h"
#include "runtime/tag.h"

namespace relay {
namespace {

// What one rank brings to the rendezvous.
struct DirectCall {
  CollectiveArgs args;
  size_t count;  // Per rank, as in runtime/collective.h.
};

char* At(const void* base, size_t elements, size_t element_size) {
  return const_cast<char*>(static_cast<const char*>(base)) +
         elements * element_size;
}

void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

// acc = reduce over ranks of element block `block` (count elements at
// element offset block * count) of every rank's send buffer, in rank order.
// Direct algorithms run small messages: their accumulator stays on the stack.
using Accumulator = absl::InlinedVector<char, 1024>;

void ReduceBlock(absl::Span<const void* const> calls, size_t offset,
                 size_t count, Accumulator& acc) {
  const auto* first = static_cast<const DirectCall*>(calls[0]);
  const DataType t = first->args.send.dtype;
  const size_t esize = DataTypeSize(t);
  const ReduceKernel reduce = GetReduceFn(t, first->args.op);
  acc.resize(count * esize);
  std::memcpy(acc.data(), At(first->args.send.data, offset, esize),
              count * esize);
  for (size_t r = 1; r < calls.size(); ++r) {
    const auto* c = static_cast<const DirectCall*>(calls[r]);
    reduce(acc.data(), At(c->args.send.data, offset, esize), acc.data(),
           count);
  }
  if (first->args.op == ReduceOp::kAvg) {
    DivideInPlace(t, acc.data(), count, static_cast<int>(calls.size()));
  }
}

// Runs on the last rank to arrive, with every rank's DirectCall. Every
// input is read before any output it may alias is written.
void Combine(absl::Span<const void* const> calls) {
  const size_t n = calls.size();
  auto call = [&](size_t r) { return static_cast<const DirectCall*>(calls[r]); };
  const CollectiveArgs& a0 = call(0)->args;
  const size_t count = call(0)->count;
  const int root = a0.root;
  switch (a0.kind) {
    case CollectiveKind::kBarrier:
      return;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce: {
      Accumulator acc;
      ReduceBlock(calls, 0, count, acc);
      for (size_t r = 0; r < n; ++r) {
        if (a0.kind == CollectiveKind::kReduce && static_cast<int>(r) != root) {
          continue;
        }
        std::memcpy(call(r)->args.recv.data, acc.data(), acc.size());
      }
      return;
    }
    case CollectiveKind::kReduceScatter: {
      // Results first (each reads every rank's block r), then the writes:
      // in place, rank r's output is block r of its own input.
      std::vector<Accumulator> results(n);
      for (size_t r = 0; r < n; ++r) ReduceBlock(calls, r * count, count, results[r]);
      for (size_t r = 0; r < n; ++r) {
        std::memcpy(call(r)->args.recv.data, results[r].data(),
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
        CopyIfDistinct(call(r)->args.recv.data, call(root)->args.send.data,
                       block);
      }
      return;
    case CollectiveKind::kAllGather:
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < n; ++i) {
          CopyIfDistinct(At(call(r)->args.recv.data, i * count, esize),
                         call(i)->args.send.data, block);
        }
      }
      return;
    case CollectiveKind::kGather:
      for (size_t i = 0; i < n; ++i) {
        CopyIfDistinct(At(call(root)->args.recv.data, i * count, esize),
                       call(i)->args.send.data, block);
      }
      return;
    case CollectiveKind::kScatter:
      for (size_t r = 0; r < n; ++r) {
        CopyIfDistinct(call(r)->args.recv.data,
                       At(call(root)->args.send.data, r * count, esize), block);
      }
      return;
    case CollectiveKind::kAllToAll:
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < n; ++i) {
          std::memcpy(At(call(r)->args.recv.data, i * count, esize),
                      At(call(i)->args.send.data, r * count, esize), block);
        }
      }
      return;
    default:
      return;
  }
}

}  // namespace

absl::StatusOr<Request> StartDirect(std::shared_ptr<Transport> transport,
                                    const CollectiveArgs& args, size_t count) {
  auto call = std::make_shared<DirectCall>(DirectCall{args, count});
  // The combine owns this rank's record, and the transport keeps it until
  // the rendezvous is over, so the pointer stays valid for whichever rank
  // runs the combine.
  const DirectCall* mine = call.get();
  return transport->Rendezvous(
      CollectiveTag(args.sequence, 0), mine,
      [call = std::move(call)](absl::Span<const void* const> calls) {
        Combine(calls);
      },
      args.deadline);
}

}  // namespace relay
