#include "collectives/device_stream_ops.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_reduce_kernels.h"
#include "runtime/device_runtime.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

namespace rt = device_runtime;

absl::Status Checked(int error, absl::string_view what) {
  if (error == 0) return absl::OkStatus();
  if (!device_kernels::Compiled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", device_kernels::ErrorString(error)));
  }
  return absl::InternalError(absl::StrCat(what, ": CUDA error ", error, ": ",
                                          device_kernels::ErrorString(error)));
}

// RELAY_STREAM_REDUCE_BLOCKS: the most blocks a reduction of relay's own
// algorithms on device buffers launches (0: as many as fill the GPU).
// A full grid keeps every multiprocessor until it ends, so the transport's
// kernel of the next step, queued on another stream, cannot start beside
// it. Capped at 16, relay's ring over NCCL gained at every size on 2 and 4
// H100s in three leases against a full grid, 4-6 points from 256 MB
// (bench/results/2026-11-26-nccl-p2p-channels-h100). But the reduction is
// what the ring's steps wait for (beside the transfers it took 10-14% off
// a step's rate, bench/results/2026-11-26-nccl-ring-edges-h100), and with
// 32 blocks the ring on 2 H100s reached 0.92-0.93 / 0.98 / 1.00-1.01 of
// native at 256 MB / 512 MB / 1 GB against 16's 0.90 / 0.93-0.94 /
// 0.95-0.96, in two leases; 24 and 48 were close behind, 8 and 64 worse
// (bench/results/2026-11-26-nccl-reduce-blocks-h100). Not yet measured on 4
// GPUs or over loopback's device messages.
constexpr int kDefaultReduceBlocks = 32;

absl::StatusOr<int> ReduceBlocksFromEnvironment() {
  const char* value = std::getenv("RELAY_STREAM_REDUCE_BLOCKS");
  if (value == nullptr || *value == '\0') return kDefaultReduceBlocks;
  int blocks = 0;
  if (!absl::SimpleAtoi(value, &blocks) || blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELAY_STREAM_REDUCE_BLOCKS='", value,
        "' is not a non-negative integer"));
  }
  return blocks;
}

class CudaStreamOps final : public StreamOps {
 public:
  absl::StatusOr<void*> NewStream() override {
    // Before the run queues anything: its kernels are loaded now, not in
    // the middle of it, where loading would wait for a stream held for a
    // peer (device_reduce_kernels.h, LoadAll).
    RELAY_RETURN_IF_ERROR(Checked(device_kernels::LoadAll(), "loading kernels"));
    void* s = nullptr;
    RELAY_RETURN_IF_ERROR(
        Checked(rt::CreateNonBlockingStream(&s), "cudaStreamCreate"));
    return s;
  }
  void DeleteStream(void* stream) override { rt::DestroyStream(stream); }

  absl::StatusOr<void*> NewEvent() override {
    void* e = nullptr;
    RELAY_RETURN_IF_ERROR(Checked(rt::CreateEvent(&e), "cudaEventCreate"));
    return e;
  }
  void DeleteEvent(void* event) override { rt::DestroyEvent(event); }
  absl::Status Record(void* event, void* stream) override {
    return Checked(rt::RecordEvent(event, stream), "cudaEventRecord");
  }
  absl::Status StreamWaitEvent(void* stream, void* event) override {
    return Checked(rt::StreamWaitEvent(stream, event), "cudaStreamWaitEvent");
  }
  bool EventDone(void* event) override {
    // An error (a failed kernel) also ends the wait; the transport's own
    // requests carry the failure.
    return rt::QueryEvent(event) != rt::kNotReady;
  }
  absl::Status Synchronize(void* event) override {
    return Checked(rt::SynchronizeEvent(event), "cudaEventSynchronize");
  }

  absl::StatusOr<void*> Allocate(size_t bytes, void* stream) override {
    void* p = nullptr;
    RELAY_RETURN_IF_ERROR(
        Checked(rt::AllocateAsync(&p, bytes, stream),
                absl::StrCat("cudaMallocAsync(", bytes, " bytes)")));
    return p;
  }
  absl::Status Free(void* memory, void* stream) override {
    return Checked(rt::FreeAsync(memory, stream), "cudaFreeAsync");
  }
  absl::Status Copy(void* dst, const void* src, size_t bytes,
                    void* stream) override {
    return Checked(rt::CopyAsync(dst, src, bytes, stream), "cudaMemcpyAsync");
  }
  absl::Status Reduce(DataType dtype, ReduceOp op, const void* a,
                      const void* b, void* out, size_t count,
                      void* stream) override {
    if (!reduce_blocks_.ok()) return reduce_blocks_.status();
    return DeviceReduce(dtype, op, a, b, out, count, stream, *reduce_blocks_);
  }
  absl::Status Divide(DataType dtype, void* data, size_t count,
                      double divisor, void* stream) override {
    return DeviceDivide(dtype, data, count, divisor, stream);
  }
  absl::Status WaitRequest(Request& request, void* stream) override {
    return request.StreamWait(stream);
  }

 private:
  const absl::StatusOr<int> reduce_blocks_ = ReduceBlocksFromEnvironment();
};

}  // namespace

bool DeviceStreamOpsAvailable() { return DeviceReduceAvailable(); }

std::shared_ptr<StreamOps> DeviceStreamOps() {
  static auto* ops = new std::shared_ptr<StreamOps>(
      std::make_shared<CudaStreamOps>());
  return *ops;
}

}  // namespace relay
