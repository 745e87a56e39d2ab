// File: embed/torch/process_group_relay.h
//
// torch.distributed's backend over a relay communicator: the "relay"
// backend (relay_torch/__init__.py registers it). Against torch 1.x it is a
// c10d::ProcessGroup, against torch 2.x a c10d::Backend (what 2.x's
// register_backend expects; the methods are the same). One process per rank, one
// tensor per call (as with one GPU per process); tensors must be dense and
// contiguous, host tensors on the ucx transport and CUDA tensors on
// cuda_ipc (one host) or nccl, or every tensor on RELAY_TRANSPORT. Each call validates its tensors and
// starts a relay collective; bad input raises at the call (RuntimeError in
// Python) with nothing sent. The returned Work maps onto the relay request:
// wait() blocks until it completes (or the group's timeout), and raises its
// error; getFuture() (what DistributedDataParallel's reducer uses)
// completes with the output tensors once the operation is done.
//
// CUDA tensors (builds with RELAY_TORCH_CUDA, against a CUDA torch) follow
// ProcessGroupNCCL's stream semantics: each operation is ordered after the
// work queued on the caller's current stream (passed to relay as the
// operation's stream), and wait() makes the current stream wait for it on
// the GPU without blocking the host (barrier's wait blocks the host).
//
// Lists of tensors (all_gather's outputs, scatter's inputs, ...) go through
// one contiguous staging tensor, as relay's collectives take one buffer:
// host tensors are copied out when the operation completes, CUDA tensors on
// the caller's stream right after it is queued (ordered by StreamWait).
// all_to_all with uneven splits and the list form of all_to_all run as one
// batch of send/recv. Not offered: recv from any source, monitored barrier,
// the bitwise and premul-sum reductions.
#ifndef RELAY_EMBED_TORCH_PROCESS_GROUP_RELAY_H_
#define RELAY_EMBED_TORCH_PROCESS_GROUP_RELAY_H_

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "relay.h"

namespace relay_torch {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

class ProcessGroupRelay final : public BackendBase {
 public:
  // Builds the relay communicator through `store` (blocks until every rank
  // has joined). The transport is RELAY_TRANSPORT for every tensor; unset,
  // ucx for host tensors (where the build has UCX) and, in a CUDA build
  // with a GPU visible, a second communicator for CUDA tensors on the
  // device current now: cuda_ipc when every rank is on this host and their
  // GPUs reach each other, else nccl. `timeout` bounds every operation.
  ProcessGroupRelay(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                    int size, std::chrono::milliseconds timeout);
  // Destroys the communicator with the GIL released (see the .cc).
  ~ProcessGroupRelay() override;

  const std::string getBackendName() const override { return "relay"; }
  // The relay transport underneath host tensors ("ucx", ...; the device
  // one where there is no other), and CUDA tensors' ("cuda_ipc", "nccl";
  // the one transport where RELAY_TRANSPORT names it).
  std::string transport() const;
  std::string device_transport() const;
  // This rank's collective counters and latency histograms in the
  // Prometheus text format (relay::Communicator::MetricsText), for a
  // training script to export with the rest of its metrics.
  std::string metrics_text() const;
  // Symmetric windows (relay::Communicator::RegisterWindow), collective:
  // every rank registers a dense contiguous tensor of the same bytes on its
  // GPU (from torch's caching allocator or anywhere). all_gather and
  // all_reduce of 32 MiB or more whose output lies in a window, at the same
  // offset on every rank, then store straight into the peers' outputs.
  // Raises where CUDA tensors' transport has no windows (all but
  // cuda_ipc). deregister_window (collective too) removes the window that
  // starts at the tensor's data; keep the memory alive until then.
  // Blocking; call them with the GIL released.
  void register_window(const at::Tensor& tensor);
  void deregister_window(const at::Tensor& tensor);

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

 private:
  // What a call hands to Launch: `start` posts the relay operation;
  // `finish` (may be empty) copies out of staging: for host tensors it runs
  // after the operation succeeded and before the Work completes, for CUDA
  // tensors at once, queued on the caller's stream after StreamWait;
  // `keep_alive` holds every tensor the operation touches until it ends
  // (CUDA ones, if any, make the Work stream-ordered).
  struct Launch {
    c10d::OpType type;
    std::function<absl::StatusOr<relay::Request>()> start;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keep_alive;
    std::function<void()> finish;
  };
  c10::intrusive_ptr<c10d::Work> Start(Launch launch);
  // The operation's options: `timeout` (0: the group's), and for a CUDA
  // tensor the caller's current stream on its device.
  relay::CollectiveOptions OptionsFor(std::chrono::milliseconds timeout,
                                      const at::Tensor* like = nullptr) const;
  // One batch of send/recv: `send[i]` goes to rank i, `recv[i]` comes from
  // rank i (this rank's pair is copied locally).
  c10::intrusive_ptr<c10d::Work> Exchange(c10d::OpType type,
                                          std::vector<at::Tensor> send,
                                          std::vector<at::Tensor> recv,
                                          std::vector<at::Tensor> keep_alive,
                                          std::chrono::milliseconds timeout);

  // The communicator for an operation on `like` (null: no tensor).
  relay::Communicator* CommFor(const at::Tensor* like) const;

  // Host tensors' (or, with RELAY_TRANSPORT set, every tensor's); null in a
  // build without UCX when RELAY_TRANSPORT is unset.
  std::unique_ptr<relay::Communicator> comm_;
  // CUDA tensors' when RELAY_TRANSPORT is unset: cuda_ipc on one host,
  // else nccl. Null otherwise.
  std::unique_ptr<relay::Communicator> device_comm_;
};

// Python's entry point: torch calls it as creator(store, rank, size,
// timeout).
c10::intrusive_ptr<BackendBase> CreateProcessGroupRelay(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout);

}  // namespace relay_torch

#endif  // RELAY_EMBED_TORCH_PROCESS_GROUP_RELAY_H_
