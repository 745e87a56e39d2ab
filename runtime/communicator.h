// File: runtime/communicator.h
//
// Communicator: a group of `size` ranks that run collectives and exchange
// point-to-point messages over one Transport. Every operation validates its
// input first (InvalidArgument, before anything is sent) and returns a
// Request (runtime/request.h) without blocking; the collectives also come
// in blocking forms (RunAllReduce, RunCollective) that return the outcome.
//
// Ordering. Collectives must be called in the same order on every rank (as
// in MPI and NCCL); each call takes the next sequence number, which goes
// into its message tags, so concurrent collectives on one communicator never
// mix messages. Point-to-point messages between two ranks on one tag arrive
// in the order sent.
//
// Errors. A collective that fails (a peer lost, a size mismatch) aborts the
// communicator before its request completes: its messages still in flight
// are retired, the other pending requests fail, peers learn of it, and
// later calls return FailedPrecondition; the communicator cannot be trusted
// after a failed collective (as with NCCL and Gloo). A Wait that returns
// DeadlineExceeded leaves its operation in flight: wait again, or Abort
// before freeing its buffers. Abort fails every pending request with
// Cancelled, waits for work still touching their buffers, and returns
// promptly.
//
// Lifetime and ownership. Created by relay::CreateCommunicator (//:relay) or
// Split(). The communicator owns its transport and shares it with requests in
// flight, so dropping the communicator aborts what is pending but never
// leaves a request pointing at freed wiring. Methods are thread-safe, but
// collectives issued from several threads must still be issued in the same
// order on every rank.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                          CreateCommunicator({.rank = r, .size = n, .store = store}));
//   std::vector<float> grads = ...;
//   RELAY_ASSIGN_OR_RETURN(Request req,
//       comm->AllReduce(ConstBuffer::Of(grads), Buffer::Of(grads), ReduceOp::kAvg));
//   RELAY_RETURN_IF_ERROR(req.Wait());
#ifndef RELAY_RUNTIME_COMMUNICATOR_H_
#define RELAY_RUNTIME_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/buffer.h"
#include "runtime/collective.h"
#include "runtime/fingerprint.h"  // CheckLevel.
#include "runtime/metrics.h"
#include "runtime/request.h"
#include "runtime/store.h"
#include "runtime/transport.h"

namespace relay {

// The communicator's own parts (runtime/collective_telemetry.h,
// flight_recorder.h, failure_monitor.h): declared only, so that a user's
// translation unit does not compile them.
class CollectiveTelemetry;
class FailureMonitor;
class FlightRecorder;
struct CollectiveTicket;

struct CommunicatorOptions {
  // The timeout of every operation that sets none in its options.
  // kDefaultTimeout: RELAY_TIMEOUT (seconds), else 10 minutes.
  absl::Duration default_timeout = kDefaultTimeout;
  // Mismatch detection (runtime/fingerprint.h). At kFingerprint every
  // collective first compares its kind, dtype, count, op, root and sequence
  // number with every rank's through the store, and blocks until all have
  // arrived: a mismatch fails the call on every rank with InvalidArgument
  // naming the ranks and both calls, a rank that never calls it with
  // DeadlineExceeded naming the rank; either aborts the communicator. Every
  // rank must use the same level. kDefault reads RELAY_CHECK_LEVEL.
  CheckLevel check_level = CheckLevel::kDefault;
  // Flight recorder (runtime/flight_recorder.h): how many recent collectives
  // each rank keeps; 0 turns it off. When the communicator aborts (Abort,
  // or a failed collective) each rank writes its record as JSON to
  // $RELAY_FLIGHT_RECORDER_DIR/relay_flight_rank<R>.json if that variable is
  // set; tools/relay_analyze reads every rank's file.
  // Rounded up to a power of two.
  size_t flight_recorder_entries = 1024;
  // Failure propagation (runtime/failure_monitor.h): a rank that aborts
  // (Abort, or a failed or timed-out collective) tells the others through
  // the store, and their pending and later operations fail at once with
  // Unavailable naming it. With peer_timeout > 0 ranks also watch each
  // other's heartbeats, so a dead or frozen process is found within
  // peer_timeout. kDefault: RELAY_PEER_TIMEOUT (seconds; 0 turns heartbeats
  // off), else 30 s. poll_interval 0 turns propagation off. A peer_timeout
  // below four poll intervals (1 s at the default 250 ms) is
  // InvalidArgument: a healthy peer's heartbeat would look lost.
  absl::Duration failure_poll_interval = absl::Milliseconds(250);
  absl::Duration peer_timeout = kDefaultPeerTimeout;

  // Marks peer_timeout as "from the environment, else 30 s".
  static constexpr absl::Duration kDefaultPeerTimeout = absl::Seconds(-1);
  // Marks default_timeout as "from the environment, else 10 minutes".
  static constexpr absl::Duration kDefaultTimeout = absl::Seconds(-1);
};

class Communicator {
 public:
  // Connects this rank through `factory` (every rank of the group calls this
  // with the same `store`). `engine` must outlive the communicator.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      TransportFactory& factory, const CollectiveEngine& engine,
      std::shared_ptr<Store> store, int rank, int size,
      CommunicatorOptions options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  absl::string_view transport_name() const { return transport_->name(); }
  TransportCapabilities capabilities() const {
    return transport_->capabilities();
  }

  // Collectives; see runtime/collective.h for the buffer conventions.
  absl::StatusOr<Request> Broadcast(ConstBuffer send, Buffer recv, int root,
                                    const CollectiveOptions& options = {});
  absl::StatusOr<Request> Reduce(ConstBuffer send, Buffer recv, ReduceOp op,
                                 int root,
                                 const CollectiveOptions& options = {});
  absl::StatusOr<Request> AllReduce(ConstBuffer send, Buffer recv, ReduceOp op,
                                    const CollectiveOptions& options = {});
  absl::StatusOr<Request> AllGather(ConstBuffer send, Buffer recv,
                                    const CollectiveOptions& options = {});
  absl::StatusOr<Request> ReduceScatter(ConstBuffer send, Buffer recv,
                                        ReduceOp op,
                                        const CollectiveOptions& options = {});
  absl::StatusOr<Request> Gather(ConstBuffer send, Buffer recv, int root,
                                 const CollectiveOptions& options = {});
  absl::StatusOr<Request> Scatter(ConstBuffer send, Buffer recv, int root,
                                  const CollectiveOptions& options = {});
  absl::StatusOr<Request> AllToAll(ConstBuffer send, Buffer recv,
                                   const CollectiveOptions& options = {});
  absl::StatusOr<Request> Barrier(const CollectiveOptions& options = {});
  // Any collective from its kind and buffers (benchmarks, bindings).
  absl::StatusOr<Request> Collective(CollectiveKind kind, ConstBuffer send,
                                     Buffer recv, ReduceOp op, int root,
                                     const CollectiveOptions& options = {});

  // Blocking collectives (MPI_Allreduce to AllReduce's MPI_Iallreduce):
  // the same validation, ordering, telemetry and results as the calls
  // above followed by Wait(), but they return the outcome themselves, once
  // the collective is done on this rank (on device buffers: once the GPU
  // work is). For a caller that waits at once anyway they are the cheaper
  // form: a small collective that relay's shm algorithm runs as one
  // exchange (ranks on one host) runs on the calling thread with no
  // request at all.
  // Unlike Wait, a call past its deadline (options.timeout, else the
  // default) does not leave the collective in flight: it aborts the
  // communicator, as a failed collective does, and returns
  // DeadlineExceeded; nothing writes into the buffers once it has
  // returned.
  //   RELAY_RETURN_IF_ERROR(comm->RunAllReduce(ConstBuffer::Of(loss),
  //                                            Buffer::Of(loss),
  //                                            ReduceOp::kAvg));
  absl::Status RunAllReduce(ConstBuffer send, Buffer recv, ReduceOp op,
                            const CollectiveOptions& options = {});
  absl::Status RunCollective(CollectiveKind kind, ConstBuffer send,
                             Buffer recv, ReduceOp op, int root,
                             const CollectiveOptions& options = {});

  // Point-to-point; 0 <= tag <= kMaxUserTag (2^43 - 1, runtime/tag.h) on
  // every transport, else InvalidArgument.
  absl::StatusOr<Request> Send(ConstBuffer data, int peer, int64_t tag = 0,
                               const CollectiveOptions& options = {});
  absl::StatusOr<Request> Recv(Buffer data, int peer, int64_t tag = 0,
                               const CollectiveOptions& options = {});
  // Posts every op at once (so exchanges cannot deadlock) and returns one
  // request that completes when all have, with the first error.
  // On device buffers, options.stream and options.stream_order apply as to
  // collectives: with kOnStream, work queued on the stream later sees the
  // received data. An error from these calls means nothing was posted
  // (InvalidArgument, and the communicator stays usable), unless it says
  // otherwise, in which case the communicator was aborted.
  absl::StatusOr<Request> BatchSendRecv(absl::Span<const P2POp> ops,
                                        const CollectiveOptions& options = {});

  // Fault tolerance (as NCCL's ncclCommShrink and MPI's ULFM allow): the
  // surviving ranks build a new communicator without the ranks in
  // `exclude`, usually after a failure aborted this one (the lost ranks are
  // named in the errors: "rank 5 failed", "rank 5 lost"). Every survivor
  // calls it with the same set, in the same order relative to its other
  // Shrinks; works on an aborted communicator. Survivors keep their order
  // (new rank = old rank minus the excluded ranks below it). Blocks until
  // the new group is wired; InvalidArgument for a bad set (this rank in it,
  // out of range) or when survivors disagree on it (each names
  // the sets it saw), DeadlineExceeded if a survivor never calls it within
  // the timeout (options.timeout, else the communicator's default). The
  // store must have survived: with rank 0 hosting it, rank 0 must be alive.
  absl::StatusOr<std::unique_ptr<Communicator>> Shrink(
      absl::Span<const int> exclude, const CollectiveOptions& options = {});

  // Collective: ranks passing the same color form a new communicator,
  // ordered by (key, old rank). A negative color opts out: the result is
  // then null. Blocks until the new group is wired: by the transport's own
  // Split where it has one (NCCL's ncclCommSplit), else by a new rendezvous
  // through the store. Of `options` only the timeout applies (else the
  // communicator's default); any other field set is InvalidArgument, which
  // like every refusal leaves the communicator's later Splits in step.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      int color, int key, const CollectiveOptions& options = {});

  // Symmetric windows (as NCCL's ncclCommWindowRegister). Collective: every
  // rank registers a region of device memory of the same byte size, and
  // the transport maps every peer's region into this rank. A collective
  // whose receive buffer lies in a window, at the same offset on every
  // rank, may then store straight into the peers' buffers with no staging
  // copy (cuda_ipc: all_gather). Blocks until every rank registered, or
  // DeadlineExceeded after the timeout (options.timeout, else the
  // default; no other option applies). Unimplemented where the transport
  // has no windows (every one but cuda_ipc); InvalidArgument for an empty
  // region, memory the transport cannot move (host memory, another GPU),
  // a region overlapping a window, and sizes that differ between ranks
  // (on every rank, naming them).
  absl::Status RegisterWindow(Buffer region, const CollectiveOptions& options = {});
  // Collective: every rank removes the window it registered at `data`, once
  // every rank's earlier calls are done with it; afterwards no peer
  // touches the region, and it may be freed. InvalidArgument if no window
  // starts at `data`.
  absl::Status DeregisterWindow(void* data, const CollectiveOptions& options = {});

  // Fails every pending request with Cancelled(reason) and makes later calls
  // fail with FailedPrecondition. Idempotent; returns promptly.
  absl::Status Abort(absl::Status reason = absl::CancelledError("aborted"));

  // This rank's flight record as JSON (runtime/flight_recorder.h), with
  // `reason` in it (no entries when the recorder is off). With
  // RELAY_FLIGHT_RECORDER_DIR set, SIGUSR1 writes every live communicator's
  // record there too (runtime/flight_dump_signal.h).
  std::string FlightRecord(absl::string_view reason = "requested") const;
  // Writes FlightRecord(reason) to `path`.
  absl::Status DumpFlightRecord(const std::string& path,
                                absl::string_view reason = "requested") const;

  // Counters and latency histograms of this rank's collectives
  // (runtime/metrics.h), and the same in the Prometheus text format,
  // labelled with rank, size and transport; WriteMetrics writes that text
  // to `path` (for a node exporter's textfile collector).
  const CollectiveMetrics& metrics() const { return *metrics_; }
  std::string MetricsText() const;
  absl::Status WriteMetrics(const std::string& path) const;
  // Renders MetricsText() and owns what it reads, so it may outlive the
  // communicator: what a scrape endpoint holds
  // (runtime/bootstrap/metrics_server.h).
  std::function<std::string()> MetricsRenderer() const;

  // Keeps `resource` alive until the communicator is destroyed: what was
  // built for it and has no other owner (the scrape endpoint that
  // CreateCommunicatorFromEnvironment starts for RELAY_METRICS_PORT).
  void Own(std::shared_ptr<void> resource);

 private:
  Communicator(TransportFactory& factory, const CollectiveEngine& engine,
               std::shared_ptr<Store> store,
               std::shared_ptr<Transport> transport, int rank, int size,
               CommunicatorOptions options);

  // OK unless aborted. Inline: every call asks, and the answer is one flag.
  absl::Status CheckUsable() const {
    if (!abort_->set.load(std::memory_order_acquire)) return absl::OkStatus();
    return AbortedError();
  }
  absl::Status AbortedError() const;
  // `now_ns` (FastNowNanos) plus the call's timeout (or the default one),
  // InfiniteFuture past int64 nanoseconds.
  absl::Time DeadlineFor(const CollectiveOptions& options, int64_t now_ns) const;
  // Validates the call and fills in the rest of `args` (algorithm,
  // deadline, sequence, ...) in place; says whether it is on device memory
  // and when it began (FastNowNanos).
  absl::Status PrepareCollective(CollectiveArgs& args,
                                 const CollectiveOptions& options,
                                 bool* on_device, int64_t* start_ns);
  // Prepares the call and starts it.
  absl::StatusOr<Request> StartCollective(CollectiveArgs& args,
                                          const CollectiveOptions& options);
  // Prepares the call and runs it to its outcome (the blocking forms).
  absl::Status RunCollective(CollectiveArgs& args,
                             const CollectiveOptions& options);
  // The native collective or relay's algorithm for validated `args`.
  absl::StatusOr<Request> Dispatch(const CollectiveArgs& args,
                                   const TransportCapabilities& caps,
                                   bool on_device);
  absl::Status ValidatePeer(int peer) const;
  // CheckLevel::kFingerprint: every rank's fingerprint of `args` through the
  // store, compared.
  absl::Status CheckAgreement(const CollectiveArgs& args);
  // CheckAgreement where the fingerprint check is on; a refusal becomes
  // the call's recorded outcome and aborts the communicator.
  absl::Status CheckAgreementIfAsked(
      const CollectiveArgs& args, const CollectiveTicket& ticket);
  // Split's first step: every rank's (color, key), as 2 * size integers, by
  // an all_gather, or through the store where the transport moves no host
  // memory.
  absl::StatusOr<std::vector<int32_t>> GatherColorsAndKeys(
      int color, int key, uint64_t split_index, absl::Duration timeout);

  TransportFactory& factory_;
  const CollectiveEngine& engine_;
  std::shared_ptr<Store> store_;
  std::shared_ptr<Transport> transport_;
  // Read once: a transport's capabilities are fixed once it is connected
  // (Transport::capabilities), and every call consults them.
  const TransportCapabilities caps_;
  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  // options_.default_timeout in nanoseconds (int64 max when infinite), for
  // DeadlineFor's integer arithmetic.
  const int64_t default_timeout_ns_;
  // Closed by Abort: waits out algorithms still writing into user buffers.
  const std::shared_ptr<ActivityGate> gate_ = std::make_shared<ActivityGate>();
  // Collectives started and perhaps not yet complete, so that Abort can
  // complete them before it returns. Closing the gate is not enough: a
  // transport completion racing with Abort can still be on its way to the
  // algorithm (between the transport and the gate) when Abort returns, and
  // would finish the request only afterwards.
  struct StartedRequests {
    std::mutex mu;
    std::vector<std::weak_ptr<RequestState>> live;  // Guarded by mu.
    size_t prune_at = 64;                           // Guarded by mu.
    void Add(const Request& request);
    // Completes every one still pending with `why`.
    void CancelAll(const absl::Status& why);
  };
  StartedRequests started_;
  // Made by Split or Shrink, under a store prefix of its own (the
  // destructor's cleanup).
  bool owns_store_keys_ = false;
  std::atomic<uint64_t> next_sequence_{0};
  std::atomic<uint64_t> next_split_{0};
  std::atomic<uint64_t> next_shrink_{0};
  // Why the communicator stopped working, shared with the failure hooks of
  // operations in flight (which may outlive a call, never the transport).
  struct AbortRecord {
    std::atomic<bool> set{false};  // reason is non-OK (hot-path check).
    std::mutex mu;
    absl::Status reason;  // Guarded by mu.
    // Records `why` unless already aborted; true if this call did.
    bool Set(absl::Status why);
  };
  const std::shared_ptr<AbortRecord> abort_ = std::make_shared<AbortRecord>();
  // Handed to every collective (CollectiveArgs::on_failure): aborts this
  // communicator through abort_ and the transport, never through `this`.
  std::shared_ptr<const FailureHook> on_failure_;
  // Null when options_.flight_recorder_entries is 0.
  const std::shared_ptr<FlightRecorder> recorder_;
  const std::shared_ptr<CollectiveMetrics> metrics_ =
      std::make_shared<CollectiveMetrics>();
  // Records every collective in recorder_ and metrics_.
  const std::shared_ptr<CollectiveTelemetry> telemetry_;
  std::mutex owned_mu_;
  std::vector<std::shared_ptr<void>> owned_;  // Guarded by owned_mu_.
  // RegisterForSignalDump's handle (runtime/flight_dump_signal.h); 0: none.
  uint64_t signal_dump_handle_ = 0;
  // Null for one rank or with failure_poll_interval 0. Shared with the
  // failure hook, which publishes this rank's failure through it.
  std::shared_ptr<FailureMonitor> monitor_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_COMMUNICATOR_H_
