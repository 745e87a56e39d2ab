#include "transports/nccl/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/device_runtime.h"
#include "runtime/status_macros.h"
#include "transports/nccl/nccl_comms.h"
#include "transports/nccl/nccl_core.h"
#include "transports/nccl/nccl_status.h"

namespace relay {
namespace {

using nccl_internal::Core;
using nccl_internal::MakeP2pComm;
using nccl_internal::PrepareCore;

constexpr char kUniqueIdKey[] = "nccl/unique_id";

absl::StatusOr<ncclDataType_t> NcclType(DataType t) {
  switch (t) {
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kUint32: return ncclUint32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint64: return ncclUint64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBfloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL type for dtype ", static_cast<int>(t)));
}

absl::StatusOr<ncclRedOp_t> NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL op for reduce op ", static_cast<int>(op)));
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {
    core_->watch.Start("relay-watchdog");
  }
  ~NcclTransport() override {
    // Requests still pending are failed by the owner's Abort; the core lives
    // on with them.
    core_->watch.Stop();
  }

  absl::string_view name() const override { return "nccl"; }
  int rank() const override { return core_->rank; }
  int size() const override { return core_->size; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = false;
    caps.device_memory = true;
    caps.native_collectives = true;
    caps.matches_tags = false;
    caps.stream_ordered = true;
    caps.latency_us = 10;
    caps.bandwidth_gbps = 100;
    return caps;
  }

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    const P2POp op{P2POp::Kind::kSend, peer, tag,
                    Buffer{const_cast<void*>(data.data), data.count,
                           data.dtype, data.device}};
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    const P2POp op{P2POp::Kind::kRecv, peer, tag, data};
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> PostBatch(absl::Span<const P2POp> ops,
                                    void* cuda_stream,
                                    absl::Time deadline) override;
  absl::StatusOr<Request> Collective(const CollectiveArgs& args) override;
  absl::StatusOr<std::unique_ptr<Transport>> Split(int color,
                                                   int key) override;

  void Abort(absl::Status reason) override { core_->Abort(std::move(reason)); }

 private:
  absl::Status CheckMemory(const ConstBuffer& b,
                           absl::string_view what) const override;
  // The driver's verdict on one address (cudaPointerGetAttributes).
  // Queues `enqueue(stream)` (NCCL calls on `stream`: the transport's, or
  // with kOnStream `user_stream` itself) after the work on `user_stream`,
  // and returns the request of what it queued.
  template <typename Enqueue>
  absl::StatusOr<Request> Launch(void* user_stream, StreamOrder order,
                                 absl::Time deadline,
                                 const char* what, uint64_t sequence,
                                 Enqueue&& enqueue);
  // On a stream being captured: `enqueue(caller)` goes into the graph, on
  // the caller's stream whatever the order (forking the transport's stream
  // into the capture would leave it unjoined), with no event and no wait
  // on the previous operation (neither may cross a capture's edge). The
  // graph's replays are ordered by the stream they are launched on, and
  // the request is complete on the device (nothing for the host to watch).
  template <typename Enqueue>
  absl::StatusOr<Request> LaunchCaptured(cudaStream_t caller, Enqueue&& enqueue);
  absl::Status EnqueueCollective(const CollectiveArgs& args,
                                 cudaStream_t stream);
  // A batch's sends and receives, in one NCCL group on `stream`
  // (PostBatch's Launch).
  absl::Status EnqueueBatch(absl::Span<const P2POp> ops, cudaStream_t stream);

  std::shared_ptr<Core> core_;
};

absl::Status NcclTransport::CheckMemory(const ConstBuffer& b,
                                        absl::string_view what) const {
  return CheckDeviceBuffer(b, core_->device, "nccl", what, core_->checked_pointers);
}

template <typename Enqueue>
absl::StatusOr<Request> NcclTransport::Launch(void* user_stream,
                                              StreamOrder order,
                                              absl::Time deadline,
                                              const char* what,
                                              uint64_t sequence,
                                              Enqueue&& enqueue) {
  Core& c = *core_;
  // Events and stream belong to the communicator's GPU; the calling thread
  // may have another one current.
  device_runtime::ScopedDevice on_device(c.device);
  cudaStream_t caller = user_stream == nullptr ? cudaStreamLegacy
                                               : static_cast<cudaStream_t>(user_stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RELAY_RETURN_IF_ERROR(
      CudaStatus(cudaStreamIsCapturing(caller, &capture), "cudaStreamIsCapturing"));
  if (capture != cudaStreamCaptureStatusNone) return LaunchCaptured(caller, enqueue);
  cudaEvent_t done = nullptr;
  absl::Status queued;
  absl::Status aborted;  // The abort's reason, once aborted.
  {
    std::lock_guard<std::timed_mutex> lock(c.enqueue_mu);
    if (c.aborted.load(std::memory_order_acquire)) {
      // Transport::Abort's contract: a later post completes at once with
      // the abort's reason (a peer's loss stays a loss), not a misuse error.
      aborted = c.AbortReason();
    } else if (absl::StatusOr<void*> event = c.watch.GetEvent(); !event.ok()) {
      queued = event.status();
    } else {
      done = static_cast<cudaEvent_t>(*event);
      // Ordered after the caller's stream by an event, the legacy default
      // stream included: the transport's stream is non-blocking, so work
      // queued later on the caller's stream does not wait for this
      // operation (that is StreamWait's job). A blocking stream saved the
      // event on the legacy stream, but then every later kernel there waited
      // for communication: no overlap, and a host copy from pageable memory
      // (which waits for the legacy stream) blocked while a receive waited
      // for its peer (seen in torch, whose default stream is the legacy one).
      // Always an event and a wait, even when the caller's stream has
      // nothing left to run: asking first (cudaStreamQuery) costs more than
      // the event (docs/design/tuning-history.md).
      // StreamOrder::kOnStream: on the caller's stream itself, as bare NCCL
      // is called; it still runs after this transport's previous operation
      // (Core::order, below).
      cudaStream_t stream = order == StreamOrder::kOnStream ? caller : c.stream;
      if (stream != caller) {
        queued = CudaStatus(cudaEventRecord(c.ready, caller),
                            "cudaEventRecord (caller's stream)");
        if (queued.ok()) {
          queued = CudaStatus(cudaStreamWaitEvent(stream, c.ready, 0),
                              "cudaStreamWaitEvent");
        }
      }
      unsigned long long stream_id = 0;
      if (queued.ok()) queued = c.order.Before(stream, &stream_id);
      if (queued.ok()) queued = enqueue(stream);
      if (queued.ok()) {
        queued = CudaStatus(cudaEventRecord(done, stream), "cudaEventRecord");
      }
      if (queued.ok()) c.order.After(stream_id, done);
    }
  }
  if (!aborted.ok()) return Request::Completed(std::move(aborted));
  if (!queued.ok()) {
    if (done != nullptr) c.watch.PutEvent(done);
    return queued;
  }
  auto request = std::make_shared<DeviceRequest>(
      std::shared_ptr<DeviceWatch>(core_, &c.watch), done, deadline, what, sequence);
  c.watch.Watch(request);
  return Request(std::move(request));
}

template <typename Enqueue>
absl::StatusOr<Request> NcclTransport::LaunchCaptured(cudaStream_t caller, Enqueue&& enqueue) {
  Core& c = *core_;
  std::lock_guard<std::timed_mutex> lock(c.enqueue_mu);
  if (c.aborted.load(std::memory_order_acquire)) return Request::Completed(c.AbortReason());
  RELAY_RETURN_IF_ERROR(enqueue(caller));
  return Request::CompletedOnDevice();
}

absl::StatusOr<Request> NcclTransport::PostBatch(absl::Span<const P2POp> ops,
                                                 void* cuda_stream,
                                                 absl::Time deadline) {
  for (const P2POp& op : ops) {
    if (op.peer < 0 || op.peer >= core_->size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl: peer ", op.peer, " is out of range [0, ", core_->size, ")"));
    }
    RELAY_RETURN_IF_ERROR(CheckMemory(
        op.data, op.kind == P2POp::Kind::kSend ? "send buffer" : "recv buffer"));
  }
  const char* what = ops.size() == 1
                         ? (ops[0].kind == P2POp::Kind::kSend ? "send" : "recv")
                         : "batched send/recv";
  return Launch(cuda_stream, StreamOrder::kAfterStream, deadline, what,
                DeviceRequest::kNoSequence,
                [&](cudaStream_t stream) { return EnqueueBatch(ops, stream); });
}

absl::Status NcclTransport::EnqueueBatch(absl::Span<const P2POp> ops,
                                         cudaStream_t stream) {
  Core& c = *core_;
  ncclComm_t comm = c.p2p_comm;
  RELAY_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart", comm));
  absl::Status s;
  for (const P2POp& op : ops) {
    // An empty message is still a message (a barrier's token): NCCL would
    // skip a 0-byte send, so it moves one byte of the barrier scratch
    // instead.
    void* data = op.data.bytes() > 0 ? op.data.data : c.barrier_scratch;
    const size_t bytes = std::max<size_t>(op.data.bytes(), 1);
    const ncclResult_t r =
        op.kind == P2POp::Kind::kSend
            ? ncclSend(data, bytes, ncclUint8, op.peer, comm, stream)
            : ncclRecv(data, bytes, ncclUint8, op.peer, comm, stream);
    if (s.ok()) {
      s = NcclStatus(r, op.kind == P2POp::Kind::kSend ? "ncclSend" : "ncclRecv",
                     comm);
    }
  }
  // A group is always closed, even after a failed call.
  const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd", comm);
  return s.ok() ? end : s;
}

absl::Status NcclTransport::EnqueueCollective(const CollectiveArgs& args,
                                              cudaStream_t stream) {
  Core& c = *core_;
  const DataType dtype =
      args.send.count > 0 ? args.send.dtype : args.recv.dtype;
  RELAY_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
  ncclRedOp_t op = ncclSum;
  if (IsReduction(args.kind)) {
    RELAY_ASSIGN_OR_RETURN(op, NcclOp(args.op));
  }
  const size_t esize = DataTypeSize(dtype);
  const int n = c.size;
  // all_to_all, gather and scatter are grouped sends and receives on
  // `comm`. all_to_all runs on the point-to-point communicator, whose sends
  // get twice the channels (RELAY_NCCL_P2P_CHANNELS); gather (and so scatter)
  // gained nothing there and stays on the collectives' communicator (docs/design/tuning-history.md).
  auto grouped = [&](ncclComm_t comm, auto&& body) -> absl::Status {
    RELAY_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart", comm));
    absl::Status s = body();
    const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd", comm);
    return s.ok() ? end : s;
  };
  // Keeps the first failure of a sequence of calls inside a group.
  auto first = [](absl::Status* s, absl::Status next) {
    if (s->ok()) *s = std::move(next);
  };
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      return NcclStatus(ncclAllReduce(args.send.data, args.recv.data,
                                      args.recv.count, type, op, c.comm,
                                      stream),
                        "ncclAllReduce", c.comm);
    case CollectiveKind::kBroadcast:
      return NcclStatus(ncclBroadcast(args.send.data, args.recv.data,
                                      args.recv.count, type, args.root, c.comm,
                                      stream),
                        "ncclBroadcast", c.comm);
    case CollectiveKind::kReduce:
      return NcclStatus(ncclReduce(args.send.data, args.recv.data,
                                   args.send.count, type, op, args.root, c.comm,
                                   stream),
                        "ncclReduce", c.comm);
    case CollectiveKind::kAllGather:
      return NcclStatus(ncclAllGather(args.send.data, args.recv.data,
                                      args.send.count, type, c.comm, stream),
                        "ncclAllGather", c.comm);
    case CollectiveKind::kReduceScatter:
      return NcclStatus(ncclReduceScatter(args.send.data, args.recv.data,
                                          args.recv.count, type, op, c.comm,
                                          stream),
                        "ncclReduceScatter", c.comm);
    case CollectiveKind::kAllToAll: {
      const size_t block = args.send.count / n;
      return grouped(c.p2p_comm, [&] {
        absl::Status s;
        for (int j = 0; j < n; ++j) {
          first(&s, NcclStatus(ncclSend(static_cast<const char*>(args.send.data) +
                                            j * block * esize,
                                        block, type, j, c.p2p_comm, stream),
                               "ncclSend", c.p2p_comm));
          first(&s, NcclStatus(ncclRecv(static_cast<char*>(args.recv.data) +
                                            j * block * esize,
                                        block, type, j, c.p2p_comm, stream),
                               "ncclRecv", c.p2p_comm));
        }
        return s;
      });
    }
    case CollectiveKind::kGather: {
      const size_t block = args.send.count;
      return grouped(c.comm, [&] {
        absl::Status s;
        if (c.rank != args.root) {
          return NcclStatus(ncclSend(args.send.data, block, type, args.root,
                                     c.comm, stream),
                            "ncclSend", c.comm);
        }
        for (int j = 0; j < n; ++j) {
          char* slot = static_cast<char*>(args.recv.data) + j * block * esize;
          if (j != c.rank) {
            first(&s, NcclStatus(ncclRecv(slot, block, type, j, c.comm, stream),
                                 "ncclRecv", c.comm));
          } else if (slot != args.send.data && block > 0) {
            first(&s, CudaStatus(cudaMemcpyAsync(slot, args.send.data,
                                                 block * esize,
                                                 cudaMemcpyDeviceToDevice,
                                                 stream),
                                 "cudaMemcpyAsync"));
          }
        }
        return s;
      });
    }
    case CollectiveKind::kScatter: {
      const size_t block = args.recv.count;
      return grouped(c.comm, [&] {
        absl::Status s;
        if (c.rank != args.root) {
          return NcclStatus(ncclRecv(args.recv.data, block, type, args.root,
                                     c.comm, stream),
                            "ncclRecv", c.comm);
        }
        for (int j = 0; j < n; ++j) {
          const char* slot =
              static_cast<const char*>(args.send.data) + j * block * esize;
          if (j != c.rank) {
            first(&s, NcclStatus(ncclSend(slot, block, type, j, c.comm, stream),
                                 "ncclSend", c.comm));
          } else if (slot != args.recv.data && block > 0) {
            first(&s, CudaStatus(cudaMemcpyAsync(args.recv.data, slot,
                                                 block * esize,
                                                 cudaMemcpyDeviceToDevice,
                                                 stream),
                                 "cudaMemcpyAsync"));
          }
        }
        return s;
      });
    }
    case CollectiveKind::kBarrier:
      return NcclStatus(ncclAllReduce(c.barrier_scratch, c.barrier_scratch, 1,
                                      ncclInt32, ncclSum, c.comm, stream),
                        "ncclAllReduce (barrier)", c.comm);
  }
  return absl::InvalidArgumentError("nccl: unknown collective kind");
}

absl::StatusOr<Request> NcclTransport::Collective(const CollectiveArgs& args) {
  // The communicator checked the buffers (CheckMemory) before calling.
  const char* what = CollectiveName(args.kind).data();  // NUL-terminated.
  return Launch(args.stream, args.stream_order, args.deadline, what,
                args.sequence,
                [&](cudaStream_t stream) {
                  return EnqueueCollective(args, stream);
                });
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Split(int color,
                                                                int key) {
  Core& c = *core_;
  device_runtime::ScopedDevice on_device(c.device);
  ncclComm_t comm = nullptr;
  {
    // The parent's communicator is not thread-safe either; an Abort gives
    // up on this lock after kAbortGrace and its ncclCommAbort unblocks a
    // split stuck on a rank that never came.
    std::lock_guard<std::timed_mutex> lock(c.enqueue_mu);
    if (c.aborted.load(std::memory_order_acquire)) return c.AbortReason();
    RELAY_RETURN_IF_ERROR(NcclStatus(
        ncclCommSplit(c.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                      &comm, nullptr),
        "ncclCommSplit", c.comm));
  }
  if (color < 0) return std::unique_ptr<Transport>();
  auto child = std::make_shared<Core>();
  child->device = c.device;
  child->comm = comm;  // Destroyed with the core, whatever fails below.
  RELAY_RETURN_IF_ERROR(
      NcclStatus(ncclCommUserRank(comm, &child->rank), "ncclCommUserRank"));
  RELAY_RETURN_IF_ERROR(
      NcclStatus(ncclCommCount(comm, &child->size), "ncclCommCount"));
  RELAY_RETURN_IF_ERROR(MakeP2pComm(*child));
  RELAY_RETURN_IF_ERROR(PrepareCore(*child));
  return std::unique_ptr<Transport>(new NcclTransport(std::move(child)));
}

int VisibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace

bool NcclTransportFactory::IsViable() const {
  static const bool viable = VisibleDevices() > 0;
  return viable;
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransportFactory::Connect(
    const TransportConfig& config) {
  if (!IsViable()) {
    return absl::FailedPreconditionError(
        "nccl: no CUDA device is visible (cudaGetDeviceCount)");
  }
  auto core = std::make_shared<Core>();
  core->rank = config.rank;
  core->size = config.size;
  RELAY_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&core->device), "cudaGetDevice"));

  ncclUniqueId id;
  if (config.rank == 0) {
    RELAY_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    RELAY_RETURN_IF_ERROR(config.store->Set(
        kUniqueIdKey,
        absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    RELAY_ASSIGN_OR_RETURN(std::string bytes,
                           config.store->Get(kUniqueIdKey, config.timeout));
    if (bytes.size() != sizeof(id)) {
      return absl::InternalError(absl::StrCat(
          "nccl: the unique id in the store has ", bytes.size(),
          " bytes, expected ", sizeof(id), " (a different NCCL version?)"));
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  RELAY_RETURN_IF_ERROR(PrepareCore(*core));
  RELAY_RETURN_IF_ERROR(NcclStatus(
      ncclCommInitRank(&core->comm, config.size, id, config.rank),
      "ncclCommInitRank"));
  RELAY_RETURN_IF_ERROR(MakeP2pComm(*core));
  return std::unique_ptr<Transport>(new NcclTransport(std::move(core)));
}

}  // namespace relay
