// File: runtime/transport.h
//
// Transport: one rank's end of the wiring between the ranks of a communicator,
// and TransportFactory, which builds that wiring by rendezvous through a Store.
// Transports move bytes; they know nothing of collective algorithms, which are
// written once (collectives/) against this interface.
//
// Point-to-point semantics.
//   Isend(peer, tag, data) and Irecv(peer, tag, data) match by (peer, tag).
//   Messages from one rank to one peer on one tag never overtake each other:
//   the k-th send matches the k-th receive. A send and its receive must have
//   the same size in bytes; otherwise both fail with InvalidArgument. A send
//   may complete before or only when its receive is posted (loopback waits,
//   since it copies straight from the sender's buffer), so algorithms post
//   both sides of an exchange before waiting on either.
//
// Optional capabilities default to Unimplemented (see TransportCapabilities):
//   IrecvReduce  receive and reduce in one pass: dst = reduce(local, incoming),
//                for transports that can see the sender's bytes (loopback,
//                shared memory); algorithms fall back to Irecv + reduce.
//   Collective   a native collective (NCCL's), used before relay's algorithms.
//   Exchange     small contributions handed to every rank through shared
//                memory (ranks on one host), for the shm algorithm.
//   Split        a sub-group's wiring made from this one's (NCCL's
//                ncclCommSplit), for Communicator::Split.
//
// Lifetime and ownership. A Transport is owned by its Communicator (by
// unique_ptr) and outlives every request it returned: the communicator aborts
// it before destroying it. Buffers belong to the caller and must stay valid
// until the request completes. All methods are thread-safe.
//
// Example (one exchange with the right neighbour):
//   RELAY_ASSIGN_OR_RETURN(Request s, t.Isend((r + 1) % n, tag, mine, deadline));
//   RELAY_ASSIGN_OR_RETURN(Request q, t.Irecv((r + n - 1) % n, tag, theirs, deadline));
//   RELAY_RETURN_IF_ERROR(s.Wait());
//   RELAY_RETURN_IF_ERROR(q.Wait());
#ifndef RELAY_RUNTIME_TRANSPORT_H_
#define RELAY_RUNTIME_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/buffer.h"
#include "runtime/collective.h"
#include "runtime/exchange_call.h"
#include "runtime/request.h"
#include "runtime/store.h"
#include "runtime/tag.h"

namespace relay {

// out[i] = a[i] (op) b[i] for `count` elements of one dtype; `out` may alias
// `a` or `b`. Algorithms hand one to IrecvReduce (see collectives/reduce.h).
using ReduceFn = void (*)(const void* a, const void* b, void* out,
                          size_t count);

struct TransportCapabilities {
  bool host_memory = true;
  bool device_memory = false;
  bool fused_recv_reduce = false;   // IrecvReduce is implemented.
  bool native_collectives = false;  // Collective() is implemented.
  // Isend, Irecv and PostBatch are implemented. Without them (cuda_ipc,
  // for now) relay's own algorithms cannot run, and a call that forces one
  // is InvalidArgument before anything is sent.
  bool point_to_point = true;
  // Device memory the transport holds for its own use (cuda_ipc's arena,
  // mapped into every peer): the metrics' relay_transport_device_bytes.
  uint64_t device_bytes = 0;
  // Every rank's memory is addressable from every rank (threads of one
  // process): Rendezvous() is implemented.
  bool shared_address_space = false;
  // The largest contribution Exchange() takes; 0: it is not implemented
  // (ranks on several hosts, or no shared memory).
  size_t exchange_bytes = 0;
  // Cost model inputs (alpha-beta): per-message latency and per-link
  // bandwidth, used to pick algorithms by message size and rank count.
  double latency_us = 5.0;
  double bandwidth_gbps = 10.0;  // GB/s, 1 GB = 1e9 B.
  // The largest user point-to-point tag it carries; at least kMaxUserTag,
  // the one limit the communicator enforces on every transport.
  int64_t max_user_tag = kMaxUserTag;
  // False for transports without tags (NCCL): a pair's messages then match
  // in the order they were posted, whatever their tags, so both ranks must
  // post them in the same order.
  bool matches_tags = true;
  // Operations are queued on CUDA streams (device memory): requests support
  // StreamWait, and PostBatch honours its stream.
  bool stream_ordered = false;
  // How long a waiter on an operation over this transport polls before it
  // starts yielding its core (RequestState::SpinBudget): an algorithm's own
  // requests use it too. RequestState::SpinBudgetFor picks it from how many
  // ranks share the host's cores.
  std::chrono::nanoseconds wait_spin = RequestState::kDefaultSpinBudget;
};

// One send or receive: of a caller's batch (Communicator::BatchSendRecv,
// where `tag` is the caller's, 0 to kMaxUserTag) and of a transport's
// (Transport::PostBatch, where it is the wire tag, runtime/tag.h).
//   const P2POp ops[] = {P2POp::Send(ConstBuffer::Of(out), next, 7),
//                        P2POp::Recv(Buffer::Of(in), prev, 7)};
struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = 0;
  Tag tag = 0;
  Buffer data;  // Read from for a send, written for a receive.

  // A send only reads `data`; Buffer carries one pointer type.
  static P2POp Send(ConstBuffer data, int peer, int64_t tag = 0) {
    return {Kind::kSend, peer, static_cast<Tag>(tag),
            Buffer{const_cast<void*>(data.data), data.count, data.dtype,
                   data.device}};
  }
  static P2POp Recv(Buffer data, int peer, int64_t tag = 0) {
    return {Kind::kRecv, peer, static_cast<Tag>(tag), data};
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Fixed once the transport is connected (a factory's Connect returned
  // it): a Communicator reads them once, at construction.
  virtual TransportCapabilities capabilities() const = 0;

  virtual absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                        absl::Time deadline) = 0;
  virtual absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                        absl::Time deadline) = 0;

  // dst = reduce(local, incoming) element-wise; `local` may alias `dst`.
  virtual absl::StatusOr<Request> IrecvReduce(int peer, Tag tag,
                                              ConstBuffer local, Buffer dst,
                                              ReduceFn reduce,
                                              absl::Time deadline) {
    (void)peer, (void)tag, (void)local, (void)dst, (void)reduce, (void)deadline;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no fused receive-and-reduce"));
  }

  // For transports whose ranks share an address space: every rank of the
  // group calls Rendezvous with the same tag, its operation record
  // (`record_bytes` bytes, at most kMaxRendezvousRecord, copied by the
  // transport: the caller need not keep it), the same `combine` and the
  // same `parts`. Once every rank has arrived, `combine` runs once for each
  // part p in [0, parts), with every rank's record in rank order; then
  // every rank's request completes. With one part the last rank to arrive
  // runs it on its own thread. With more, the parts are spread over the
  // ranks' threads: the last to arrive takes them one after another, and a
  // rank waiting on its request (Wait, Test) takes the next one left, so
  // work too large for one thread runs on several. Parts must touch
  // disjoint memory. Algorithms use it to read and write their peers'
  // buffers in place: one hand-off per operation instead of one per step.
  // Records are plain bytes and `combine` a plain function, so a rendezvous
  // allocates nothing and nothing one rank brought is freed by another
  // rank's thread (which costs more than the rendezvous itself for small
  // messages: the allocator's per-thread caches drain into a lock).
  // InvalidArgument for a record too large or null, a null `combine`, or
  // `parts` outside [1, kMaxRendezvousParts].
  // `signature` is what the call is (a collective's Fingerprint::Pack):
  // when the ranks' differ, no combine runs and every rank's request fails
  // with InvalidArgument naming two of them and their calls.
  static constexpr size_t kMaxRendezvousRecord = 128;
  static constexpr size_t kMaxRendezvousParts = 4096;
  using CombineFn = void (*)(absl::Span<const void* const> records,
                             size_t part, size_t parts);
  virtual absl::StatusOr<Request> Rendezvous(Tag tag, const void* record,
                                             size_t record_bytes,
                                             CombineFn combine, size_t parts,
                                             absl::Time deadline,
                                             uint64_t signature = 0) {
    (void)tag, (void)record, (void)record_bytes, (void)combine, (void)parts,
        (void)deadline, (void)signature;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no shared-address-space rendezvous"));
  }

  // For transports whose ranks share memory on one host (capabilities()
  // .exchange_bytes > 0): every rank of the group calls Exchange in the
  // same order, with the same `call.tag` (a collective's), and its
  // contribution `input` (runtime/slot_exchange.h: bytes copied from memory
  // or written by a fill function; ranks may bring different sizes, none
  // more than exchange_bytes). Once every rank's contribution
  // is visible, `finish` runs on this rank with all of them in rank order
  // (its own read from `input.data` where it has one: ExchangeFinishFn)
  // and a copy of `context` (at most kMaxExchangeContextBytes), then
  // this rank's request completes, whatever the other ranks' requests are
  // doing: the transport keeps the contributions in its own memory, so a
  // rank's buffers are free once its own request is done. An exchange
  // moves when this rank waits on or tests any request of the transport,
  // and on the transport's progress thread if it has one (UCX), so a
  // request completed only through OnDone completes too
  // (runtime/slot_exchange.h describes the protocol). A peer that aborts
  // fails it with Unavailable; ranks that disagree on the order, with
  // Internal.
  virtual absl::StatusOr<Request> Exchange(const ExchangeCall& call) {
    (void)call;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no shared-memory exchange"));
  }

  // Exchange's blocking form (SlotExchange::Run): returns once `finish` has
  // run on this rank, with what the request would have completed with;
  // `context` is read in place, not copied. A transport whose exchange is
  // a SlotExchange runs it on the calling thread with no request; the
  // default starts one and waits. DeadlineExceeded when `deadline` passes
  // first; the exchange may then still be in flight, so the caller aborts
  // the transport before the buffers go (Communicator::RunCollective
  // aborts the communicator).
  virtual absl::Status RunExchange(const ExchangeCall& call);

  // Posts every op of `ops` at once (an exchange cannot deadlock) and
  // returns one request that completes when all have, with the first error.
  // InvalidArgument only when nothing was posted (the communicator then
  // leaves itself usable); an error after some ops were posted has another
  // code.
  // Stream-ordered transports queue them on `cuda_stream` as one group (for
  // NCCL, one ncclGroupStart/End; loopback's device memory returns once the
  // peers have posted their side, transports/loopback/device_messages.h);
  // the default posts each through Isend and Irecv and ignores the stream.
  // On an error some ops may be in flight: the caller aborts the transport
  // before freeing their buffers.
  virtual absl::StatusOr<Request> PostBatch(absl::Span<const P2POp> ops,
                                            void* cuda_stream,
                                            absl::Time deadline);

  // Whether `data` is memory this transport can move as it is declared
  // (host memory passed as device memory, memory of another GPU): an
  // InvalidArgument naming `what` if not. The communicator asks before every
  // collective, whichever algorithm runs it, so relay's own algorithms and
  // native ones reject the same buffers. The default trusts the declaration.
  virtual absl::Status CheckMemory(const ConstBuffer& data,
                                   absl::string_view what) const {
    (void)data, (void)what;
    return absl::OkStatus();
  }

  // A native implementation of the collective described by `args`. On
  // device buffers it orders with args.stream as args.stream_order says
  // (with kOnStream, work queued on args.stream later waits for it).
  virtual absl::StatusOr<Request> Collective(const CollectiveArgs& args) {
    (void)args;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no native collectives"));
  }

  // Symmetric windows (Communicator::RegisterWindow): maps every rank's
  // `region` into this rank, so that collectives with buffers in it may
  // store straight into the peers'. Collective: every rank calls it, in the
  // same order relative to its other window calls, and a region one rank
  // refuses (empty, memory it cannot move, sizes that differ) fails the
  // call on every rank. DeregisterWindow removes the window starting at
  // `data` once every rank's earlier calls are done with it. Unimplemented
  // by default.
  virtual absl::Status RegisterWindow(const Buffer& region, absl::Time deadline) {
    (void)region, (void)deadline;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no symmetric windows (cuda_ipc has)"));
  }
  virtual absl::Status DeregisterWindow(void* data, absl::Time deadline) {
    (void)data, (void)deadline;
    return absl::UnimplementedError(
        absl::StrCat(name(), " has no symmetric windows (cuda_ipc has)"));
  }

  // This rank's end of a sub-group's wiring, derived from this transport's
  // own (NCCL's ncclCommSplit) instead of a new rendezvous. Collective:
  // every rank of this transport calls it, in the same order as its other
  // operations. Ranks passing the same color >= 0 form a group ordered by
  // (key, rank here); a negative color joins none and gets null. The
  // communicator falls back to connecting a new transport where this is
  // Unimplemented (the default).
  virtual absl::StatusOr<std::unique_ptr<Transport>> Split(int color,
                                                           int key) {
    (void)color, (void)key;
    return absl::UnimplementedError(
        absl::StrCat(name(), " does not split its own wiring"));
  }

  // Does work that waits for this rank's thread (a polling transport's
  // progress engine, loopback's handed-off copies). Called by the Wait and
  // Test of this transport's requests and of collectives running over it;
  // never blocks. Returns true if it did some work.
  virtual bool Progress() { return false; }

  // A waiter that was calling Progress() stopped (it is going to sleep).
  // A transport whose own progress thread stands aside while callers poll
  // takes over now. Never blocks.
  virtual void StoppedPolling() {}

  // A thread starts waiting (RequestState::Wait) on an operation over this
  // transport, and will call Progress() until FinishedPolling; and it is
  // done waiting (the operation ended, or the wait's deadline passed). A
  // transport that gives work to the ranks it sees waiting (loopback's
  // hand-offs) gives none to a rank nobody waits on, and a leaving waiter
  // takes what was given to it. Test() is not waiting.
  virtual void StartedPolling() {}
  virtual void FinishedPolling() {}

  // Fails every pending request this rank posted with `reason` (Cancelled
  // for an abort); peers waiting on this rank learn it as Unavailable where
  // the transport can tell them. Later posts complete at once with `reason`
  // too, so a collective still running when a peer's loss aborted the
  // transport fails with that loss, not with a misuse error (the
  // Communicator itself refuses its caller's later calls with
  // FailedPrecondition). Returns promptly.
  virtual void Abort(absl::Status reason) = 0;
};

struct TransportConfig {
  std::shared_ptr<Store> store;  // Scoped to this communicator.
  int rank = 0;
  int size = 1;
  absl::Duration timeout = absl::Minutes(5);  // For the rendezvous itself.
};

class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual absl::string_view name() const = 0;
  // False where the hardware, library or permissions are missing; the
  // registry skips non-viable transports when choosing a default.
  virtual bool IsViable() const { return true; }
  // True if its ranks may be separate processes (on one host or several);
  // false for transports whose ranks must share one process (loopback).
  virtual bool SpansProcesses() const { return false; }
  // Builds this rank's end of a group of config.size ranks. Every rank of
  // the group calls it with the same store.
  virtual absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) = 0;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_TRANSPORT_H_
