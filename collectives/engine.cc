#include "collectives/engine.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "collectives/device_stream_ops.h"
#include "collectives/direct.h"
#include "collectives/executor.h"
#include "collectives/linear.h"
#include "collectives/recursive.h"
#include "collectives/reduce.h"
#include "collectives/shm.h"
#include "collectives/ring.h"
#include "collectives/stream_executor.h"
#include "collectives/tree.h"
#include "runtime/config.h"
#include "runtime/tag.h"
#include "runtime/transport.h"

namespace relay {
namespace {

// Well under the 2^16 lanes a tag can name (runtime/tag.h).
constexpr size_t kMaxPipelineLanes = 256;

// On device buffers every lane's step is one transport batch (an NCCL group
// and its launch): lanes are few and large there, enough to overlap one
// lane's reduction with the next lane's transfer.
constexpr size_t kDeviceMinLaneBytes = size_t{4} << 20;

// The smallest block a bidirectional ring all_reduce step sends each way
// on device buffers: below it, halving each message costs more than using
// both neighbours' channels gains (docs/design/tuning-history.md).
constexpr size_t kBidirectionalMinBlockBytes = size_t{4} << 20;

bool OnDevice(const CollectiveArgs& a) {
  return (a.send.count > 0 && !a.send.device.is_host()) ||
         (a.recv.count > 0 && !a.recv.device.is_host());
}

const char* At(const void* base, size_t elements, DataType dtype) {
  return static_cast<const char*>(base) + elements * DataTypeSize(dtype);
}

}  // namespace

ScheduleEngine::ScheduleEngine() {
  absl::StatusOr<std::optional<std::string>> spec = ReadText("RELAY_ALGORITHM");
  if (spec.ok() && spec->has_value() && !(*spec)->empty()) {
    absl::StatusOr<AlgorithmOverrides> parsed = ParseAlgorithmOverrides(**spec);
    if (parsed.ok()) {
      overrides_ = *std::move(parsed);
    } else {
      config_error_ = absl::InvalidArgumentError(
          absl::StrCat("RELAY_ALGORITHM: ", parsed.status().message()));
    }
  }
  // The first malformed variable is every call's error (config_error_).
  auto take = [this](auto read, auto* out) {
    if (!config_error_.ok()) return;
    if (read.ok()) {
      *out = *read;
    } else {
      config_error_ = read.status();
    }
  };
  take(ReadCount("RELAY_SEGMENT_BYTES", segment_bytes_), &segment_bytes_);
  // A lane is a field of the message tag (runtime/tag.h): the table's
  // range stops at kMaxLanes.
  static_assert(kMaxLanes == 65536);
  take(ReadCount("RELAY_PIPELINE_DEPTH", pipeline_depth_), &pipeline_depth_);
  take(ReadSwitch("RELAY_RING_BIDIRECTIONAL", device_ring_bidirectional_),
       &device_ring_bidirectional_);
}

size_t ScheduleEngine::SegmentBytes(const TransportCapabilities& caps) const {
  if (segment_bytes_ != 0) return segment_bytes_;  // RELAY_SEGMENT_BYTES.
  // Bytes the link moves in kSegmentLatencies of its per-message latency:
  // below that, a segment's fixed cost is over a tenth of its time.
  constexpr double kSegmentLatencies = 10;
  constexpr size_t kDefaultSegmentBytes = size_t{1} << 20;
  const double floor_bytes = kSegmentLatencies * caps.latency_us * 1e-6 *
                             caps.bandwidth_gbps * 1e9;
  return std::max(kDefaultSegmentBytes, static_cast<size_t>(floor_bytes));
}

ScheduleEngine::ScheduleEngine(std::shared_ptr<StreamOps> host_stream_ops)
    : ScheduleEngine() {
  host_stream_ops_ = std::move(host_stream_ops);
}

absl::Status ScheduleEngine::Prepare(const TransportCapabilities& caps) const {
  // Not for loopback, which moves host memory too: loading would make a
  // CUDA context for a job that may never touch a GPU.
  if (!caps.device_memory || caps.host_memory || !caps.stream_ordered ||
      !DeviceStreamOpsAvailable()) {
    return absl::OkStatus();
  }
  return LoadDeviceKernels();
}

absl::Status ScheduleEngine::Supports(CollectiveKind kind,
                                      Algorithm algorithm) const {
  if (!config_error_.ok()) return config_error_;
  if (algorithm == Algorithm::kAuto || Implements(algorithm, kind)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      CollectiveName(kind), ": algorithm '", AlgorithmName(algorithm),
      "' does not implement it"));
}

namespace {

// The element type of a call, from the buffers that matter on every rank.
DataType DataTypeOfCall(const CollectiveArgs& a) {
  switch (a.kind) {
    case CollectiveKind::kReduce:
    case CollectiveKind::kGather:
      return a.send.dtype;
    case CollectiveKind::kBarrier:
      return DataType::kUint8;
    default:
      return a.recv.dtype;
  }
}

bool InPlace(const CollectiveArgs& a, int rank, size_t count, DataType t) {
  const bool root = rank == a.root;
  switch (a.kind) {
    case CollectiveKind::kAllReduce:
      return a.send.data == a.recv.data;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      return root && a.send.data == a.recv.data;
    case CollectiveKind::kAllGather:
      return a.send.data == At(a.recv.data, rank * count, t);
    case CollectiveKind::kGather:
      return root && a.send.data == At(a.recv.data, rank * count, t);
    case CollectiveKind::kReduceScatter:
      return a.recv.data == At(a.send.data, rank * count, t);
    case CollectiveKind::kScatter:
      return root && a.recv.data == At(a.send.data, rank * count, t);
    default:
      return false;
  }
}

// nccl-tests' S: the whole vector for all_gather, reduce_scatter, gather,
// scatter and all_to_all; one rank's vector otherwise.
size_t ModelBytes(CollectiveKind kind, size_t count, DataType t, int size) {
  const size_t bytes = count * DataTypeSize(t);
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
    case CollectiveKind::kAllToAll:
      return bytes * static_cast<size_t>(size);
    default:
      return bytes;
  }
}

}  // namespace

Algorithm ScheduleEngine::Resolve(const CollectiveArgs& args, int size,
                                  const TransportCapabilities& caps) const {
  if (args.algorithm != Algorithm::kAuto &&
      args.algorithm != Algorithm::kNative) {
    return args.algorithm;
  }
  // The empty test first: a flat_hash_map lookup is about 30 instructions
  // even in an empty map, and RELAY_ALGORITHM is rarely set.
  if (!overrides_.empty()) {
    if (auto it = overrides_.find(args.kind);
        it != overrides_.end() && it->second != Algorithm::kAuto) {
      return it->second;
    }
  }
  const DataType t = DataTypeOfCall(args);
  const size_t count = static_cast<size_t>(PerRankCount(args, size));
  return ChooseAlgorithmCached(args.kind,
                               ModelBytes(args.kind, count, t, size), size,
                               caps);
}

Schedule BuildSchedule(CollectiveKind kind, Algorithm algorithm,
                       const ScheduleParams& p) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      if (algorithm == Algorithm::kRecursiveDoubling) {
        return RecursiveDoublingAllReduce(p);
      }
      if (algorithm == Algorithm::kRabenseifner) return RabenseifnerAllReduce(p);
      return RingAllReduce(p);
    case CollectiveKind::kAllGather:
      return RingAllGather(p);
    case CollectiveKind::kReduceScatter:
      return RingReduceScatter(p);
    case CollectiveKind::kBroadcast:
      return BinomialBroadcast(p);
    case CollectiveKind::kReduce:
      return BinomialReduce(p);
    case CollectiveKind::kGather:
      return algorithm == Algorithm::kLinear ? LinearGather(p)
                                             : BinomialGather(p);
    case CollectiveKind::kScatter:
      return algorithm == Algorithm::kLinear ? LinearScatter(p)
                                             : BinomialScatter(p);
    case CollectiveKind::kAllToAll:
      return PairwiseAllToAll(p);
    case CollectiveKind::kBarrier:
      return DisseminationBarrier(p);
  }
  return Schedule{};
}

std::shared_ptr<const Schedule> CachedSchedule(CollectiveKind kind,
                                               Algorithm algorithm,
                                               const ScheduleParams& params) {
  struct Entry {
    CollectiveKind kind;
    Algorithm algorithm;
    ScheduleParams params;
    std::shared_ptr<const Schedule> schedule;
  };
  // A few entries: a training step cycles through a handful of shapes.
  constexpr size_t kEntries = 8;
  // Steps over every lane: a small collective's schedule has a few dozen.
  constexpr size_t kMaxCachedSteps = 64;
  thread_local std::array<Entry, kEntries> entries;
  thread_local size_t next = 0;
  for (const Entry& e : entries) {
    if (e.schedule != nullptr && e.kind == kind && e.algorithm == algorithm &&
        e.params == params) {
      return e.schedule;
    }
  }
  auto schedule = std::make_shared<const Schedule>(
      BuildSchedule(kind, algorithm, params));
  size_t steps = 0;
  for (const Lane& lane : schedule->lanes) steps += lane.steps.size();
  if (steps <= kMaxCachedSteps) {
    entries[next++ % kEntries] = Entry{kind, algorithm, params, schedule};
  }
  return schedule;
}

bool ScheduleEngine::RunsAlone(const CollectiveArgs& args, int size,
                               const TransportCapabilities& caps) const {
  return size == 1 && caps.host_memory &&
         (args.algorithm == Algorithm::kAuto ||
          args.algorithm == Algorithm::kNative) &&
         host_stream_ops_ == nullptr && !OnDevice(args) &&
         (overrides_.empty() || !overrides_.contains(args.kind));
}

namespace {

// A group of one: every collective's result is the rank's own contribution
// (a reduction of one value, avg included, is that value; a gather, a
// scatter or an all-to-all of one block is that block), `count` elements
// of `dtype`. Validation has allowed the buffers to share memory only as
// the very same elements (in place), where nothing is left to do. A copy,
// not a schedule: a request and an executor cost ten times the copy of a
// small call (docs/design/tuning-history.md).
void RunAlone(const CollectiveArgs& args, size_t count, DataType dtype) {
  if (args.kind == CollectiveKind::kBarrier) return;
  CopyIfDistinct(args.recv.data, args.send.data, count * DataTypeSize(dtype));
}

}  // namespace

absl::Status ScheduleEngine::Run(const std::shared_ptr<Transport>& transport,
                                 const TransportCapabilities& caps,
                                 const CollectiveArgs& args) const {
  // The shm algorithm's one exchange runs on this thread with no request
  // (RunShm); everything else starts and waits.
  if (config_error_.ok() && caps.host_memory && !OnDevice(args) &&
      host_stream_ops_ == nullptr) {
    const int size = transport->size();
    const size_t count = static_cast<size_t>(PerRankCount(args, size));
    if (args.kind != CollectiveKind::kBarrier && count == 0) {
      return absl::OkStatus();
    }
    if (RunsAlone(args, size, caps)) {
      RunAlone(args, count, DataTypeOfCall(args));
      return absl::OkStatus();
    }
    const Algorithm algorithm = Resolve(args, size, caps);
    if (algorithm == Algorithm::kShm) {
      return RunShm(*transport, args, count, DataTypeOfCall(args), caps);
    }
    // Started as Start would, without resolving again.
    absl::StatusOr<Request> started =
        StartResolved(transport, caps, caps, args, algorithm, count,
                      /*on_device=*/false);
    if (!started.ok()) return started.status();
    return started->Wait();
  }
  return CollectiveEngine::Run(transport, caps, args);
}

absl::StatusOr<Request> ScheduleEngine::Start(
    const std::shared_ptr<Transport>& transport,
    const TransportCapabilities& caps,
    const CollectiveArgs& args) const {
  if (!config_error_.ok()) return config_error_;
  const int size = transport->size();
  const size_t count = static_cast<size_t>(PerRankCount(args, size));
  if (args.kind != CollectiveKind::kBarrier && count == 0) {
    // Buffers declared on a device make a device operation, whatever their
    // count: the caller may StreamWait on it, as on the native path.
    const bool device_call = !args.send.device.is_host() ||
                             !args.recv.device.is_host() || !caps.host_memory;
    return device_call ? Request::CompletedOnDevice() : Request::Completed();
  }
  if (RunsAlone(args, size, caps)) {
    RunAlone(args, count, DataTypeOfCall(args));
    return Request::Completed();
  }
  // A transport that moves device memory only (NCCL) runs even a call with
  // no buffers (a barrier) as device work: the host executor posts a step's
  // receive and send as two operations, and two NCCL launches that each
  // wait for the peer's other one deadlock (NCCL matches by posting order).
  const bool on_device = OnDevice(args) || !caps.host_memory;
  // On device buffers a transport's host-memory shortcuts do not apply
  // (loopback offers both): the rendezvous and the shared-memory exchange
  // hand over host addresses, a fused receive-and-reduce runs a host
  // function. The cost model then chooses among the scheduled algorithms.
  // (An optional: the host path, where every nanosecond of a small call
  // shows, builds no second copy.)
  std::optional<TransportCapabilities> device_caps;
  if (on_device) {
    device_caps.emplace(caps);
    device_caps->shared_address_space = false;
    device_caps->exchange_bytes = 0;
    device_caps->fused_recv_reduce = false;
  }
  const TransportCapabilities& usable = on_device ? *device_caps : caps;
  return StartResolved(transport, caps, usable, args,
                       Resolve(args, size, usable), count, on_device);
}

absl::StatusOr<Request> ScheduleEngine::StartResolved(
    const std::shared_ptr<Transport>& transport,
    const TransportCapabilities& caps, const TransportCapabilities& usable,
    const CollectiveArgs& args, Algorithm algorithm, size_t count,
    bool on_device) const {
  const int size = transport->size(), rank = transport->rank();
  if (!Implements(algorithm, args.kind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        CollectiveName(args.kind), ": algorithm '", AlgorithmName(algorithm),
        "' does not implement it"));
  }
  if (on_device) {
    if (!caps.stream_ordered || algorithm == Algorithm::kDirect ||
        algorithm == Algorithm::kShm) {
      return absl::UnimplementedError(absl::StrCat(
          CollectiveName(args.kind), ": relay's algorithm '",
          AlgorithmName(algorithm), "' on device buffers needs a "
          "stream-ordered transport (nccl, or loopback built with CUDA) and "
          "an algorithm other than "
          "direct or shm; ", transport->name(), " is ",
          caps.stream_ordered ? "one" : "not"));
    }
    if (!DeviceStreamOpsAvailable()) {
      return absl::FailedPreconditionError(absl::StrCat(
          CollectiveName(args.kind), ": device buffers, but this build has "
          "no CUDA or no GPU is visible"));
    }
    // The stream executor forks the caller's stream into lanes of its own,
    // allocates on them and tracks them from the host: tried on a GPU, a
    // capture of it failed (cudaErrorStreamCaptureInvalidated) and left
    // its streams unusable for later calls.
    if (StreamIsCapturing(args.stream)) {
      return absl::InvalidArgumentError(absl::StrCat(
          CollectiveName(args.kind), ": relay's algorithm '", AlgorithmName(algorithm),
          "' cannot be captured into a CUDA graph; capture the transport's own "
          "(algorithm auto or native)"));
    }
  }
  if (algorithm == Algorithm::kDirect) {
    return StartDirect(*transport, args, count);
  }
  const DataType dtype = DataTypeOfCall(args);
  if (algorithm == Algorithm::kShm) {
    return StartShm(*transport, args, count, dtype, usable);
  }

  ScheduleParams params;
  params.rank = rank;
  params.size = size;
  params.root = args.root;
  params.count = count;
  params.in_place = InPlace(args, rank, count, dtype);
  params.average = IsReduction(args.kind) && args.op == ReduceOp::kAvg;
  const bool pipelined = algorithm == Algorithm::kRing ||
                         algorithm == Algorithm::kRabenseifner ||
                         algorithm == Algorithm::kRecursiveDoubling ||
                         args.kind == CollectiveKind::kBroadcast ||
                         args.kind == CollectiveKind::kReduce;
  if (pipelined) {
    const size_t bytes = ModelBytes(args.kind, count, dtype, size);
    params.lanes = on_device
        ? std::clamp<size_t>(bytes / kDeviceMinLaneBytes, 1, pipeline_depth_)
        : std::clamp<size_t>(bytes / SegmentBytes(usable), 1,
                             kMaxPipelineLanes);
    params.lanes = std::min(params.lanes, std::max<size_t>(count, 1));
  }
  // On device buffers over NCCL a ring step to one neighbour gets only that
  // peer's point-to-point channels (ring.h). Going both ways halves each
  // message, which costs more than it gains below
  // kBidirectionalMinBlockBytes each way.
  if (on_device && device_ring_bidirectional_ &&
      algorithm == Algorithm::kRing &&
      args.kind == CollectiveKind::kAllReduce && size > 2) {
    const size_t block_bytes =
        ModelBytes(args.kind, count, dtype, size) / params.lanes /
        (2 * static_cast<size_t>(size));
    params.bidirectional = block_bytes >= kBidirectionalMinBlockBytes;
  }

  ExecutionContext ctx;
  ctx.transport = transport;  // The schedule runs on: it shares the wiring.
  ctx.caps = usable;
  ctx.send = args.send;
  ctx.recv = args.recv;
  ctx.dtype = dtype;
  ctx.op = args.op;
  ctx.sequence = args.sequence;
  ctx.deadline = args.deadline;
  ctx.window = pipeline_depth_;
  if (args.gate != nullptr) ctx.gate = *args.gate;
  if (args.on_failure != nullptr) ctx.on_failure = *args.on_failure;
  if (on_device || host_stream_ops_ != nullptr) {
    return ExecuteScheduleOnStream(
        BuildSchedule(args.kind, algorithm, params), std::move(ctx),
        args.stream, on_device ? DeviceStreamOps() : host_stream_ops_);
  }
  return ExecuteSchedule(CachedSchedule(args.kind, algorithm, params),
                         std::move(ctx));
}

}  // namespace relay
