#include "runtime/communicator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/collective_telemetry.h"
#include "runtime/config.h"
#include "runtime/failure_monitor.h"
#include "runtime/fingerprint.h"
#include "runtime/flight_dump_signal.h"
#include "runtime/flight_recorder.h"
#include "runtime/status_macros.h"
#include "runtime/text_file.h"
#include "runtime/validate.h"

namespace relay {
namespace {

// RELAY_FLIGHT_RECORDER_DIR, when set, must be a directory this process can
// write: checked when a communicator is made, not when a record is first
// written (after a hang, when it is too late to fix).
absl::Status CheckFlightRecorderDirectory() {
  RELAY_ASSIGN_OR_RETURN(std::optional<std::string> dir,
                         ReadText("RELAY_FLIGHT_RECORDER_DIR"));
  if (!dir.has_value() || dir->empty()) return absl::OkStatus();
  struct stat st {};
  if (stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      access(dir->c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELAY_FLIGHT_RECORDER_DIR='", *dir,
        "' is not a directory this process can write (flight records go "
        "there)"));
  }
  return absl::OkStatus();
}

// Buffers only the root's part of a rooted collective reads or writes.
bool IsRootOnlySend(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kScatter;
}
bool IsRootOnlyRecv(CollectiveKind kind) {
  return kind == CollectiveKind::kGather || kind == CollectiveKind::kReduce;
}

}  // namespace

namespace {

// After a MultiGet of `keys` (key i published by rank ranks[i]) timed out:
// the ranks whose key is still missing, as "2,5".
std::string RanksThatNeverSet(Store& store, absl::Span<const std::string> keys,
                              absl::Span<const int> ranks) {
  std::vector<int> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!store.Get(keys[i], absl::ZeroDuration()).ok()) missing.push_back(ranks[i]);
  }
  return absl::StrJoin(missing, ",");
}

// Whether a call goes to the transport's native collective first: forced,
// or relay's choice where the transport has them.
bool WantsNative(const CollectiveArgs& args, const TransportCapabilities& caps) {
  return args.algorithm == Algorithm::kNative ||
         (args.algorithm == Algorithm::kAuto && caps.native_collectives);
}

// A collective call's arguments as the caller gives them; the
// communicator fills in the rest (PrepareCollective).
CollectiveArgs ArgsOf(CollectiveKind kind, ConstBuffer send, Buffer recv,
                      ReduceOp op, int root) {
  CollectiveArgs args;
  args.kind = kind;
  args.send = send;
  args.recv = recv;
  args.op = op;
  args.root = root;
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    TransportFactory& factory, const CollectiveEngine& engine,
    std::shared_ptr<Store> store, int rank, int size,
    CommunicatorOptions options) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("Communicator::Create: null store");
  }
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Communicator::Create: size ", size, " must be >= 1"));
  }
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Communicator::Create: rank ", rank, " is out of range [0, ", size,
        ")"));
  }
  if (options.default_timeout == CommunicatorOptions::kDefaultTimeout) {
    RELAY_ASSIGN_OR_RETURN(options.default_timeout,
                           ReadSeconds("RELAY_TIMEOUT", absl::Minutes(10)));
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "Communicator::Create: default timeout must be positive");
  }
  RELAY_RETURN_IF_ERROR(CheckFlightRecorderDirectory());
  if (options.failure_poll_interval < absl::ZeroDuration() ||
      (options.peer_timeout < absl::ZeroDuration() &&
       options.peer_timeout != CommunicatorOptions::kDefaultPeerTimeout)) {
    return absl::InvalidArgumentError(
        "Communicator::Create: failure_poll_interval and peer_timeout must "
        "not be negative");
  }
  const bool peer_timeout_from_env =
      options.peer_timeout == CommunicatorOptions::kDefaultPeerTimeout;
  if (peer_timeout_from_env) {
    RELAY_ASSIGN_OR_RETURN(FailureMonitorOptions from_env,
                           FailureMonitorOptionsFromEnvironment());
    options.peer_timeout = from_env.peer_timeout;
  }
  // Heartbeats move every poll interval; a timeout of a few of them reads a
  // healthy but briefly descheduled peer as lost.
  constexpr int kIntervalsPerTimeout = 4;
  if (options.peer_timeout > absl::ZeroDuration() &&
      options.failure_poll_interval > absl::ZeroDuration() &&
      options.peer_timeout <
          kIntervalsPerTimeout * options.failure_poll_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        peer_timeout_from_env ? "RELAY_PEER_TIMEOUT" : "peer_timeout", " of ",
        absl::FormatDuration(options.peer_timeout), " is below ",
        kIntervalsPerTimeout, " heartbeat intervals (",
        absl::FormatDuration(kIntervalsPerTimeout *
                             options.failure_poll_interval),
        "): healthy peers would be declared lost; use 0 to turn heartbeats "
        "off"));
  }
  absl::StatusOr<CheckLevel> level = ResolveCheckLevel(options.check_level);
  if (!level.ok()) return level.status();
  options.check_level = *level;
  if (!factory.IsViable()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transport '", factory.name(), "' is not viable on this host"));
  }
  TransportConfig config{store, rank, size, options.default_timeout};
  RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                         factory.Connect(config));
  RELAY_RETURN_IF_ERROR(engine.Prepare(transport->capabilities()));
  return std::unique_ptr<Communicator>(
      new Communicator(factory, engine, std::move(store), std::move(transport),
                       rank, size, options));
}

Communicator::Communicator(TransportFactory& factory,
                           const CollectiveEngine& engine,
                           std::shared_ptr<Store> store,
                           std::shared_ptr<Transport> transport, int rank,
                           int size, CommunicatorOptions options)
    : factory_(factory),
      engine_(engine),
      store_(std::move(store)),
      transport_(std::move(transport)),
      caps_(transport_->capabilities()),
      rank_(rank),
      size_(size),
      options_(options),
      default_timeout_ns_(absl::ToInt64Nanoseconds(options.default_timeout)),
      recorder_(options.flight_recorder_entries > 0
                    ? std::make_shared<FlightRecorder>(
                          options.flight_recorder_entries)
                    : nullptr),
      telemetry_(CollectiveTelemetry::Create(recorder_, metrics_)) {
  signal_dump_handle_ = RegisterForSignalDump(recorder_, rank_, size_);
  metrics_->SetTransportDeviceBytes(caps_.device_bytes);
  if (size_ > 1 && options_.failure_poll_interval > absl::ZeroDuration()) {
    FailureMonitorOptions monitor_options;
    monitor_options.poll_interval = options_.failure_poll_interval;
    monitor_options.peer_timeout = options_.peer_timeout;
    // Another rank failed: everything pending here fails with Unavailable
    // naming it, and nothing is published (the news is not this rank's).
    monitor_ = std::make_shared<FailureMonitor>(
        store_, rank_, size_, monitor_options,
        [record = abort_, weak_transport = std::weak_ptr<Transport>(transport_),
         recorder = recorder_, rank = rank_, size = size_](absl::Status why) {
          if (record->Set(why)) {
            if (auto transport = weak_transport.lock()) transport->Abort(why);
            WriteFlightRecordToDirectory(recorder.get(), rank, size,
                                         why.ToString());
          }
        });
  }
  on_failure_ = std::make_shared<const FailureHook>(
      // The transport by weak reference: the hook travels with every
      // collective in flight (CollectiveArgs::on_failure), and a strong one
      // let a run that outlived its communicator drop the transport's last
      // reference on whatever thread ran its final completion (UCX's
      // progress thread, which the transport's destructor then tried to
      // join: "Resource deadlock avoided"). Gone means the communicator is
      // gone, and its destructor aborted the transport already.
      [record = abort_, weak_transport = std::weak_ptr<Transport>(transport_),
       recorder = recorder_, monitor = std::weak_ptr<FailureMonitor>(monitor_),
       rank = rank_, size = size_](const absl::Status& why) {
        if (record->Set(why)) {
          if (auto transport = weak_transport.lock()) {
            transport->Abort(absl::CancelledError(
                absl::StrCat("communicator failed: ", why.message())));
          }
          if (auto m = monitor.lock()) m->Publish(why);
          WriteFlightRecordToDirectory(recorder.get(), rank, size, why.ToString());
        }
      });
  telemetry_->SetFailureHook(on_failure_);
}

std::string Communicator::FlightRecord(absl::string_view reason) const {
  if (recorder_ == nullptr) {
    return absl::StrCat("{\"rank\": ", rank_, ", \"size\": ", size_,
                        ", \"entries\": []}\n");
  }
  return recorder_->ToJson(rank_, size_, reason);
}

absl::Status Communicator::DumpFlightRecord(const std::string& path,
                                            absl::string_view reason) const {
  return WriteTextFile(path, FlightRecord(reason));
}

std::string Communicator::MetricsText() const { return MetricsRenderer()(); }

std::function<std::string()> Communicator::MetricsRenderer() const {
  return [metrics = metrics_,
          labels = std::vector<std::pair<std::string, std::string>>{
              {"rank", absl::StrCat(rank_)},
              {"size", absl::StrCat(size_)},
              {"transport", std::string(transport_->name())}}] {
    return metrics->PrometheusText(labels);
  };
}

void Communicator::Own(std::shared_ptr<void> resource) {
  std::lock_guard<std::mutex> lock(owned_mu_);
  owned_.push_back(std::move(resource));
}

absl::Status Communicator::WriteMetrics(const std::string& path) const {
  return WriteTextFile(path, MetricsText());
}

Communicator::~Communicator() {
  UnregisterForSignalDump(signal_dump_handle_);
  // Destroyed with a collective not complete (its Wait timed out and the
  // caller gave up): this rank fails as an abort would, so its peers learn
  // it now instead of at their own timeouts, and its flight record says
  // which collective it left (relay_analyze reads it).
  if (recorder_ != nullptr && !abort_->set.load(std::memory_order_acquire)) {
    if (std::optional<FlightRecorder::Entry> pending =
            recorder_->OldestQueued()) {
      (*on_failure_)(absl::CancelledError(absl::StrCat(
          "communicator destroyed with ", CollectiveName(pending->kind), " #",
          pending->sequence, " not complete")));
    }
  }
  // Writes this rank's failure if one is pending, else that it left
  // normally (so its silent heartbeat is not taken for a crash).
  monitor_.reset();
  // Nothing may write into user buffers once the owner thinks it is gone.
  transport_->Abort(absl::CancelledError("communicator destroyed"));
  gate_->Close();
  started_.CancelAll(absl::CancelledError("communicator destroyed"));
  // A Split's or Shrink's keys live under a prefix of their own: the last
  // rank to leave deletes them, so a service that makes communicators
  // keeps a flat store. (A rank that died never counts itself out: its
  // group's keys then stay, as does the world's, whose store the caller
  // may share.)
  if (owns_store_keys_) {
    absl::StatusOr<int64_t> left = store_->Add("left", 1);
    if (left.ok() && *left == size_) store_->DeletePrefix("").IgnoreError();
  }
}

bool Communicator::AbortRecord::Set(absl::Status why) {
  std::lock_guard<std::mutex> lock(mu);
  if (set.load(std::memory_order_relaxed)) return false;
  reason = std::move(why);
  set.store(true, std::memory_order_release);
  return true;
}

absl::Status Communicator::AbortedError() const {
  std::lock_guard<std::mutex> lock(abort_->mu);
  return absl::FailedPreconditionError(absl::StrCat(
      "communicator was aborted: ", abort_->reason.message()));
}

absl::Time Communicator::DeadlineFor(const CollectiveOptions& options,
                                     int64_t now_ns) const {
  // Integer nanoseconds: absl's Time + Duration is out of line in Debian's
  // shared Abseil (about 40 instructions a call). ToInt64Nanoseconds
  // saturates, so an infinite timeout is int64 max.
  const int64_t timeout_ns = options.timeout > absl::ZeroDuration()
                                 ? absl::ToInt64Nanoseconds(options.timeout)
                                 : default_timeout_ns_;
  if (timeout_ns > std::numeric_limits<int64_t>::max() - now_ns) {
    return absl::InfiniteFuture();
  }
  return absl::FromUnixNanos(now_ns + timeout_ns);
}

// Inlined into both callers: the small collectives' every call runs it.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status
Communicator::PrepareCollective(CollectiveArgs& args,
                                             const CollectiveOptions& options,
                                             bool* on_device_out,
                                             int64_t* start_ns_out) {
  RELAY_RETURN_IF_ERROR(CheckUsable());
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": negative timeout"));
  }
  args.algorithm = options.algorithm;
  args.stream = options.stream;
  args.stream_order = options.stream_order;
  const TransportCapabilities& caps = caps_;
  RELAY_RETURN_IF_ERROR(ValidateCollective(args, rank_, size_, caps));
  if (args.algorithm == Algorithm::kDirect && !caps.shared_address_space) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": algorithm 'direct' needs ranks that "
        "share an address space, which ", transport_->name(), " lacks"));
  }
  if (args.algorithm == Algorithm::kShm && caps.exchange_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": algorithm 'shm' needs a shared-memory "
        "exchange (ranks on one host), which ", transport_->name(),
        " does not have here"));
  }
  // Only the buffers this rank's part of the call uses: a non-root's
  // root-only buffer (a broadcast's send, say) is ignored, wherever it is.
  const bool uses_send = !IsRootOnlySend(args.kind) || args.root == rank_;
  const bool uses_recv = !IsRootOnlyRecv(args.kind) || args.root == rank_;
  const bool on_device =
      (uses_send && args.send.count > 0 && !args.send.device.is_host()) ||
      (uses_recv && args.recv.count > 0 && !args.recv.device.is_host());
  RELAY_RETURN_IF_ERROR(transport_->CheckMemory(args.send, "send buffer"));
  // In place, the same memory once: the check can be a driver call (nccl's
  // asks CUDA where the pointer lives, about a microsecond on a GPU host).
  const bool same_memory = args.send.count > 0 &&
                           args.send.data == args.recv.data &&
                           args.send.device == args.recv.device;
  if (!same_memory) {
    RELAY_RETURN_IF_ERROR(transport_->CheckMemory(args.recv, "recv buffer"));
  }
  if (on_device && !caps.stream_ordered && !caps.native_collectives) {
    // relay's own algorithms run on device buffers through streams
    // (collectives/stream_executor.h), which this transport lacks.
    return absl::UnimplementedError(absl::StrCat(
        CollectiveName(args.kind), ": device buffers over ",
        transport_->name(), ", which neither queues work on CUDA streams "
        "nor has native collectives"));
  }
  if (args.algorithm != Algorithm::kNative) {
    RELAY_RETURN_IF_ERROR(engine_.Supports(args.kind, args.algorithm));
    if (!caps.point_to_point && !WantsNative(args, caps)) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveName(args.kind), ": algorithm '", AlgorithmName(args.algorithm),
          "' runs over point-to-point, which ", transport_->name(),
          " does not have; use 'auto' or 'native'"));
    }
  } else if (!caps.native_collectives) {
    // Rejected here, before the sequence number is taken: a transport that
    // fails the native call later would leave this rank a number ahead.
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": algorithm 'native' was forced, but ",
        transport_->name(), " has no native collectives"));
  }
  // One clock read serves the deadline, the flight record and the metrics.
  const int64_t start_ns = FastNowNanos();
  args.deadline = DeadlineFor(options, start_ns);
  args.gate = &gate_;
  args.on_failure = &on_failure_;
  // Taken only after validation, so a rejected call leaves no gap.
  args.sequence = next_sequence_.fetch_add(1, std::memory_order_relaxed);
  *on_device_out = on_device;
  *start_ns_out = start_ns;
  return absl::OkStatus();
}

// Inlined into both callers: every call asks whether the check is on.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status
Communicator::CheckAgreementIfAsked(const CollectiveArgs& args,
                                    const CollectiveTicket& ticket) {
  if (options_.check_level != CheckLevel::kFingerprint || size_ == 1) {
    return absl::OkStatus();
  }
  // After Queue: the flight record holds the call the check refused.
  absl::Status agreed = CheckAgreement(args);
  if (!agreed.ok()) {
    telemetry_->Refused(ticket, agreed);
    (*on_failure_)(agreed);  // The ranks are out of step: abort.
  }
  return agreed;
}

absl::StatusOr<Request> Communicator::StartCollective(
    CollectiveArgs& args, const CollectiveOptions& options) {
  bool on_device = false;
  int64_t start_ns = 0;
  RELAY_RETURN_IF_ERROR(
      PrepareCollective(args, options, &on_device, &start_ns));

  const CollectiveTelemetry::Ticket ticket =
      telemetry_->Queue(args, size_, start_ns);
  RELAY_RETURN_IF_ERROR(CheckAgreementIfAsked(args, ticket));
  absl::StatusOr<Request> started = Dispatch(args, caps_, on_device);
  if (started.ok()) {
    started_.Add(*started);  // Skips ones already done.
    telemetry_->Started(ticket, *started);
  } else {
    telemetry_->Refused(ticket, started.status());
  }
  return started;
}

absl::Status Communicator::RunCollective(CollectiveArgs& args,
                                         const CollectiveOptions& options) {
  bool on_device = false;
  int64_t start_ns = 0;
  RELAY_RETURN_IF_ERROR(
      PrepareCollective(args, options, &on_device, &start_ns));
  const CollectiveTelemetry::Ticket ticket =
      telemetry_->Queue(args, size_, start_ns);
  RELAY_RETURN_IF_ERROR(CheckAgreementIfAsked(args, ticket));
  absl::Status status;
  if (!on_device && !WantsNative(args, caps_)) {
    // relay's algorithm on host memory: the engine may run it on this
    // thread without a request (the shm algorithm's one exchange).
    status = engine_.Run(transport_, caps_, args);
  } else {
    absl::StatusOr<Request> started = Dispatch(args, caps_, on_device);
    if (started.ok()) {
      started_.Add(*started);
      status = started->Wait();
    } else {
      status = started.status();
    }
  }
  telemetry_->Ran(ticket, status);
  // The call returns with nothing in flight: a collective still running
  // at its deadline would write into the caller's buffers afterwards, so
  // the communicator is aborted here, the one place for every layer below
  // (the engine, the transport's exchange), and the peers learn of it as
  // of any abort.
  // ok() first: it is inline, IsDeadlineExceeded a call into Debian's
  // shared Abseil (24 instructions, on every blocking call).
  if (!status.ok() && absl::IsDeadlineExceeded(status)) {
    Abort(status).IgnoreError();
  }
  return status;
}

absl::Status Communicator::RunCollective(CollectiveKind kind, ConstBuffer send,
                                         Buffer recv, ReduceOp op, int root,
                                         const CollectiveOptions& options) {
  CollectiveArgs args = ArgsOf(kind, send, recv, op, root);
  return RunCollective(args, options);
}

absl::Status Communicator::RunAllReduce(ConstBuffer send, Buffer recv,
                                        ReduceOp op,
                                        const CollectiveOptions& options) {
  return RunCollective(CollectiveKind::kAllReduce, send, recv, op, 0, options);
}

absl::StatusOr<Request> Communicator::Dispatch(const CollectiveArgs& args,
                                               const TransportCapabilities& caps,
                                               bool on_device) {
  if (WantsNative(args, caps)) {
    // Honours args.stream_order itself (Transport::Collective).
    absl::StatusOr<Request> native = transport_->Collective(args);
    if (native.ok() || args.algorithm == Algorithm::kNative || on_device ||
        !absl::IsUnimplemented(native.status())) {
      return native;
    }
  }
  absl::StatusOr<Request> started = engine_.Start(transport_, caps, args);
  if (started.ok() && on_device &&
      args.stream_order == StreamOrder::kOnStream) {
    // The caller's stream waits on the GPU, as if the call ran on it. Every
    // device request supports it; should the CUDA call itself fail, the
    // collective is in flight, so the communicator aborts (as any failure
    // after the start does) and the error says so.
    if (absl::Status waited = started->StreamWait(args.stream); !waited.ok()) {
      (*on_failure_)(waited);
      return absl::Status(waited.code(),
                          absl::StrCat(CollectiveName(args.kind),
                                       ": started, but ordering the caller's "
                                       "stream after it failed: ",
                                       waited.message()));
    }
  }
  return started;
}

absl::Status Communicator::CheckAgreement(const CollectiveArgs& args) {
  const Fingerprint mine = Fingerprint::Of(args, size_);
  auto key = [&](uint64_t sequence, int rank) {
    return absl::StrCat("check/", sequence, "/", rank);
  };
  RELAY_RETURN_IF_ERROR(store_->Set(key(args.sequence, rank_), mine.Encode()));
  std::vector<std::string> keys;
  keys.reserve(size_);
  for (int r = 0; r < size_; ++r) keys.push_back(key(args.sequence, r));
  const absl::Duration timeout =
      std::max(absl::ZeroDuration(), args.deadline - FastNow());
  // In slices, so that an Abort from another thread ends the wait within
  // one (the store's wait cannot be interrupted).
  constexpr absl::Duration kAbortSlice = absl::Milliseconds(50);
  absl::StatusOr<std::vector<std::string>> all;
  while (true) {
    const absl::Duration left =
        std::max(absl::ZeroDuration(), args.deadline - FastNow());
    all = store_->MultiGet(keys, std::min(left, kAbortSlice));
    if (all.ok() || !absl::IsDeadlineExceeded(all.status()) ||
        left <= kAbortSlice) {
      break;
    }
    if (abort_->set.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(abort_->mu);
      return absl::CancelledError(absl::StrCat(
          CollectiveName(args.kind), " #", args.sequence,
          ": aborted during the mismatch check: ", abort_->reason.message()));
    }
  }
  if (!all.ok()) {
    if (!absl::IsDeadlineExceeded(all.status())) return all.status();
    std::vector<int> ranks(size_);
    std::iota(ranks.begin(), ranks.end(), 0);
    return absl::DeadlineExceededError(absl::StrCat(
        CollectiveName(args.kind), " #", args.sequence, ": rank(s) ",
        RanksThatNeverSet(*store_, keys, ranks), " did not call collective #",
        args.sequence, " within ", absl::FormatDuration(timeout),
        " (mismatch check; this rank called ", mine.ToString(), ")"));
  }
  std::vector<Fingerprint> by_rank;
  by_rank.reserve(size_);
  for (const std::string& bytes : *all) {
    RELAY_ASSIGN_OR_RETURN(Fingerprint f, Fingerprint::Decode(bytes));
    by_rank.push_back(f);
  }
  // Every rank has read collective k-2's keys before writing k-1's, which
  // this rank has just read: its own k-2 key is garbage now.
  if (args.sequence >= 2) store_->Delete(key(args.sequence - 2, rank_)).IgnoreError();
  return CompareFingerprints(by_rank);
}

absl::StatusOr<Request> Communicator::Collective(
    CollectiveKind kind, ConstBuffer send, Buffer recv, ReduceOp op, int root,
    const CollectiveOptions& options) {
  CollectiveArgs args = ArgsOf(kind, send, recv, op, root);
  return StartCollective(args, options);
}

absl::StatusOr<Request> Communicator::Broadcast(
    ConstBuffer send, Buffer recv, int root, const CollectiveOptions& options) {
  return Collective(CollectiveKind::kBroadcast, send, recv, ReduceOp::kSum,
                    root, options);
}

absl::StatusOr<Request> Communicator::Reduce(ConstBuffer send, Buffer recv,
                                             ReduceOp op, int root,
                                             const CollectiveOptions& options) {
  return Collective(CollectiveKind::kReduce, send, recv, op, root, options);
}

absl::StatusOr<Request> Communicator::AllReduce(
    ConstBuffer send, Buffer recv, ReduceOp op,
    const CollectiveOptions& options) {
  return Collective(CollectiveKind::kAllReduce, send, recv, op, 0, options);
}

absl::StatusOr<Request> Communicator::AllGather(
    ConstBuffer send, Buffer recv, const CollectiveOptions& options) {
  return Collective(CollectiveKind::kAllGather, send, recv, ReduceOp::kSum, 0,
                    options);
}

absl::StatusOr<Request> Communicator::ReduceScatter(
    ConstBuffer send, Buffer recv, ReduceOp op,
    const CollectiveOptions& options) {
  return Collective(CollectiveKind::kReduceScatter, send, recv, op, 0,
                    options);
}

absl::StatusOr<Request> Communicator::Gather(ConstBuffer send, Buffer recv,
                                             int root,
                                             const CollectiveOptions& options) {
  return Collective(CollectiveKind::kGather, send, recv, ReduceOp::kSum, root,
                    options);
}

absl::StatusOr<Request> Communicator::Scatter(
    ConstBuffer send, Buffer recv, int root, const CollectiveOptions& options) {
  return Collective(CollectiveKind::kScatter, send, recv, ReduceOp::kSum, root,
                    options);
}

absl::StatusOr<Request> Communicator::AllToAll(
    ConstBuffer send, Buffer recv, const CollectiveOptions& options) {
  return Collective(CollectiveKind::kAllToAll, send, recv, ReduceOp::kSum, 0,
                    options);
}

absl::StatusOr<Request> Communicator::Barrier(const CollectiveOptions& options) {
  return Collective(CollectiveKind::kBarrier, {}, {}, ReduceOp::kSum, 0,
                    options);
}

absl::Status Communicator::ValidatePeer(int peer) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer ", peer, " is out of range [0, ", size_, ")"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidateUserTag(int64_t tag, const TransportCapabilities& caps) {
  // One limit on every transport (kMaxUserTag); a transport that carries
  // less than it is a bug, not the caller's error.
  const int64_t max = std::min(kMaxUserTag, caps.max_user_tag);
  if (tag < 0 || tag > kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("tag ", tag, " is out of range [0, ", kMaxUserTag, "]"));
  }
  if (tag > max) {
    return absl::InternalError(absl::StrCat(
        "tag ", tag, ": the transport carries tags up to ", max,
        ", below relay's kMaxUserTag"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Request> Communicator::Send(ConstBuffer data, int peer,
                                           int64_t tag,
                                           const CollectiveOptions& options) {
  return BatchSendRecv({P2POp::Send(data, peer, tag)}, options);
}

absl::StatusOr<Request> Communicator::Recv(Buffer data, int peer, int64_t tag,
                                           const CollectiveOptions& options) {
  return BatchSendRecv({P2POp::Recv(data, peer, tag)}, options);
}

absl::StatusOr<Request> Communicator::BatchSendRecv(
    absl::Span<const P2POp> ops, const CollectiveOptions& options) {
  RELAY_RETURN_IF_ERROR(CheckUsable());
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("BatchSendRecv: negative timeout");
  }
  const TransportCapabilities& caps = caps_;
  // Validate everything before posting anything.
  for (const P2POp& op : ops) {
    RELAY_RETURN_IF_ERROR(ValidatePeer(op.peer));
    // The caller's tag went in as an int64_t (P2POp::Send, Recv).
    RELAY_RETURN_IF_ERROR(
        ValidateUserTag(static_cast<int64_t>(op.tag), caps));
    RELAY_RETURN_IF_ERROR(ValidateBuffer(
        ConstBuffer(op.data),
        op.kind == P2POp::Kind::kSend ? "send buffer" : "recv buffer", caps));
  }
  const absl::Time deadline = DeadlineFor(options, FastNowNanos());
  if (ops.size() == 1 && options.stream == nullptr &&
      options.stream_order == StreamOrder::kAfterStream) {
    // Send and Recv on host memory: no batch, no joint request.
    const P2POp& op = ops.front();
    return op.kind == P2POp::Kind::kSend
               ? transport_->Isend(op.peer, op.tag, ConstBuffer(op.data),
                                   deadline)
               : transport_->Irecv(op.peer, op.tag, op.data, deadline);
  }
  // A user tag is its own wire tag (runtime/tag.h: bit 63 clear), so the
  // caller's ops go to the transport as they are.
  absl::StatusOr<Request> posted =
      transport_->PostBatch(ops, options.stream, deadline);
  if (!posted.ok()) {
    // InvalidArgument means the transport posted nothing (PostBatch's
    // contract): the communicator stays usable, as for any refused call.
    // Anything else may leave earlier ops in flight on the caller's
    // buffers: abort.
    if (!absl::IsInvalidArgument(posted.status())) {
      Abort(posted.status()).IgnoreError();
    }
    return posted;
  }
  const bool on_device = std::any_of(ops.begin(), ops.end(), [](const P2POp& op) {
    return op.data.count > 0 && !op.data.device.is_host();
  });
  if (on_device && caps.stream_ordered &&
      options.stream_order == StreamOrder::kOnStream) {
    // As for collectives: the caller's stream waits on the GPU for the
    // messages, so work queued there later sees a receive's data.
    if (absl::Status waited = posted->StreamWait(options.stream);
        !waited.ok()) {
      Abort(waited).IgnoreError();
      return absl::Status(
          waited.code(),
          absl::StrCat("BatchSendRecv: posted, but ordering the caller's "
                       "stream after it failed: ", waited.message()));
    }
  }
  return posted;
}

namespace {

// Windows take only a timeout: they exchange records on the host.
absl::Status CheckWindowOptions(const CollectiveOptions& options, const char* call) {
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(call, ": negative timeout"));
  }
  if (options.algorithm != Algorithm::kAuto || options.stream != nullptr ||
      options.stream_order != StreamOrder::kAfterStream) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": only options.timeout applies; leave the algorithm, stream and "
        "stream order at their defaults"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Communicator::RegisterWindow(Buffer region,
                                          const CollectiveOptions& options) {
  RELAY_RETURN_IF_ERROR(CheckUsable());
  RELAY_RETURN_IF_ERROR(CheckWindowOptions(options, "RegisterWindow"));
  // The region is checked by the transport, inside the exchange: a rank
  // refusing its region alone would leave its peers waiting for it.
  return transport_->RegisterWindow(region, DeadlineFor(options, FastNowNanos()));
}

absl::Status Communicator::DeregisterWindow(void* data,
                                            const CollectiveOptions& options) {
  RELAY_RETURN_IF_ERROR(CheckUsable());
  RELAY_RETURN_IF_ERROR(CheckWindowOptions(options, "DeregisterWindow"));
  return transport_->DeregisterWindow(data, DeadlineFor(options, FastNowNanos()));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(
    int color, int key, const CollectiveOptions& options) {
  RELAY_RETURN_IF_ERROR(CheckUsable());
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("Split: negative timeout");
  }
  if (options.algorithm != Algorithm::kAuto || options.stream != nullptr ||
      options.stream_order != StreamOrder::kAfterStream) {
    return absl::InvalidArgumentError(
        "Split: only options.timeout applies (its exchange of colors and keys "
        "picks its own algorithm and runs on the host); leave the algorithm, "
        "stream and stream order at their defaults");
  }
  // Taken only once the call was accepted, so a rejected Split leaves no gap
  // between this rank's split ids and its peers'; nothing after this point
  // refuses the call's input.
  const uint64_t split_index = next_split_.fetch_add(1);
  RELAY_ASSIGN_OR_RETURN(std::vector<int32_t> all,
                         GatherColorsAndKeys(color, key, split_index,
                                             options.timeout));
  std::vector<std::pair<int32_t, int>> members;  // (key, old rank)
  for (int r = 0; color >= 0 && r < size_; ++r) {
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (color >= 0 && members[new_rank].second != rank_) ++new_rank;
  const int new_size = static_cast<int>(members.size());

  auto scoped = std::make_shared<PrefixStore>(
      store_, absl::StrCat("split/", split_index, "/", color, "/"));
  CommunicatorOptions child_options = options_;
  if (options.timeout > absl::ZeroDuration()) {
    child_options.default_timeout = options.timeout;
  }
  // Every rank asks the transport, those opting out too: deriving the
  // group's wiring from this one (ncclCommSplit) is collective.
  absl::StatusOr<std::unique_ptr<Transport>> derived =
      transport_->Split(color, key);
  if (derived.ok()) {
    if (color < 0) return std::unique_ptr<Communicator>();
    if (*derived == nullptr || (*derived)->rank() != new_rank ||
        (*derived)->size() != new_size) {
      return absl::InternalError(absl::StrCat(
          "Split: ", transport_->name(), " made rank ",
          *derived ? (*derived)->rank() : -1, " of ",
          *derived ? (*derived)->size() : 0, ", expected rank ", new_rank,
          " of ", new_size));
    }
    auto child = std::unique_ptr<Communicator>(
        new Communicator(factory_, engine_, std::move(scoped),
                         *std::move(derived), new_rank, new_size,
                         child_options));
    child->owns_store_keys_ = true;
    return child;
  }
  if (!absl::IsUnimplemented(derived.status())) return derived.status();
  if (color < 0) return std::unique_ptr<Communicator>();
  RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child,
                         Create(factory_, engine_, std::move(scoped), new_rank,
                                new_size, child_options));
  child->owns_store_keys_ = true;
  return child;
}

absl::StatusOr<std::vector<int32_t>> Communicator::GatherColorsAndKeys(
    int color, int key, uint64_t split_index, absl::Duration timeout_option) {
  std::vector<int32_t> mine = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(size_));
  CollectiveOptions options;
  options.timeout = timeout_option;
  if (caps_.host_memory) {
    RELAY_ASSIGN_OR_RETURN(
        Request gathered,
        AllGather(ConstBuffer::Of(mine), Buffer::Of(all), options));
    RELAY_RETURN_IF_ERROR(gathered.Wait());
    return all;
  }
  // A transport of device memory only (NCCL) cannot gather host integers:
  // through the store instead.
  auto key_of = [&](int r) {
    return absl::StrCat("split/", split_index, "/color_key/", r);
  };
  RELAY_RETURN_IF_ERROR(
      store_->Set(key_of(rank_), absl::StrCat(color, " ", key)));
  std::vector<std::string> keys;
  keys.reserve(size_);
  for (int r = 0; r < size_; ++r) keys.push_back(key_of(r));
  const absl::Duration timeout = options.timeout > absl::ZeroDuration()
                                     ? options.timeout
                                     : options_.default_timeout;
  RELAY_ASSIGN_OR_RETURN(std::vector<std::string> values,
                         store_->MultiGet(keys, timeout));
  for (int r = 0; r < size_; ++r) {
    std::vector<absl::string_view> parts = absl::StrSplit(values[r], ' ');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &all[2 * r]) ||
        !absl::SimpleAtoi(parts[1], &all[2 * r + 1])) {
      return absl::InternalError(absl::StrCat(
          "Split: rank ", r, "'s color and key in the store are '",
          values[r], "'"));
    }
  }
  return all;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Shrink(
    absl::Span<const int> exclude, const CollectiveOptions& options) {
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("Shrink: negative timeout");
  }
  std::vector<bool> excluded(size_, false);
  for (int r : exclude) {
    if (r < 0 || r >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Shrink: rank ", r, " is out of range [0, ", size_, ")"));
    }
    if (r == rank_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Shrink: rank ", rank_, " excludes itself; only survivors call it"));
    }
    excluded[r] = true;
  }
  std::vector<int> survivors;
  std::string set;  // Canonical: sorted, no duplicates.
  for (int r = 0; r < size_; ++r) {
    if (excluded[r]) {
      absl::StrAppend(&set, set.empty() ? "" : ",", r);
    } else {
      survivors.push_back(r);
    }
  }
  const int new_rank = static_cast<int>(
      std::find(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  const uint64_t index = next_shrink_.fetch_add(1);
  const std::string prefix = absl::StrCat("shrink/", index, "/");
  // Survivors agree on the set before wiring anything: each publishes its
  // own, and all must match (a disagreement would otherwise hang Create).
  const absl::Duration timeout = options.timeout > absl::ZeroDuration()
                                     ? options.timeout
                                     : options_.default_timeout;
  RELAY_RETURN_IF_ERROR(
      store_->Set(absl::StrCat(prefix, "excluded/", rank_), set));
  std::vector<std::string> keys;
  for (int r : survivors) keys.push_back(absl::StrCat(prefix, "excluded/", r));
  absl::StatusOr<std::vector<std::string>> sets = store_->MultiGet(keys, timeout);
  if (!sets.ok()) {
    if (!absl::IsDeadlineExceeded(sets.status())) return sets.status();
    return absl::DeadlineExceededError(absl::StrCat(
        "Shrink #", index, ": rank(s) ",
        RanksThatNeverSet(*store_, keys, survivors),
        " did not call Shrink within ", absl::FormatDuration(timeout),
        " (excluding {", set, "})"));
  }
  for (size_t i = 0; i < sets->size(); ++i) {
    if ((*sets)[i] != set) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Shrink #", index, ": survivors disagree on the ranks to exclude: "
          "rank ", rank_, " excludes {", set, "}, rank ", survivors[i],
          " excludes {", (*sets)[i], "}"));
    }
  }
  auto scoped = std::make_shared<PrefixStore>(store_, absl::StrCat(prefix, "comm/"));
  CommunicatorOptions child_options = options_;
  if (options.timeout > absl::ZeroDuration()) {
    child_options.default_timeout = options.timeout;
  }
  RELAY_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> child,
      Create(factory_, engine_, std::move(scoped), new_rank,
             static_cast<int>(survivors.size()), child_options));
  child->owns_store_keys_ = true;
  return child;
}

absl::Status Communicator::Abort(absl::Status reason) {
  if (reason.ok()) reason = absl::CancelledError("aborted");
  const std::string why(reason.message());
  const bool first = abort_->Set(reason);
  if (first) {
    // Only a first abort is news: one that follows a failure already
    // reported (often the caller's reaction to it) is not published again.
    if (monitor_ != nullptr) monitor_->Publish(reason);
    WriteFlightRecordToDirectory(recorder_.get(), rank_, size_, reason.ToString());
  }
  // Both steps are idempotent, and both are needed even when a failed
  // collective already aborted the transport: the gate is closed here only.
  transport_->Abort(
      absl::CancelledError(absl::StrCat("communicator aborted: ", why)));
  // The transport touches no buffer now; wait for algorithms still running
  // a local copy or reduction on another thread.
  gate_->Close();
  // No algorithm touches a buffer now; a run whose last completion is
  // still in flight would finish its request only after this returns.
  started_.CancelAll(absl::CancelledError(
      absl::StrCat("communicator aborted: ", why)));
  return absl::OkStatus();
}

void Communicator::StartedRequests::Add(const Request& request) {
  // Most small collectives on loopback are done by the time they return,
  // and a transport's own requests are failed by its Abort, which Abort
  // and the destructor call first.
  if (request.state() == nullptr || request.state()->done() ||
      request.state()->CancelledByTransportAbort()) {
    return;
  }
  std::lock_guard<std::mutex> lock(mu);
  if (live.size() >= prune_at) {
    // Amortised: drop the completed ones once the list has doubled.
    live.erase(std::remove_if(live.begin(), live.end(),
                              [](const std::weak_ptr<RequestState>& w) {
                                std::shared_ptr<RequestState> s = w.lock();
                                return s == nullptr || s->done();
                              }),
               live.end());
    prune_at = std::max<size_t>(64, 2 * live.size());
  }
  live.push_back(request.state());
}

void Communicator::StartedRequests::CancelAll(const absl::Status& why) {
  std::vector<std::weak_ptr<RequestState>> all;
  {
    std::lock_guard<std::mutex> lock(mu);
    all.swap(live);
  }
  // Outside the lock: completion runs the callbacks, which may start work.
  for (const std::weak_ptr<RequestState>& w : all) {
    if (std::shared_ptr<RequestState> s = w.lock()) s->Complete(why);
  }
}

}  // namespace relay
