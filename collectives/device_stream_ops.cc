#include "collectives/device_stream_ops.h"

#include "absl/strings/str_cat.h"
#include "collectives/device_reduce.h"
#include "collectives/device_reduce_kernels.h"
#include "collectives/device_runtime.h"
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

class CudaStreamOps final : public StreamOps {
 public:
  absl::StatusOr<void*> NewStream() override {
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
    return DeviceReduce(dtype, op, a, b, out, count, stream);
  }
  absl::Status Divide(DataType dtype, void* data, size_t count,
                      double divisor, void* stream) override {
    return DeviceDivide(dtype, data, count, divisor, stream);
  }
  absl::Status WaitRequest(Request& request, void* stream) override {
    return request.StreamWait(stream);
  }
};

}  // namespace

bool DeviceStreamOpsAvailable() { return DeviceReduceAvailable(); }

std::shared_ptr<StreamOps> DeviceStreamOps() {
  static auto* ops = new std::shared_ptr<StreamOps>(
      std::make_shared<CudaStreamOps>());
  return *ops;
}

}  // namespace relay
