#include "collectives/device_stream_ops.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_reduce_kernels.h"
#include "runtime/device_runtime.h"
#include "runtime/config.h"
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
// it; too few slow the reduction the ring's steps wait for. 32 measured
// best on 2 GPUs (docs/design/tuning-history.md).
constexpr int kDefaultReduceBlocks = 32;

absl::StatusOr<int> ReduceBlocksFromEnvironment() {
  RELAY_ASSIGN_OR_RETURN(
      const uint64_t blocks,
      ReadCount("RELAY_STREAM_REDUCE_BLOCKS", kDefaultReduceBlocks));
  return static_cast<int>(blocks);
}

// Lane streams and events kept between runs, per device. A run of relay's
// own algorithm on device buffers used to create and destroy its lane
// streams and its fork, join and end events every call (window streams and
// 2 x window + 2 events). Events are reused at once: a wait captures the
// record it was given, so an event may be recorded again as soon as its
// waits are queued (StreamOps' contract lets DeleteEvent come while it is
// pending). A stream is reused only once the work queued on it has
// finished (an event recorded when it was given back says so), so a run
// never queues behind another run's work: two communicators' runs sharing
// a stream could otherwise wait on each other in an order their peers do
// not share. Each list keeps at most kPoolMost entries; more are destroyed.
class DevicePools {
 public:
  absl::StatusOr<void*> TakeStream() {
    RELAY_ASSIGN_OR_RETURN(const int device, Current());
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<IdleStream>& idle = streams_[device];
      for (size_t i = 0; i < idle.size(); ++i) {
        if (rt::QueryEvent(idle[i].drained) == rt::kNotReady) continue;
        const IdleStream found = idle[i];
        idle.erase(idle.begin() + static_cast<std::ptrdiff_t>(i));
        out_[found.stream] = {found.drained, device};
        return found.stream;
      }
    }
    void* s = nullptr;
    RELAY_RETURN_IF_ERROR(
        Checked(rt::CreateNonBlockingStream(&s), "cudaStreamCreate"));
    void* drained = nullptr;
    if (const int e = rt::CreateEvent(&drained); e != 0) {
      rt::DestroyStream(s);
      return Checked(e, "cudaEventCreate");
    }
    std::lock_guard<std::mutex> lock(mu_);
    out_[s] = {drained, device};
    return s;
  }

  // `stream` goes back to the list of the device it was taken for (not
  // the caller's current one, which may differ).
  void GiveStream(void* stream) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = out_.find(stream);
    if (it == out_.end()) {  // Not one of ours.
      rt::DestroyStream(stream);
      return;
    }
    const Out taken = it->second;
    out_.erase(it);
    void* drained = taken.drained;
    std::vector<IdleStream>* idle = &streams_[taken.device];
    if (idle->size() >= kPoolMost || rt::RecordEvent(drained, stream) != 0) {
      rt::DestroyEvent(drained);
      rt::DestroyStream(stream);
      return;
    }
    idle->push_back({stream, drained});
  }

  absl::StatusOr<void*> TakeEvent() {
    RELAY_ASSIGN_OR_RETURN(const int device, Current());
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void*>& idle = events_[device];
      if (!idle.empty()) {
        void* e = idle.back();
        idle.pop_back();
        event_device_[e] = device;
        return e;
      }
    }
    void* e = nullptr;
    RELAY_RETURN_IF_ERROR(Checked(rt::CreateEvent(&e), "cudaEventCreate"));
    std::lock_guard<std::mutex> lock(mu_);
    event_device_[e] = device;
    return e;
  }

  // Like streams, to the list of the device it was taken for: a run's end
  // event is given back by whichever thread drops the run last.
  void GiveEvent(void* event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = event_device_.find(event);
      if (it != event_device_.end()) {
        std::vector<void*>& idle = events_[it->second];
        event_device_.erase(it);
        if (idle.size() < kPoolMost) {
          idle.push_back(event);
          return;
        }
      }
    }
    rt::DestroyEvent(event);
  }

 private:
  static constexpr size_t kPoolMost = 64;
  struct IdleStream {
    void* stream;
    void* drained;  // Recorded when the stream was given back.
  };
  struct Out {  // A stream taken by a run.
    void* drained;
    int device;
  };
  static absl::StatusOr<int> Current() {
    int device = 0;
    RELAY_RETURN_IF_ERROR(Checked(rt::CurrentDevice(&device), "cudaGetDevice"));
    return device;
  }

  std::mutex mu_;
  std::map<int, std::vector<IdleStream>> streams_;  // Guarded by mu_.
  std::map<int, std::vector<void*>> events_;        // Guarded by mu_.
  std::map<void*, Out> out_;                        // Guarded by mu_.
  std::map<void*, int> event_device_;  // Events out; guarded by mu_.
};

class CudaStreamOps final : public StreamOps {
 public:
  absl::StatusOr<void*> NewStream() override {
    // Before the run queues anything: its kernels are loaded now, not in
    // the middle of it, where loading would wait for a stream held for a
    // peer (device_reduce_kernels.h, LoadAll).
    RELAY_RETURN_IF_ERROR(Checked(device_kernels::LoadAll(), "loading kernels"));
    return pools_.TakeStream();
  }
  void DeleteStream(void* stream) override { pools_.GiveStream(stream); }

  absl::StatusOr<void*> NewEvent() override { return pools_.TakeEvent(); }
  void DeleteEvent(void* event) override { pools_.GiveEvent(event); }
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
  DevicePools pools_;
};

}  // namespace

bool DeviceStreamOpsAvailable() { return DeviceReduceAvailable(); }

bool StreamIsCapturing(void* stream) {
  bool capturing = false;
  rt::StreamIsCapturing(stream, &capturing);
  return capturing;
}

absl::Status LoadDeviceKernels() {
  return Checked(device_kernels::LoadAll(), "loading the device reduction kernels");
}

std::shared_ptr<StreamOps> DeviceStreamOps() {
  static auto* ops = new std::shared_ptr<StreamOps>(
      std::make_shared<CudaStreamOps>());
  return *ops;
}

}  // namespace relay
