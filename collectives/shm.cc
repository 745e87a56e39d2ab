#include "collectives/shm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"
#include "runtime/fingerprint.h"
#include "runtime/status_macros.h"
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
static_assert(sizeof(ShmCall) <= kMaxExchangeContextBytes);

const char* At(const void* base, size_t offset_bytes) {
  return static_cast<const char*>(base) + offset_bytes;
}

// dst = every contribution's `n` elements from byte `at`, folded with
// `reduce` in rank order (so every rank computes the same bits). Needs two
// contributions or more.
void Fold(absl::Span<const Contribution> all, ReduceKernel reduce, size_t at,
          size_t n, void* dst) {
  reduce(At(all[0].data, at), At(all[1].data, at), dst, n);
  for (size_t r = 2; r < all.size(); ++r) {
    reduce(dst, At(all[r].data, at), dst, n);
  }
}

// Fold() where `out` is the memory of a contribution after the second: the
// fold writes the first two's sum before it reads that one, so it runs a
// block at a time through a scratch buffer, same operations, same order.
// Out of line, so the common path has no 16 KB stack frame to probe.
[[gnu::noinline]] void FoldThroughScratch(absl::Span<const Contribution> all,
                                          ReduceKernel reduce, size_t from,
                                          size_t count, size_t esize,
                                          void* out) {
  constexpr size_t kScratchBytes = size_t{16} << 10;  // Stays in L1.
  alignas(64) char scratch[kScratchBytes];
  const size_t step = kScratchBytes / esize;
  for (size_t done = 0; done < count; done += step) {
    const size_t n = std::min(step, count - done);
    Fold(all, reduce, from + done * esize, n, scratch);
    std::memcpy(static_cast<char*>(out) + done * esize, scratch, n * esize);
  }
}

// out = every rank's `count` elements at element `offset`, reduced with
// `op` in rank order. `out` may be any one contribution's own elements
// (the pipeline reduces a rank's own piece from its send buffer, which is
// the receive buffer in place).
void ReduceInto(absl::Span<const Contribution> all, ReduceOp op,
                DataType dtype, size_t offset, size_t count, void* out) {
  const size_t esize = DataTypeSize(dtype);
  const size_t from = offset * esize;
  if (all.size() == 1) {
    CopyIfDistinct(out, At(all[0].data, from), count * esize);
  } else {
    bool later_is_out = false;
    for (size_t r = 2; r < all.size(); ++r) {
      later_is_out |= At(all[r].data, from) == out;
    }
    const ReduceKernel reduce = GetReduceFn(dtype, op);
    if (later_is_out) {
      FoldThroughScratch(all, reduce, from, count, esize, out);
    } else {
      Fold(all, reduce, from, count, out);
    }
  }
  if (op == ReduceOp::kAvg) {
    DivideInPlace(dtype, out, count, static_cast<int>(all.size()));
  }
}

void Finish(absl::Span<const Contribution> all, const void* context) {
  const ShmCall& c = *static_cast<const ShmCall*>(context);
  const size_t n = all.size();
  const size_t block = c.count * DataTypeSize(c.dtype);
  const size_t mine = static_cast<size_t>(c.rank);
  const size_t root = static_cast<size_t>(c.root);
  char* recv = static_cast<char*>(c.recv);
  switch (c.kind) {
    case CollectiveKind::kBarrier:
      return;
    case CollectiveKind::kAllReduce:
      ReduceInto(all, c.op, c.dtype, 0, c.count, recv);
      return;
    case CollectiveKind::kReduce:
      if (c.rank == c.root) ReduceInto(all, c.op, c.dtype, 0, c.count, recv);
      return;
    case CollectiveKind::kReduceScatter:
      ReduceInto(all, c.op, c.dtype, mine * c.count, c.count, recv);
      return;
    // The copies skip a block already in place: this rank's own
    // contribution comes from its send buffer (ExchangeFinishFn), which in
    // place is this block of the receive buffer.
    case CollectiveKind::kBroadcast:
      CopyIfDistinct(recv, all[root].data, block);
      return;
    case CollectiveKind::kScatter:
      CopyIfDistinct(recv, At(all[root].data, mine * block), block);
      return;
    case CollectiveKind::kGather:
      if (c.rank != c.root) return;
      [[fallthrough]];
    case CollectiveKind::kAllGather:
      for (size_t i = 0; i < n; ++i) {
        CopyIfDistinct(recv + i * block, all[i].data, block);
      }
      return;
    case CollectiveKind::kAllToAll:
      for (size_t i = 0; i < n; ++i) {
        CopyIfDistinct(recv + i * block, At(all[i].data, mine * block), block);
      }
      return;
  }
}

// An all_reduce larger than the slots runs as a pipeline of exchanges, two
// per chunk of the buffers (`chunk` elements, the last one shorter). Each
// chunk is split into `size` pieces; rank i owns piece i:
//   exchange A: every rank puts the chunk of its send buffer into its slot,
//               all but piece i, which no peer reads; rank i reduces piece
//               i of every peer's slot and of its own send buffer into its
//               receive buffer;
//   exchange B: every rank contributes its reduced piece (read from its
//               receive buffer); each copies the others' pieces into place.
// All 2 * chunks exchanges are queued at once: a queued exchange's data is
// read only when its slot is written, after the one before it finished
// (runtime/slot_exchange.h), so B reads the piece A wrote. In place is
// safe: A has copied the other pieces of a chunk of the send buffer into
// the slot before any finish writes them in the receive buffer, and a
// rank's own piece is reduced into the place it is read from (ReduceInto
// says how).
struct PipelineChunk {
  ReduceOp op;
  DataType dtype;
  int rank;
  int size;
  const char* send;  // The chunk's first element in the send buffer.
  char* recv;        // The chunk's first element in the receive buffer.
  size_t elements;   // In the chunk.
};
static_assert(std::is_trivially_copyable_v<PipelineChunk>);
static_assert(sizeof(PipelineChunk) <= kMaxExchangeContextBytes);

// Piece `piece` of `n` of a chunk of `elements`: its first element and
// length; the first elements % n pieces are one longer.
struct Piece {
  size_t first = 0, length = 0;
};
Piece PieceOf(size_t elements, size_t n, size_t piece) {
  const size_t base = elements / n, extra = elements % n;
  return {piece * base + std::min(piece, extra), base + (piece < extra)};
}

// Exchange A's contribution: the chunk, each piece at its place, but this
// rank's own piece, which no peer reads.
void FillOthersPieces(void* slot, size_t bytes, const void* context) {
  const PipelineChunk& c = *static_cast<const PipelineChunk*>(context);
  const size_t esize = DataTypeSize(c.dtype);
  const Piece mine = PieceOf(c.elements, static_cast<size_t>(c.size),
                             static_cast<size_t>(c.rank));
  const size_t before = mine.first * esize;
  const size_t after = before + mine.length * esize;
  std::memcpy(slot, c.send, before);
  std::memcpy(static_cast<char*>(slot) + after, c.send + after, bytes - after);
}

void FinishReducePiece(absl::Span<const Contribution> all,
                       const void* context) {
  const PipelineChunk& c = *static_cast<const PipelineChunk*>(context);
  const Piece mine =
      PieceOf(c.elements, all.size(), static_cast<size_t>(c.rank));
  // This rank's own piece is not in its slot: it reads it where it is.
  absl::InlinedVector<Contribution, 16> sources(all.begin(), all.end());
  sources[static_cast<size_t>(c.rank)].data = c.send;
  ReduceInto(sources, c.op, c.dtype, mine.first, mine.length,
             c.recv + mine.first * DataTypeSize(c.dtype));
}

void FinishGatherPieces(absl::Span<const Contribution> all,
                        const void* context) {
  const PipelineChunk& c = *static_cast<const PipelineChunk*>(context);
  const size_t esize = DataTypeSize(c.dtype);
  for (size_t j = 0; j < all.size(); ++j) {
    if (j == static_cast<size_t>(c.rank)) continue;
    const Piece piece = PieceOf(c.elements, all.size(), j);
    std::memcpy(c.recv + piece.first * esize, all[j].data,
                piece.length * esize);
  }
}

absl::StatusOr<Request> StartPipelinedAllReduce(Transport& transport,
                                                const CollectiveArgs& args,
                                                size_t count, DataType dtype,
                                                size_t slot_bytes) {
  const size_t esize = DataTypeSize(dtype);
  const size_t chunk = slot_bytes / esize;
  const size_t n = static_cast<size_t>(transport.size());
  const size_t mine = static_cast<size_t>(transport.rank());
  const uint64_t tag = CollectiveTag(args.sequence, 0);
  const uint64_t signature = Fingerprint::Of(args, transport.size()).Pack();
  const char* send = static_cast<const char*>(args.send.data);
  char* recv = static_cast<char*>(args.recv.data);
  Request last;
  for (size_t first = 0; first < count; first += chunk) {
    const size_t elements = std::min(chunk, count - first);
    const PipelineChunk c{args.op,
                          dtype,
                          transport.rank(),
                          transport.size(),
                          send + first * esize,
                          recv + first * esize,
                          elements};
    RELAY_ASSIGN_OR_RETURN(
        last, transport.Exchange(
                  {.tag = tag,
                   .signature = signature,
                   .input = {nullptr, elements * esize, &FillOthersPieces},
                   .finish = &FinishReducePiece,
                   .context = &c,
                   .context_bytes = sizeof(c),
                   .deadline = args.deadline}));
    const Piece piece = PieceOf(elements, n, mine);
    RELAY_ASSIGN_OR_RETURN(
        last, transport.Exchange({.tag = tag,
                                  .signature = signature,
                                  .input = {c.recv + piece.first * esize,
                                            piece.length * esize},
                                  .finish = &FinishGatherPieces,
                                  .context = &c,
                                  .context_bytes = sizeof(c),
                                  .deadline = args.deadline}));
  }
  // Exchanges finish in order, and a failure fails every one queued after
  // it (an abort, every one): the last one's request speaks for them all.
  return last;
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

namespace {

// The cost model's inputs for shm (selection.h: alpha the per-message
// latency, beta the time per byte). Between processes shm's traffic is
// plain loads and stores, which cost a quarter of the link's per-byte
// time: the link's figure stands for a transport's messages, protocol
// included (docs/design/tuning-history.md). Where ranks share an address space (loopback), direct
// reads the buffers in place and shm's copies are pure overhead: there
// they count at the full rate, so shm never undercuts direct.
struct ShmModel {
  double alpha, beta, rate;

  explicit ShmModel(const TransportCapabilities& caps)
      : alpha(caps.latency_us),
        beta(1e-3 / std::max(caps.bandwidth_gbps, 1e-9)),
        rate(caps.shared_address_space ? 1.0 : 0.25) {}

  // One exchange moving `traffic` S per rank: a hand-off like direct's.
  double OneShot(double traffic, double S) const {
    return alpha / 2 + rate * traffic * S * beta;
  }
  // All_reduce's pipeline: two hand-offs per chunk of `slot_bytes`. Counted
  // like one exchange's (n + 1) S, each byte moved once: the chunk copied
  // in but this rank's piece ((n - 1) / n S), the pieces read (S), the
  // reduced piece written (S / n) and copied in (S / n), the others'
  // pieces copied out ((n - 1) / n S): 3 S.
  double Pipeline(double S, size_t slot_bytes) const {
    const double chunks = std::ceil(S / static_cast<double>(slot_bytes));
    return std::max(chunks, 1.0) * alpha + rate * 3 * S * beta;
  }
};

}  // namespace

bool ShmAllReducePipelines(size_t bytes, int size,
                           const TransportCapabilities& caps) {
  if (bytes > std::min(caps.exchange_bytes, kShmOneShotBytes)) return true;
  // Ranks sharing an address space: the model never offers the pipeline
  // (ShmEstimateMicros), so a small one runs as one exchange. On two ranks
  // one exchange moves as much as the pipeline, (n + 1) S = 3 S, and costs
  // one hand-off instead of two: no need to ask the model (this runs on
  // every small all_reduce).
  if (caps.shared_address_space || size <= 2) return false;
  const ShmModel model(caps);
  const double n = size, S = static_cast<double>(bytes);
  return model.Pipeline(S, caps.exchange_bytes) < model.OneShot(n + 1, S);
}

double ShmEstimateMicros(CollectiveKind kind, size_t bytes, int size,
                         const TransportCapabilities& caps) {
  if (caps.exchange_bytes == 0) return std::numeric_limits<double>::infinity();
  const ShmModel model(caps);
  const double n = size, S = static_cast<double>(bytes);
  if (kind == CollectiveKind::kAllReduce &&
      ShmAllReducePipelines(bytes, size, caps)) {
    // Where ranks share an address space, direct (or its split) reduces
    // the buffers in place with no copy through slots at all: the model
    // leaves the pipeline to a forced shm there.
    if (caps.shared_address_space) {
      return std::numeric_limits<double>::infinity();
    }
    return model.Pipeline(S, caps.exchange_bytes);
  }
  // One exchange: the model offers it up to kShmOneShotBytes per rank (as
  // far as it was measured), though a forced shm runs it up to the slots.
  const size_t per_rank =
      kind == CollectiveKind::kAllGather || kind == CollectiveKind::kGather
          ? bytes / static_cast<size_t>(size)
          : bytes;
  if (per_rank > std::min(caps.exchange_bytes, kShmOneShotBytes)) {
    return std::numeric_limits<double>::infinity();
  }
  // Direct's traffic plus the copy into the slots, one more S (all_gather's
  // is an overestimate: it reads S, not n S).
  const double traffic = kind == CollectiveKind::kAllReduce ||
                                 kind == CollectiveKind::kAllGather
                             ? n + 1
                             : 2;
  // Two ranks sharing an address space: each finishes its own call from
  // the other's slot, where direct's last arrival does both ranks' work and
  // then hands the other its result, one serial hand-off more: shm leads
  // direct on 2 ranks for small calls, not on more (docs/design/tuning-history.md).
  const double hand_off = caps.shared_address_space && size == 2
                              ? kTwoRankHandOffMicros
                              : 0.0;
  return model.OneShot(traffic, S) - hand_off;
}

namespace {

// How StartShm and RunShm run a call: as the all_reduce pipeline, or as
// one exchange of `bytes` from this rank, which fits the slots unless
// `largest` (any rank's contribution) exceeds them. No Status on the way:
// this runs on every small collective.
struct ShmPlan {
  bool pipeline = false;
  bool fits = true;
  size_t bytes = 0;
  size_t largest = 0;
};

inline ShmPlan PlanShm(const CollectiveArgs& args, int rank, int size,
                       size_t count, DataType dtype,
                       const TransportCapabilities& caps) {
  ShmPlan plan;
  plan.largest =
      ShmContributionBytes(args.kind, count, DataTypeSize(dtype), size);
  if (args.kind == CollectiveKind::kAllReduce &&
      caps.exchange_bytes >= DataTypeSize(dtype) &&
      ShmAllReducePipelines(plan.largest, size, caps)) {
    plan.pipeline = true;
    return plan;
  }
  plan.fits = plan.largest <= caps.exchange_bytes;
  // Ranks with nothing to give (broadcast and scatter off the root,
  // barrier) contribute no bytes.
  const bool rooted_source = args.kind == CollectiveKind::kBroadcast ||
                             args.kind == CollectiveKind::kScatter;
  plan.bytes = rooted_source && rank != args.root ? 0 : plan.largest;
  return plan;
}

absl::Status TooLargeForSlots(const Transport& transport,
                              const CollectiveArgs& args,
                              const TransportCapabilities& caps,
                              size_t largest) {
  return absl::InvalidArgumentError(absl::StrCat(
      CollectiveName(args.kind), ": algorithm 'shm' takes contributions "
      "of at most ", caps.exchange_bytes, " bytes on ", transport.name(),
      "; this call's is ", largest, " (choose another algorithm)"));
}

// The one exchange of a call that fits the slots; `call` outlives it.
ExchangeCall OneExchange(const CollectiveArgs& args, const ShmPlan& plan,
                         const ShmCall& call, int size) {
  return {.tag = CollectiveTag(args.sequence, 0),
          .signature = Fingerprint::Of(args, size).Pack(),
          .input = {args.send.data, plan.bytes},
          .finish = &Finish,
          .context = &call,
          .context_bytes = sizeof(call),
          .deadline = args.deadline};
}

}  // namespace

absl::StatusOr<Request> StartShm(Transport& transport,
                                 const CollectiveArgs& args, size_t count,
                                 DataType dtype,
                                 const TransportCapabilities& caps) {
  const int rank = transport.rank();
  const ShmPlan plan =
      PlanShm(args, rank, transport.size(), count, dtype, caps);
  if (plan.pipeline) {
    return StartPipelinedAllReduce(transport, args, count, dtype,
                                   caps.exchange_bytes);
  }
  if (!plan.fits) return TooLargeForSlots(transport, args, caps, plan.largest);
  const ShmCall call{args.kind, args.op,   dtype, args.root,
                     rank,      args.recv.data, count};
  return transport.Exchange(
      OneExchange(args, plan, call, transport.size()));
}

absl::Status RunShm(Transport& transport, const CollectiveArgs& args,
                    size_t count, DataType dtype,
                    const TransportCapabilities& caps) {
  const int rank = transport.rank();
  const ShmPlan plan =
      PlanShm(args, rank, transport.size(), count, dtype, caps);
  if (plan.pipeline) {
    absl::StatusOr<Request> started = StartPipelinedAllReduce(
        transport, args, count, dtype, caps.exchange_bytes);
    if (!started.ok()) return started.status();
    return started->Wait();
  }
  if (!plan.fits) return TooLargeForSlots(transport, args, caps, plan.largest);
  const ShmCall call{args.kind, args.op,   dtype, args.root,
                     rank,      args.recv.data, count};
  return transport.RunExchange(
      OneExchange(args, plan, call, transport.size()));
}

}  // namespace relay
