// File: runtime/collective.h
//
// The vocabulary shared by the communicator, transports with native
// collectives, and relay's own algorithms: CollectiveKind, Algorithm,
// per-call CollectiveOptions, the validated CollectiveArgs of one call, and
// CollectiveEngine, the interface behind which collectives/ implements the
// algorithms (the runtime knows no algorithm by itself).
//
// Buffer conventions (NCCL's): `count` below is per rank.
//   broadcast       send (root only) -> recv; in place when send == recv.
//   reduce          send -> recv (root only).
//   all_reduce      send[count] -> recv[count].
//   all_gather      send[count] -> recv[count * size]; in place when
//                   send == recv + rank * count.
//   reduce_scatter  send[count * size] -> recv[count]; in place when
//                   recv == send + rank * count.
//   gather          send[count] -> recv[count * size] (root only).
//   scatter         send[count * size] (root only) -> recv[count].
//   all_to_all      send[count * size] -> recv[count * size], block j of
//                   send goes to rank j.
//   barrier         no buffers.
//
// Example:
//   CollectiveOptions opts;
//   opts.algorithm = Algorithm::kRing;      // force the ring
//   opts.timeout = absl::Seconds(30);
//   comm.AllReduce(in, out, ReduceOp::kSum, opts);
#ifndef RELAY_RUNTIME_COLLECTIVE_H_
#define RELAY_RUNTIME_COLLECTIVE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/activity_gate.h"
#include "runtime/buffer.h"
#include "runtime/data_type.h"
#include "runtime/request.h"

namespace relay {

class Transport;
struct TransportCapabilities;

enum class CollectiveKind : uint8_t {
  kBroadcast,
  kReduce,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kBarrier,  // Keep last: kCollectiveKinds counts up to it.
};
inline constexpr int kCollectiveKinds =
    static_cast<int>(CollectiveKind::kBarrier) + 1;

// Which algorithm runs which collective is below; forcing one that cannot
// run the call (another collective, direct without a shared address space,
// shm without a shared-memory exchange) is InvalidArgument before anything
// is sent. shm takes contributions up to the transport's slots
// (TransportCapabilities::exchange_bytes: 64 KiB on loopback, 64 KiB to
// 1 MiB on UCX by group size; an all_reduce of any size pipelines through
// them), and the cost model keeps
// direct and shm to small messages. Communicator::capabilities() tells
// which of the two a communicator has.
enum class Algorithm : uint8_t {
  kAuto,                // The cost model chooses (default).
  kNative,              // The transport's own collective (NCCL's).
  kRing,                // all_reduce, all_gather, reduce_scatter.
  kRecursiveDoubling,   // all_reduce.
  kRabenseifner,        // all_reduce (recursive halving + doubling).
  kBinomialTree,        // broadcast, reduce, gather, scatter.
  kLinear,              // gather, scatter (root talks to every rank).
  kPairwise,            // all_to_all.
  kDissemination,       // barrier.
  kDirect,              // Every collective, on transports whose ranks share
                        // an address space: one rendezvous, buffers read in
                        // place (collectives/direct.h). Small messages.
  kShm,                 // Every collective, on transports with a shared-
                        // memory exchange (ranks on one host): one exchange
                        // through shared slots (collectives/shm.h). Small
                        // messages.
};

const std::vector<CollectiveKind>& AllCollectiveKinds();
absl::string_view CollectiveName(CollectiveKind kind);  // "all_reduce"
absl::StatusOr<CollectiveKind> ParseCollective(absl::string_view name);
absl::string_view AlgorithmName(Algorithm algorithm);   // "ring"
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);
// Inline, like PerRankCount below: every call asks them several times.
inline bool IsRooted(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
}
inline bool IsReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kReduce || kind == CollectiveKind::kAllReduce ||
         kind == CollectiveKind::kReduceScatter;
}

// How an operation on device buffers orders with the caller's stream
// (CollectiveOptions::stream).
enum class StreamOrder : uint8_t {
  // It starts after the work queued on the stream before it; work queued
  // there later does not wait for it (Request::StreamWait makes it), so
  // the caller's next kernels overlap the communication. The default.
  kAfterStream,
  // As NCCL's own calls: it is queued on the stream itself, so later work
  // there waits for it too, with no StreamWait. For a caller that consumes
  // the result on the same stream; the NCCL transport then needs no event
  // and no wait of its own to order the call (its cheapest small call).
  kOnStream,
};

struct CollectiveOptions {
  // How long the operation may take; Request::Wait() waits this long.
  // Zero means the communicator's default timeout.
  absl::Duration timeout = absl::ZeroDuration();
  Algorithm algorithm = Algorithm::kAuto;
  // CUDA stream for device buffers (cudaStream_t); null: the legacy default
  // stream. The operation is ordered after the work queued there, and
  // with kOnStream before the work queued there later too.
  void* stream = nullptr;
  StreamOrder stream_order = StreamOrder::kAfterStream;
};

using FailureHook = std::function<void(const absl::Status&)>;

// One validated collective call, as handed to an engine or a transport.
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kBarrier;
  ConstBuffer send;
  Buffer recv;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Algorithm algorithm = Algorithm::kAuto;
  uint64_t sequence = 0;  // Per communicator; the same on every rank.
  absl::Time deadline = absl::InfiniteFuture();
  void* stream = nullptr;
  // A transport's native Collective honours it itself; for relay's own
  // algorithms the communicator does (a StreamWait on `stream`).
  StreamOrder stream_order = StreamOrder::kAfterStream;
  // The communicator's hooks, by address: they live in the communicator,
  // which outlives the Start call, and only an algorithm that runs on past
  // its Start (the schedule executor) keeps them, by copying the
  // shared_ptr. Copying them into every call's args was four atomic
  // reference-count updates a call that the small algorithms never used.
  // Closed by Communicator::Abort: algorithms do their local work on user
  // buffers inside it (runtime/activity_gate.h). Null, or pointing to a
  // null gate: none.
  const std::shared_ptr<ActivityGate>* gate = nullptr;
  // Called by an algorithm that fails with messages still in flight, before
  // its request completes: the communicator aborts, which retires them, so
  // the caller may free the buffers once Wait returns. Null, or pointing
  // to null: none.
  const std::shared_ptr<const FailureHook>* on_failure = nullptr;
};

// The per-rank element count of a call, the `count` of the buffer
// conventions above (what every rank must agree on): the recv count for
// broadcast, scatter and reduce_scatter, the send count / size for
// all_to_all, 0 for barrier, the send count otherwise.
inline uint64_t PerRankCount(const CollectiveArgs& args, int size) {
  switch (args.kind) {
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
    case CollectiveKind::kReduceScatter:
      return args.recv.count;
    case CollectiveKind::kAllToAll:
      return size > 0 ? args.send.count / static_cast<uint64_t>(size) : 0;
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return args.send.count;
  }
}

// Runs collectives as relay's own algorithms over a Transport's
// point-to-point interface. Implemented in collectives/; thread-safe.
class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;
  // InvalidArgument unless `algorithm` (kAuto included) can run `kind`;
  // checked before a call takes its sequence number.
  virtual absl::Status Supports(CollectiveKind kind,
                                Algorithm algorithm) const = 0;
  // Starts the collective and returns its request. An algorithm that runs
  // on after Start returns shares `transport` until it completes, so the
  // wiring outlives every operation in flight (one that finishes inside the
  // transport's own request copies nothing: two atomic updates a call).
  // `args` has been validated (runtime/validate.h); `caps` are the
  // transport's capabilities(), which the caller read once.
  virtual absl::StatusOr<Request> Start(
      const std::shared_ptr<Transport>& transport,
      const TransportCapabilities& caps,
      const CollectiveArgs& args) const = 0;
  // Start's blocking form: returns once the collective is done on this
  // rank, or has failed. An engine may run it without a request where
  // that is cheaper (relay's shm algorithm: one exchange on the calling
  // thread); the default starts it and waits. On DeadlineExceeded the
  // collective may still be in flight: the caller aborts (the
  // communicator does, so that nothing writes into the buffers once its
  // blocking call has returned).
  virtual absl::Status Run(const std::shared_ptr<Transport>& transport,
                           const TransportCapabilities& caps,
                           const CollectiveArgs& args) const;
  // Called once a communicator's transport is connected, on the thread
  // making it (the transport's GPU current): readies now what a first call
  // would otherwise set up in its path. An error fails the communicator's
  // creation. The default does nothing.
  virtual absl::Status Prepare(const TransportCapabilities& /*caps*/) const {
    return absl::OkStatus();
  }
};

}  // namespace relay

#endif  // RELAY_RUNTIME_COLLECTIVE_H_
