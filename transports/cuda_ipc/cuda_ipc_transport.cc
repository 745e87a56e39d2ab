#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/device_buffer_check.h"
#include "runtime/config.h"
#include "runtime/device_runtime.h"
#include "runtime/device_watch.h"
#include "runtime/operation_order.h"
#include "runtime/status_macros.h"
#include "transports/cuda_ipc/allocations.h"
#include "transports/cuda_ipc/graph_launcher.h"
#include "transports/cuda_ipc/ipc_kernels.h"
#include "transports/cuda_ipc/windows.h"

namespace relay {
namespace {

using cuda_ipc::IpcLaunch;
using cuda_ipc::IpcOp;
using cuda_ipc::IpcType;
using cuda_ipc::kMaxRanks;

// The kernels' enums mirror relay's, value for value.
static_assert(static_cast<int>(IpcType::kFloat64) ==
              static_cast<int>(DataType::kFloat64));
static_assert(static_cast<int>(IpcType::kBfloat16) ==
              static_cast<int>(DataType::kBfloat16));
static_assert(static_cast<int>(IpcOp::kAvg) == static_cast<int>(ReduceOp::kAvg));

// Two-shot pieces are a quarter of the arena on 2 ranks, and every piece
// costs a kernel's ramp and drain: on 2 H200s 64 MiB pieces reached
// 1.0-1.26x NCCL's busbw from 32 MB where 16 MiB pieces stayed at
// 0.82-1.0x (docs/design/cuda-ipc-transport.md).
constexpr uint64_t kDefaultArenaBytes = 256ull << 20;
// Low-latency words send twice the data's bytes, to every peer: on 2 ranks
// they beat the flag path at 256 KiB still; on more, up to 64 KiB is what
// was measured (docs/design/cuda-ipc-transport.md).
constexpr uint64_t kDefaultLowLatencyBytes = 256ull << 10;
constexpr uint64_t kDefaultLowLatencyBytesMoreRanks = 64ull << 10;
// On more ranks a slot is a smaller share of the arena: on 4 H200s 256 MiB
// pieces (a 1 GiB arena) ran all_reduce 3-6% faster than 64 MiB ones from
// 64 MB (0.91-0.95x NCCL's busbw at 256 MB - 2 GB, against 0.88-0.92x).
constexpr uint64_t kDefaultArenaBytesMoreRanks = 1024ull << 20;
// One-shot while (ranks - 1) x the bytes stay within this. On 2 H200s an
// eager 8 MB all_reduce took 0.97x two-shot's time one-shot; one-shot in
// steps lost (design note finding 48). More ranks: unmeasured past 4 MiB.
constexpr uint64_t kDefaultOneShotBytes = 8ull << 20;
constexpr uint64_t kDefaultOneShotBytesMoreRanks = 4ull << 20;
// Calls of this many bytes and more launch their kernels as programmatic
// dependents instead of relaunching graphs: on 2 H200s 0.91-0.97x the time
// of an eager all_reduce from 256 KB; below it graph relaunches took
// 0.74-0.95x the dependents' time (design note findings 43 and 47).
constexpr uint64_t kDefaultGraphLaunchBytes = 256ull << 10;
// all_gather and all_reduce store straight into peers' windows from this
// many bytes a call. all_gather's two barriers (the peers must have started
// before their outputs are written) cost 2 us a call on 2 H200s, and the
// saved copy wins from 32 MB (1.07x the staged busbw there, 1.09x at
// 512 MB; 0.81-0.94x below). Two-shot all_reduce has those barriers anyway;
// the same bound keeps the window lookup (a driver query) off smaller calls.
constexpr size_t kDirectBytes = size_t{32} << 20;
// How long the teardown barrier waits for a peer that never comes.
constexpr uint64_t kTeardownTimeoutNs = 10'000'000'000ull;

absl::Status Cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // Clear a non-sticky error.
  return absl::InternalError(
      absl::StrCat("cuda_ipc: ", call, ": ", cudaGetErrorString(e)));
}

// What each rank publishes through the store.
struct PeerRecord {
  uint32_t version = 1;
  int32_t pid = 0;
  int32_t device = 0;
  char host[64] = {};
  char pci_bus_id[32] = {};
  uint64_t arena_bytes = 0;
  uint64_t arena_address = 0;  // For a peer thread of the same process.
  cudaIpcMemHandle_t handle = {};
};

// What a transport shares with its requests and its watchdog.
struct Core final : DeviceWatchOwner {
  int rank = 0;
  int size = 1;
  int device = 0;
  uint64_t half_bytes = 0;
  uint64_t slot_bytes = 0;  // ArenaLayout::SlotBytes(half_bytes, size).
  uint64_t exchange_slot_bytes = 0;  // ArenaLayout::ExchangeSlotBytes.
  uint64_t one_shot_bytes = 0;
  uint64_t low_latency_bytes = 0;  // RELAY_CUDA_IPC_LOW_LATENCY_BYTES.
  uint64_t lines_bytes = 0;        // RELAY_CUDA_IPC_LINES_BYTES.
  uint64_t two_shot_words_bytes = 0;  // RELAY_CUDA_IPC_TWO_SHOT_WORDS_BYTES.
  uint64_t graph_launch_bytes = 0;    // RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES.
  void* arena = nullptr;
  void* arenas[kMaxRanks] = {};  // Every rank's, as this process sees it.
  std::vector<void*> opened;     // cudaIpcOpenMemHandle's.
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  int32_t* barrier_scratch = nullptr;
  // [0]: abort flag (the host sets it, kernels poll it); [1]: a kernel's
  // error word (ipc_kernels.h). Host memory mapped into the device.
  int* host_flags = nullptr;
  int* device_flags = nullptr;
  CheckedPointers checked_pointers;

  std::mutex enqueue_mu;
  // One operation at a time, in posting order, whatever the streams: the
  // kernels count this transport's calls and chunks. Guarded by
  // enqueue_mu.
  OperationOrder order;

  // Symmetric windows; made once the store and the driver's entry points
  // are known.
  std::unique_ptr<cuda_ipc::Windows> windows;

  std::atomic<bool> aborted{false};
  mutable std::mutex abort_mu;
  absl::Status abort_reason;  // Guarded by abort_mu.

  // The requests' completion events and the watchdog.
  DeviceWatch watch{this};
  // Kernels go through one-node graphs (graph_launcher.h); null where
  // RELAY_CUDA_IPC_LAUNCH is kernel. Used under enqueue_mu.
  std::unique_ptr<cuda_ipc::GraphLauncher> launcher;

  ~Core();
  // DeviceWatchOwner. Abort raises the flag the kernels poll (they give
  // up waiting for peers) and fails every request with `why`.
  void Abort(absl::Status why) override;
  bool Aborted() const override { return aborted.load(std::memory_order_acquire); }
  absl::Status AbortReason() const override {
    std::lock_guard<std::mutex> lock(abort_mu);
    return abort_reason;
  }
  // A finished kernel's error word (OK: none).
  absl::Status Finished(const DeviceRequest& request) override {
    return KernelError(request.what());
  }
  // A kernel's error, seen between looks: the call may have more kernels
  // queued (pieces) that would wait for the failed one's peers until the
  // deadline; aborting now makes them give up at once.
  absl::Status Health() override { return KernelError("a call in flight"); }
  absl::Status Expired(const DeviceRequest& request) override {
    return absl::DeadlineExceededError(absl::StrCat(
        "cuda_ipc: ", request.what(), " on rank ", rank, " did not finish before its deadline"));
  }
  // The status a finished kernel's error word stands for (OK: none).
  absl::Status KernelError(const char* what) const;
};

absl::Status Core::KernelError(const char* what) const {
  const int word = reinterpret_cast<volatile int*>(host_flags)[1];
  if (word == 0) return absl::OkStatus();
  const int peer = cuda_ipc::ErrorPeer(word);
  if (cuda_ipc::ErrorCode(word) == cuda_ipc::kErrorSizeMismatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc: ", what, ": rank ", rank, " posted a receive whose size differs from "
        "the matching send of rank ", peer, " (a pair's messages match in posting order, "
        "and their counts must be equal)"));
  }
  if (cuda_ipc::ErrorCode(word) == cuda_ipc::kErrorWindowFreed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc: ", what, ": rank ", peer, "'s window for this call was freed while "
        "registered; no rank stored into any window (rank ", rank, ")"));
  }
  if (cuda_ipc::ErrorCode(word) == cuda_ipc::kErrorTimeout) {
    return absl::DeadlineExceededError(absl::StrCat(
        "cuda_ipc: ", what, ": rank ", rank, " waited past the deadline for rank ",
        peer, " (it did not reach the same call)"));
  }
  return absl::CancelledError(absl::StrCat("cuda_ipc: ", what, ": rank ", rank,
                                           " gave up waiting for rank ", peer,
                                           ": the communicator was aborted"));
}

void Core::Abort(absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (!abort_reason.ok()) return;
    abort_reason = why;
  }
  aborted.store(true, std::memory_order_seq_cst);
  // Kernels waiting on a peer see it and give up.
  reinterpret_cast<volatile int*>(host_flags)[0] = 1;
  watch.FailAll(why);
}

Core::~Core() {
  watch.Stop();  // The transport stopped it already.
  windows.reset();  // Closes the peers' window allocations.
  for (void* p : opened) cudaIpcCloseMemHandle(p);
  if (arena != nullptr) cudaFree(arena);
  if (barrier_scratch != nullptr) cudaFree(barrier_scratch);
  if (host_flags != nullptr) cudaFreeHost(host_flags);
  if (ready != nullptr) cudaEventDestroy(ready);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

absl::StatusOr<IpcType> TypeOf(DataType t) {
  if (!IsValid(t)) return absl::InvalidArgumentError("cuda_ipc: unknown dtype");
  return static_cast<IpcType>(static_cast<int>(t));
}

// A call into a window whose allocation was freed while registered.
absl::Status WindowFreed(int rank, const char* call, const void* base) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "cuda_ipc: %s on rank %d: the window at %p was freed while registered "
      "(DeregisterWindow it on every rank before freeing its memory); no rank stored into it",
      call, rank, base));
}

class CudaIpcTransport final : public Transport {
 public:
  explicit CudaIpcTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {
    core_->watch.Start("relay-cuda-ipc");
  }
  ~CudaIpcTransport() override;

  absl::string_view name() const override { return "cuda_ipc"; }
  int rank() const override { return core_->rank; }
  int size() const override { return core_->size; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = false;
    caps.device_memory = true;
    caps.native_collectives = true;
    caps.device_bytes = cuda_ipc::ArenaLayout::Bytes(core_->half_bytes);
    caps.stream_ordered = true;
    caps.matches_tags = false;
    caps.latency_us = 3.0;
    caps.bandwidth_gbps = 300.0;
    return caps;
  }
  // Tags are not carried: a pair's messages match in posting order.
  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    const P2POp op = P2POp::Send(data, peer, static_cast<int64_t>(tag));
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    const P2POp op = P2POp::Recv(data, peer, static_cast<int64_t>(tag));
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> PostBatch(absl::Span<const P2POp> ops, void* cuda_stream,
                                    absl::Time deadline) override;
  absl::Status CheckMemory(const ConstBuffer& b, absl::string_view what) const override;
  absl::StatusOr<Request> Collective(const CollectiveArgs& args) override;
  absl::Status RegisterWindow(const Buffer& region, absl::Time deadline) override;
  absl::Status DeregisterWindow(void* data, absl::Time deadline) override;
  void Abort(absl::Status reason) override { core_->Abort(std::move(reason)); }

 private:
  // Queues `enqueue(stream, via)` (kernels on `stream`: the transport's, or
  // with kOnStream `user_stream` itself; through `via`, the graph launcher,
  // unless the stream is being captured, RELAY_CUDA_IPC_LAUNCH says kernel
  // or the call moves `bytes` >= RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES) after
  // the work on `user_stream` and this transport's previous operation,
  // and returns its request.
  template <typename Enqueue>
  absl::StatusOr<Request> Launch(void* user_stream, StreamOrder order, absl::Time deadline,
                                 const char* what, size_t bytes, Enqueue&& enqueue);
  absl::Status EnqueueAllReduce(const void* in, void* out, size_t count,
                                DataType dtype, ReduceOp op, absl::Time deadline,
                                cudaStream_t stream, cuda_ipc::KernelLauncher* via);
  absl::Status EnqueueExchange(const CollectiveArgs& args, cudaStream_t stream,
                               cuda_ipc::KernelLauncher* via);
  // An all_gather of kDirectBytes or more whose output lies in a
  // window: straight into the peers' outputs. False (nothing queued)
  // otherwise. InvalidArgument if the window's allocation was freed: the
  // peers are told (nothing is stored into any window, and their calls
  // fail naming this rank), and the caller aborts the communicator.
  absl::StatusOr<bool> EnqueueDirectAllGather(const CollectiveArgs& args,
                                              cudaStream_t stream,
                                              cuda_ipc::KernelLauncher* via);
  IpcLaunch BaseLaunch(absl::Time deadline) const;

  std::shared_ptr<Core> core_;
};

CudaIpcTransport::~CudaIpcTransport() {
  Core& c = *core_;
  device_runtime::ScopedDevice on_device(c.device);
  {
    std::lock_guard<std::mutex> lock(c.enqueue_mu);
    c.order.WaitForLast(c.stream);
    if (!c.aborted.load(std::memory_order_acquire)) {
      // No peer's kernel may touch this rank's arena once it is freed: meet
      // every peer first (or give up after kTeardownTimeoutNs).
      IpcLaunch l = BaseLaunch(absl::InfiniteFuture());
      l.timeout_ns = kTeardownTimeoutNs;
      cuda_ipc::LaunchTeardownBarrier(l, c.stream);
    }
    cudaStreamSynchronize(c.stream);
  }
  c.watch.Stop();  // Completes the requests whose work has finished.
}

absl::Status CudaIpcTransport::CheckMemory(const ConstBuffer& b,
                                           absl::string_view what) const {
  return CheckDeviceBuffer(b, core_->device, "cuda_ipc", what, core_->checked_pointers);
}

IpcLaunch CudaIpcTransport::BaseLaunch(absl::Time deadline) const {
  const Core& c = *core_;
  IpcLaunch l;
  l.rank = c.rank;
  l.size = c.size;
  for (int r = 0; r < c.size; ++r) l.arenas[r] = c.arenas[r];
  l.half_bytes = c.half_bytes;
  l.slot_bytes = c.slot_bytes;
  l.abort_flag = c.device_flags;
  l.error = c.device_flags + 1;
  if (deadline != absl::InfiniteFuture()) {
    // Rounded up to the millisecond, so that calls a loop repeats carry the
    // same bytes (the graph launcher then skips re-setting them); the
    // watchdog still aborts at the deadline itself, which stops the kernel.
    constexpr uint64_t kGrain = 1'000'000;
    const uint64_t left = static_cast<uint64_t>(
        std::max<int64_t>(absl::ToInt64Nanoseconds(deadline - absl::Now()), 1));
    l.timeout_ns = (left + kGrain - 1) / kGrain * kGrain;  // No overflow: left < 2^63.
  }
  return l;
}

absl::Status CudaIpcTransport::EnqueueAllReduce(const void* in, void* out,
                                                size_t count, DataType dtype,
                                                ReduceOp op, absl::Time deadline,
                                                cudaStream_t stream,
                                                cuda_ipc::KernelLauncher* via) {
  const Core& c = *core_;
  RELAY_ASSIGN_OR_RETURN(const IpcType type, TypeOf(dtype));
  const size_t esize = DataTypeSize(dtype);
  // What a contribution slot of `slot_bytes` holds besides its tail, in
  // whole 16-byte units so that every piece of an aligned buffer stays
  // aligned: one-shot pieces fit a slot, two-shot pieces a slot per rank.
  auto body_of = [](size_t slot_bytes) {
    return (slot_bytes - cuda_ipc::ArenaLayout::kTailBytes) / 16 * 16;
  };
  const size_t body = body_of(c.slot_bytes);
  // One-shot sends (size - 1) times the bytes two-shot sends about twice,
  // for one barrier instead of two.
  const bool one_shot =
      c.size == 1 ||
      ((c.size - 1) * count * esize <= c.one_shot_bytes && count * esize <= body);
  const size_t bytes = count * esize;
  // Past the one-shot words, two-shot words where set (one call: they fit
  // the low-latency region).
  const bool two_shot_words =
      c.size > 1 && bytes > c.low_latency_bytes && bytes <= c.two_shot_words_bytes;
  IpcLaunch l = BaseLaunch(deadline);
  l.type = type;
  l.op = static_cast<IpcOp>(static_cast<int>(op));
  l.two_shot = two_shot_words || !one_shot;
  l.low_latency = two_shot_words                    ? cuda_ipc::kLowLatencyWords
                  : !one_shot || c.size == 1       ? cuda_ipc::kFlagBarriers
                  : bytes <= c.low_latency_bytes ? cuda_ipc::kLowLatencyWords
                  : bytes <= c.lines_bytes       ? cuda_ipc::kLowLatencyLines
                                                 : cuda_ipc::kFlagBarriers;
  // Two-shot on the flag path stores the reduced slices straight into the
  // peers' outputs where the output lies in a window. It needs no result
  // slots, so its contributions take the whole half: pieces twice as large
  // (fewer kernels, each with its ramp and drain).
  std::optional<cuda_ipc::Windows::Placement> placed;
  if (l.two_shot && l.low_latency == cuda_ipc::kFlagBarriers && bytes >= kDirectBytes) {
    placed = c.windows->Find(out, bytes);
  }
  if (placed) l.slot_bytes = c.exchange_slot_bytes;
  const size_t piece =
      two_shot_words ? count
      : one_shot     ? std::max<size_t>(1, body / esize)
                     : std::max<size_t>(1, body_of(l.slot_bytes) * c.size / esize);
  for (size_t done = 0; done < count; done += piece) {
    l.count = std::min(piece, count - done);
    l.input = static_cast<const char*>(in) + done * esize;
    l.output = static_cast<char*>(out) + done * esize;
    if (placed) {
      for (int r = 0; r < c.size; ++r) {
        l.peer_outputs[r] = static_cast<char*>(placed->outputs[r]) + done * esize;
      }
    }
    if (placed && placed->freed) {
      // As EnqueueDirectAllGather: the peers meet a refusal instead of
      // this rank's first piece, and store nothing.
      RELAY_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(
                                     cuda_ipc::LaunchRefusedAllReduce(l, stream, via)),
                                 "all_reduce kernel launch"));
      return WindowFreed(c.rank, "all_reduce", placed->base);
    }
    RELAY_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(
                                   cuda_ipc::LaunchAllReduce(l, stream, via)),
                               "all_reduce kernel launch"));
  }
  return absl::OkStatus();
}

// The kernels' name for a collective other than all_reduce and barrier
// (which have kernels of their own: InvalidArgument).
absl::StatusOr<cuda_ipc::ExchangeKind> ExchangeKindOf(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return cuda_ipc::ExchangeKind::kAllGather;
    case CollectiveKind::kBroadcast: return cuda_ipc::ExchangeKind::kBroadcast;
    case CollectiveKind::kAllToAll: return cuda_ipc::ExchangeKind::kAllToAll;
    case CollectiveKind::kGather: return cuda_ipc::ExchangeKind::kGather;
    case CollectiveKind::kScatter: return cuda_ipc::ExchangeKind::kScatter;
    case CollectiveKind::kReduceScatter: return cuda_ipc::ExchangeKind::kReduceScatter;
    case CollectiveKind::kReduce: return cuda_ipc::ExchangeKind::kReduce;
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBarrier: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cuda_ipc: ", CollectiveName(kind), " is not an exchange"));
}

// `p` advanced by `bytes`; null stays null (a root-only buffer elsewhere).
template <typename P>
P* Advanced(P* p, size_t bytes) {
  if (p == nullptr) return nullptr;
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return static_cast<P*>(static_cast<Byte*>(p) + bytes);
}

absl::StatusOr<bool> CudaIpcTransport::EnqueueDirectAllGather(
    const CollectiveArgs& args, cudaStream_t stream, cuda_ipc::KernelLauncher* via) {
  Core& c = *core_;
  const size_t chunk = PerRankCount(args, c.size) * DataTypeSize(args.recv.dtype);
  if (chunk * c.size < kDirectBytes) return false;
  char* out = static_cast<char*>(args.recv.data);
  const std::optional<cuda_ipc::Windows::Placement> placed =
      c.windows->Find(out, chunk * c.size);
  if (!placed) return false;
  IpcLaunch l = BaseLaunch(args.deadline);
  std::copy(std::begin(placed->outputs), std::end(placed->outputs), l.peer_outputs);
  l.input = args.send.data;
  l.output = out;
  l.count = chunk;
  l.stride = chunk;
  if (placed->freed) {
    // The peers would store into memory this rank no longer owns: they
    // meet a refusal instead of this rank's call.
    RELAY_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(
                                   cuda_ipc::LaunchRefusedDirectAllGather(l, stream, via)),
                               "all_gather kernel launch"));
    return WindowFreed(c.rank, "all_gather", placed->base);
  }
  RELAY_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(
                                 cuda_ipc::LaunchDirectAllGather(l, stream, via)),
                             "all_gather kernel launch"));
  return true;
}

absl::Status CudaIpcTransport::EnqueueExchange(const CollectiveArgs& args,
                                               cudaStream_t stream,
                                               cuda_ipc::KernelLauncher* via) {
  const Core& c = *core_;
  if (args.kind == CollectiveKind::kAllGather) {
    RELAY_ASSIGN_OR_RETURN(const bool direct, EnqueueDirectAllGather(args, stream, via));
    if (direct) return absl::OkStatus();
  }
  RELAY_ASSIGN_OR_RETURN(const cuda_ipc::ExchangeKind kind, ExchangeKindOf(args.kind));
  const bool reduces = kind == cuda_ipc::ExchangeKind::kReduceScatter ||
                       kind == cuda_ipc::ExchangeKind::kReduce;
  const DataType dtype = args.send.count > 0 ? args.send.dtype : args.recv.dtype;
  const size_t esize = DataTypeSize(dtype);
  const size_t count = PerRankCount(args, c.size);  // Elements per chunk.
  IpcLaunch l = BaseLaunch(args.deadline);
  l.slot_bytes = c.exchange_slot_bytes;
  l.root = args.root;
  // Copies move bytes; reductions elements. Pieces are whole 16-byte units
  // that fit a slot, so every piece of an aligned buffer stays aligned.
  const size_t unit = reduces ? esize : 1;
  const size_t total = count * esize / unit;
  // Where every rank takes from every peer, small chunks go as low-latency
  // words, whole (ipc_low_latency.cu).
  const bool words = c.size > 1 && count * esize <= c.low_latency_bytes &&
                     (kind == cuda_ipc::ExchangeKind::kAllGather ||
                      kind == cuda_ipc::ExchangeKind::kAllToAll ||
                      kind == cuda_ipc::ExchangeKind::kReduceScatter);
  l.low_latency = words ? cuda_ipc::kLowLatencyWords : cuda_ipc::kFlagBarriers;
  const size_t piece =
      words ? total : (c.exchange_slot_bytes / 16 * 16) / unit;
  if (reduces) {
    RELAY_ASSIGN_OR_RETURN(l.type, TypeOf(dtype));
    l.op = static_cast<IpcOp>(static_cast<int>(args.op));
  }
  l.stride = total;
  for (size_t done = 0; done < total; done += piece) {
    l.count = std::min(piece, total - done);
    l.input = Advanced(args.send.data, done * unit);
    l.output = Advanced(args.recv.data, done * unit);
    RELAY_RETURN_IF_ERROR(Cuda(static_cast<cudaError_t>(
                                   cuda_ipc::LaunchExchange(l, kind, stream, via)),
                               "collective kernel launch"));
  }
  return absl::OkStatus();
}

template <typename Enqueue>
absl::StatusOr<Request> CudaIpcTransport::Launch(void* user_stream, StreamOrder order,
                                                 absl::Time deadline, const char* what,
                                                 size_t bytes, Enqueue&& enqueue) {
  Core& c = *core_;
  device_runtime::ScopedDevice on_device(c.device);
  cudaStream_t caller = user_stream == nullptr ? cudaStreamLegacy
                                               : static_cast<cudaStream_t>(user_stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RELAY_RETURN_IF_ERROR(Cuda(cudaStreamIsCapturing(caller, &capture), "cudaStreamIsCapturing"));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  // A call captured into a graph goes on the caller's stream whatever the
  // order: after the stream, it would fork this transport's stream into the
  // capture, which cudaStreamEndCapture refuses as unjoined.
  const bool on_caller = order == StreamOrder::kOnStream || capturing;
  cudaStream_t stream = on_caller ? caller : c.stream;
  unsigned long long stream_id = 0;
  cudaEvent_t done = nullptr;
  absl::Status queued;
  {
    std::lock_guard<std::mutex> lock(c.enqueue_mu);
    if (c.aborted.load(std::memory_order_acquire)) {
      return Request::Completed(c.AbortReason());
    }
    // Larger calls launch their kernels as programmatic dependents of the
    // call before, whose end they then overlap; separate graph launches
    // cannot (design note finding 42).
    cuda_ipc::KernelLauncher* via =
        capturing || bytes >= c.graph_launch_bytes ? nullptr : c.launcher.get();
    if (!capturing) {
      if (stream != caller) {
        queued = Cuda(cudaEventRecord(c.ready, caller), "cudaEventRecord (caller's stream)");
        if (queued.ok()) {
          queued = Cuda(cudaStreamWaitEvent(stream, c.ready, 0), "cudaStreamWaitEvent");
        }
      }
      if (queued.ok()) queued = c.order.Before(stream, &stream_id);
    }
    if (queued.ok()) queued = enqueue(stream, via);
    if (queued.ok() && !capturing) {
      // Done when this event fires. (Kernels that counted themselves done
      // into host memory saved the host the record but cost the GPU about
      // a microsecond each, and small calls on several GPUs wait on the
      // GPU: design note finding 45.)
      absl::StatusOr<void*> event = c.watch.GetEvent();
      queued = event.status();
      if (queued.ok()) {
        done = static_cast<cudaEvent_t>(*event);
        queued = Cuda(cudaEventRecord(done, stream), "cudaEventRecord");
      }
      if (queued.ok()) c.order.After(stream_id, done);
    }
  }
  if (!queued.ok()) {
    if (done != nullptr) c.watch.PutEvent(done);
    // Something may be queued already: the ranks are out of step.
    c.Abort(queued);
    return queued;
  }
  // A captured call runs when its graph is launched: the caller's stream
  // orders it, and there is nothing for the host to watch.
  if (capturing) return Request::CompletedOnDevice();
  auto request = std::make_shared<DeviceRequest>(std::shared_ptr<DeviceWatch>(core_, &c.watch),
                                                done, deadline, what);
  c.watch.Watch(request);
  return Request(std::move(request));
}

absl::StatusOr<Request> CudaIpcTransport::Collective(const CollectiveArgs& args) {
  Core& c = *core_;
  if (args.kind != CollectiveKind::kBarrier && PerRankCount(args, c.size) == 0) {
    return Request::CompletedOnDevice();
  }
  return Launch(args.stream, args.stream_order, args.deadline,
                CollectiveName(args.kind).data(),  // NUL-terminated.
                std::max(args.send.bytes(), args.recv.bytes()),
                [&](cudaStream_t stream, cuda_ipc::KernelLauncher* via) -> absl::Status {
                  switch (args.kind) {
                    case CollectiveKind::kBarrier:
                      return EnqueueAllReduce(c.barrier_scratch, c.barrier_scratch, 1,
                                              DataType::kInt32, ReduceOp::kSum,
                                              args.deadline, stream, via);
                    case CollectiveKind::kAllReduce:
                      return EnqueueAllReduce(args.send.data, args.recv.data,
                                              args.send.count, args.send.dtype, args.op,
                                              args.deadline, stream, via);
                    default:
                      return EnqueueExchange(args, stream, via);
                  }
                });
}

absl::StatusOr<Request> CudaIpcTransport::PostBatch(absl::Span<const P2POp> ops,
                                                    void* cuda_stream,
                                                    absl::Time deadline) {
  const Core& c = *core_;
  if (ops.empty()) return Request::CompletedOnDevice();
  if (ops.size() > static_cast<size_t>(cuda_ipc::kMaxP2POps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc: a batch of ", ops.size(), " sends and receives; at most ",
        cuda_ipc::kMaxP2POps, " go in one"));
  }
  cuda_ipc::P2PLaunch l;
  l.base = BaseLaunch(deadline);
  l.ops = static_cast<int>(ops.size());
  for (size_t j = 0; j < ops.size(); ++j) {
    const P2POp& op = ops[j];
    const bool send = op.kind == P2POp::Kind::kSend;
    if (op.peer < 0 || op.peer >= c.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cuda_ipc: peer ", op.peer, " is out of range [0, ", c.size, ")"));
    }
    if (op.data.count > 0) {
      RELAY_RETURN_IF_ERROR(CheckMemory(op.data, send ? "send buffer" : "recv buffer"));
    }
    l.op[j] = {op.data.data, op.data.bytes(), op.peer, send};
  }
  const char* what = ops.size() == 1 ? (ops[0].kind == P2POp::Kind::kSend ? "send" : "recv")
                                     : "batched send/recv";
  size_t bytes = 0;
  for (const P2POp& op : ops) bytes = std::max(bytes, op.data.bytes());
  return Launch(cuda_stream, StreamOrder::kAfterStream, deadline, what, bytes,
                [&](cudaStream_t stream, cuda_ipc::KernelLauncher* via) {
                  return Cuda(static_cast<cudaError_t>(cuda_ipc::LaunchP2P(l, stream, via)),
                              "send/recv kernel launch");
                });
}

absl::Status CudaIpcTransport::RegisterWindow(const Buffer& region, absl::Time deadline) {
  Core& c = *core_;
  device_runtime::ScopedDevice on_device(c.device);
  std::string refusal;
  if (region.data != nullptr && region.bytes() > 0) {
    if (absl::Status s = CheckMemory(ConstBuffer(region), "its region"); !s.ok()) {
      refusal = std::string(s.message());
    }
  }
  return c.windows->Register(region, refusal, deadline);
}

absl::Status CudaIpcTransport::DeregisterWindow(void* data, absl::Time deadline) {
  Core& c = *core_;
  // Refused before the barrier (Remove says why), so that a bad address
  // costs no wait.
  if (!c.windows->Contains(data)) return c.windows->Remove(data);
  // Every rank's earlier kernels, the only ones that store into this
  // rank's region, are done once every rank has passed a barrier queued
  // after them.
  CollectiveArgs barrier;
  barrier.kind = CollectiveKind::kBarrier;
  barrier.deadline = deadline;
  RELAY_ASSIGN_OR_RETURN(Request r, Collective(barrier));
  RELAY_RETURN_IF_ERROR(r.Wait());  // Until the barrier's deadline.
  device_runtime::ScopedDevice on_device(c.device);
  return c.windows->Remove(data);  // Another thread may have removed it meanwhile.
}

int VisibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string Key(int rank) { return absl::StrCat("cuda_ipc/", rank); }

}  // namespace

bool CudaIpcTransportFactory::IsViable() const {
  static const bool viable = cuda_ipc::KernelsBuilt() && VisibleDevices() > 0;
  return viable;
}

absl::StatusOr<std::unique_ptr<Transport>> CudaIpcTransportFactory::Connect(
    const TransportConfig& config) {
  if (!IsViable()) {
    return absl::FailedPreconditionError(
        "cuda_ipc: no CUDA device is visible (cudaGetDeviceCount)");
  }
  if (config.size > kMaxRanks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc: ", config.size, " ranks; the transport joins at most ",
        kMaxRanks, " GPUs of one host"));
  }
  RELAY_ASSIGN_OR_RETURN(const uint64_t arena_bytes,
                         ReadCount("RELAY_CUDA_IPC_ARENA_BYTES",
                                   config.size > 2 ? kDefaultArenaBytesMoreRanks
                                                   : kDefaultArenaBytes));
  RELAY_ASSIGN_OR_RETURN(
      const uint64_t one_shot_bytes,
      ReadCount("RELAY_CUDA_IPC_ONE_SHOT_BYTES",
                config.size > 2 ? kDefaultOneShotBytesMoreRanks : kDefaultOneShotBytes));
  RELAY_ASSIGN_OR_RETURN(const uint64_t low_latency_bytes,
                         ReadCount("RELAY_CUDA_IPC_LOW_LATENCY_BYTES",
                                   config.size > 2 ? kDefaultLowLatencyBytesMoreRanks
                                                   : kDefaultLowLatencyBytes));
  // Off until NVLink measures them against the flag path (checked on one
  // GPU only: ipc_kernels_test).
  RELAY_ASSIGN_OR_RETURN(const uint64_t lines_bytes,
                         ReadCount("RELAY_CUDA_IPC_LINES_BYTES", 0));
  // Off until 4 and 8 GPUs measure it (checked on one GPU only, on 2, 4
  // and 8 ranks: ipc_kernels_test).
  RELAY_ASSIGN_OR_RETURN(const uint64_t two_shot_words_bytes,
                         ReadCount("RELAY_CUDA_IPC_TWO_SHOT_WORDS_BYTES", 0));
  RELAY_ASSIGN_OR_RETURN(const std::string launch, ReadChoice("RELAY_CUDA_IPC_LAUNCH", "graph"));
  RELAY_ASSIGN_OR_RETURN(const uint64_t graph_launch_bytes,
                         ReadCount("RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES", kDefaultGraphLaunchBytes));
  RELAY_ASSIGN_OR_RETURN(const bool shared_gpu, ReadSwitch("RELAY_CUDA_IPC_SHARED_GPU", false));
  auto core = std::make_shared<Core>();
  Core& c = *core;
  if (launch == "graph") c.launcher = std::make_unique<cuda_ipc::GraphLauncher>();
  c.rank = config.rank;
  c.size = config.size;
  c.half_bytes = (arena_bytes / 2) / 256 * 256;
  c.slot_bytes = cuda_ipc::ArenaLayout::SlotBytes(c.half_bytes, c.size);
  // The table's least arena (1 MiB) gives 8 ranks 32 KiB slots, room for
  // the all_reduce tail and whole 16-byte pieces.
  c.exchange_slot_bytes = cuda_ipc::ArenaLayout::ExchangeSlotBytes(c.half_bytes, c.size);
  c.one_shot_bytes = one_shot_bytes;
  // The region holds less a rank the more ranks share it.
  c.low_latency_bytes =
      std::min<uint64_t>(low_latency_bytes, cuda_ipc::ArenaLayout::LowLatencyBytes(c.size));
  c.lines_bytes = std::min<uint64_t>(lines_bytes, cuda_ipc::ArenaLayout::LinesBytes(c.size));
  c.two_shot_words_bytes = std::min<uint64_t>(
      two_shot_words_bytes, cuda_ipc::ArenaLayout::LowLatencyTwoShotBytes(c.size));
  c.graph_launch_bytes = graph_launch_bytes;
  RELAY_RETURN_IF_ERROR(Cuda(cudaGetDevice(&c.device), "cudaGetDevice"));
  RELAY_RETURN_IF_ERROR(
      Cuda(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking),
           "cudaStreamCreateWithFlags"));
  RELAY_RETURN_IF_ERROR(c.order.Init(c.stream));
  // Every kernel now, not at its first call (ipc_kernels.h says why).
  RELAY_RETURN_IF_ERROR(
      Cuda(static_cast<cudaError_t>(cuda_ipc::LoadKernels()), "loading the kernels"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming),
                             "cudaEventCreateWithFlags"));
  const size_t bytes = cuda_ipc::ArenaLayout::Bytes(c.half_bytes);
  RELAY_RETURN_IF_ERROR(Cuda(cudaMalloc(&c.arena, bytes), "cudaMalloc (arena)"));
  // Flags, counters and low-latency words start at zero; the data halves
  // need no clearing.
  RELAY_RETURN_IF_ERROR(Cuda(cudaMemset(c.arena, 0, cuda_ipc::ArenaLayout::kZeroedBytes),
                             "cudaMemset (arena flags)"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaMalloc(&c.barrier_scratch, sizeof(int32_t)),
                             "cudaMalloc (barrier scratch)"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaHostAlloc(reinterpret_cast<void**>(&c.host_flags),
                                           2 * sizeof(int), cudaHostAllocMapped),
                             "cudaHostAlloc (abort and error words)"));
  c.host_flags[0] = c.host_flags[1] = 0;
  RELAY_RETURN_IF_ERROR(
      Cuda(cudaHostGetDevicePointer(reinterpret_cast<void**>(&c.device_flags),
                                    c.host_flags, 0),
           "cudaHostGetDevicePointer"));
  RELAY_ASSIGN_OR_RETURN(cuda_ipc::Allocations allocations, cuda_ipc::Allocations::Load());
  c.windows = std::make_unique<cuda_ipc::Windows>(
      c.rank, c.size, config.store, allocations,
      [owner = &c](absl::Status why) { owner->Abort(std::move(why)); });
  RELAY_RETURN_IF_ERROR(Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));

  PeerRecord mine;
  mine.pid = static_cast<int32_t>(getpid());
  mine.device = c.device;
  gethostname(mine.host, sizeof(mine.host) - 1);
  RELAY_RETURN_IF_ERROR(Cuda(cudaDeviceGetPCIBusId(mine.pci_bus_id,
                                                   sizeof(mine.pci_bus_id), c.device),
                             "cudaDeviceGetPCIBusId"));
  mine.arena_bytes = bytes;
  mine.arena_address = reinterpret_cast<uint64_t>(c.arena);
  RELAY_RETURN_IF_ERROR(
      Cuda(cudaIpcGetMemHandle(&mine.handle, c.arena), "cudaIpcGetMemHandle"));
  RELAY_RETURN_IF_ERROR(config.store->Set(
      Key(c.rank),
      absl::string_view(reinterpret_cast<const char*>(&mine), sizeof(mine))));

  std::vector<PeerRecord> all(c.size);
  for (int r = 0; r < c.size; ++r) {
    RELAY_ASSIGN_OR_RETURN(std::string raw, config.store->Get(Key(r), config.timeout));
    if (raw.size() != sizeof(PeerRecord)) {
      return absl::InternalError(absl::StrCat(
          "cuda_ipc: rank ", r, "'s record has ", raw.size(), " bytes, expected ",
          sizeof(PeerRecord), " (a different relay build?)"));
    }
    std::memcpy(&all[r], raw.data(), sizeof(PeerRecord));
  }
  std::vector<std::string> elsewhere;
  for (int r = 0; r < c.size; ++r) {
    if (std::strncmp(all[r].host, mine.host, sizeof(mine.host)) != 0) {
      elsewhere.push_back(absl::StrCat("rank ", r, " on ", all[r].host));
    }
  }
  if (!elsewhere.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda_ipc: every rank must be on one host; rank ", c.rank, " is on ",
        mine.host, ", ", absl::StrJoin(elsewhere, ", ")));
  }
  for (int r = 0; r < c.size; ++r) {
    if (r == c.rank) {
      c.arenas[r] = c.arena;
      continue;
    }
    int peer_device = -1;
    if (cudaDeviceGetByPCIBusId(&peer_device, all[r].pci_bus_id) == cudaSuccess) {
      if (peer_device == c.device && !shared_gpu) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cuda_ipc: ranks ", c.rank, " and ", r, " both use GPU ",
            all[r].pci_bus_id,
            "; each rank needs a GPU of its own (RELAY_CUDA_IPC_SHARED_GPU=1 "
            "lets processes share one, for tests)"));
      }
      if (peer_device == c.device && all[r].pid == mine.pid) {
        // One context: CUDA calls that wait for the whole device (cudaFree,
        // cudaDeviceSynchronize) would wait for the peer's kernel, which
        // waits for this rank.
        return absl::FailedPreconditionError(absl::StrCat(
            "cuda_ipc: ranks ", c.rank, " and ", r, " share GPU ", all[r].pci_bus_id,
            " as threads of one process; ranks sharing a GPU must be processes"));
      }
    } else {
      cudaGetLastError();  // Not visible here: cudaIpcOpenMemHandle decides.
    }
    if (peer_device >= 0 && peer_device != c.device) {  // Sharing one needs no peer access.
      int can = 0;
      RELAY_RETURN_IF_ERROR(Cuda(cudaDeviceCanAccessPeer(&can, c.device, peer_device),
                                 "cudaDeviceCanAccessPeer"));
      if (!can) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cuda_ipc: rank ", c.rank, "'s GPU (cuda:", c.device,
            ") cannot access rank ", r, "'s (", all[r].pci_bus_id,
            ") as a peer (no NVLink or PCIe peer-to-peer between them)"));
      }
    }
    if (all[r].pid == mine.pid) {
      // A thread of this process: its pointer is valid here once peer
      // access is on.
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        return Cuda(e, "cudaDeviceEnablePeerAccess");
      }
      cudaGetLastError();
      c.arenas[r] = reinterpret_cast<void*>(all[r].arena_address);
    } else {
      void* mapped = nullptr;
      RELAY_RETURN_IF_ERROR(Cuda(cudaIpcOpenMemHandle(&mapped, all[r].handle,
                                                      cudaIpcMemLazyEnablePeerAccess),
                                 "cudaIpcOpenMemHandle"));
      c.opened.push_back(mapped);
      c.arenas[r] = mapped;
    }
  }
  return std::unique_ptr<Transport>(new CudaIpcTransport(std::move(core)));
}

}  // namespace relay
