#include "testing/device_memory.h"

#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

#if RELAY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace relay {

#if RELAY_HAVE_CUDA

namespace {

absl::Status Cuda(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, ": ", cudaGetErrorString(e)));
}

}  // namespace

int VisibleDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool DeviceMemoryAvailable() { return VisibleDeviceCount() > 0; }

absl::StatusOr<int> CurrentDevice() {
  int d = 0;
  if (absl::Status s = Cuda(cudaGetDevice(&d), "cudaGetDevice"); !s.ok()) return s;
  return d;
}

absl::Status SetCurrentDevice(int device) {
  return Cuda(cudaSetDevice(device), "cudaSetDevice");
}

absl::StatusOr<DeviceStream> DeviceStream::Create() {
  cudaStream_t s = nullptr;
  if (absl::Status st = Cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags");
      !st.ok()) {
    return st;
  }
  DeviceStream out;
  out.stream_ = s;
  return out;
}

DeviceStream::~DeviceStream() {
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::StatusOr<DeviceGraph> DeviceGraph::Capture(
    void* stream, const std::function<absl::Status()>& body) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (absl::Status st = Cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                             "cudaStreamBeginCapture");
      !st.ok()) {
    return st;
  }
  absl::Status queued = body();
  cudaGraph_t graph = nullptr;
  absl::Status ended = Cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  DeviceGraph out;
  out.graph_ = graph;
  if (!queued.ok()) return queued;
  if (!ended.ok()) return ended;
  cudaGraphExec_t exec = nullptr;
  if (absl::Status st = Cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
      !st.ok()) {
    return st;
  }
  out.exec_ = exec;
  return out;
}

DeviceGraph::~DeviceGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

absl::Status DeviceGraph::Launch(void* stream) const {
  return Cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                              static_cast<cudaStream_t>(stream)),
              "cudaGraphLaunch");
}

absl::Status SynchronizeStream(void* stream) {
  return Cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
              "cudaStreamSynchronize");
}

// The flag both sides read, freed by whichever lets go of it second (the
// host function may run after the StreamHold is gone, or never).
struct StreamHold::State {
  std::atomic<bool> released{false};
  std::atomic<int> holders{2};
  absl::Time limit;
  void LetGo() {
    if (holders.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

absl::StatusOr<StreamHold> StreamHold::On(void* stream, absl::Duration limit) {
  auto* state = new State;
  state->limit = absl::Now() + limit;
  auto spin = [](void* arg) {
    auto* st = static_cast<State*>(arg);
    while (!st->released.load(std::memory_order_acquire) && absl::Now() < st->limit) {
      std::this_thread::yield();
    }
    st->LetGo();
  };
  if (absl::Status s = Cuda(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), spin, state),
                            "cudaLaunchHostFunc");
      !s.ok()) {
    delete state;
    return s;
  }
  StreamHold hold;
  hold.state_ = state;
  return hold;
}

void StreamHold::Release() {
  if (state_ == nullptr) return;
  state_->released.store(true, std::memory_order_release);
  std::exchange(state_, nullptr)->LetGo();
}

absl::StatusOr<DeviceBytes> DeviceBytes::Allocate(size_t bytes) {
  DeviceBytes d;
  absl::StatusOr<int> device = CurrentDevice();
  if (!device.ok()) return device.status();
  void* p = nullptr;
  if (absl::Status s = Cuda(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc");
      !s.ok()) {
    return s;
  }
  d.data_ = static_cast<char*>(p);
  d.size_ = bytes;
  d.device_ = *device;
  return d;
}

DeviceBytes::~DeviceBytes() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::Status DeviceBytes::CopyFrom(const void* host, size_t bytes,
                                   size_t offset) {
  if (offset + bytes > size_) {
    return absl::OutOfRangeError("DeviceBytes::CopyFrom past the end");
  }
  if (bytes == 0) return absl::OkStatus();
  if (absl::Status s = Cuda(cudaMemcpy(data_ + offset, host, bytes,
                                       cudaMemcpyHostToDevice),
                            "cudaMemcpy (host to device)");
      !s.ok()) {
    return s;
  }
  // From pageable memory cudaMemcpy may return before the DMA lands; work
  // on a non-blocking stream would not wait for it.
  return Cuda(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
}

absl::Status DeviceBytes::CopyTo(void* host, size_t bytes,
                                 size_t offset) const {
  if (offset + bytes > size_) {
    return absl::OutOfRangeError("DeviceBytes::CopyTo past the end");
  }
  if (bytes == 0) return absl::OkStatus();
  return Cuda(cudaMemcpy(host, data_ + offset, bytes, cudaMemcpyDeviceToHost),
              "cudaMemcpy (device to host)");
}

#else  // !RELAY_HAVE_CUDA

namespace {
absl::Status NoCuda() {
  return absl::FailedPreconditionError("built without CUDA");
}
}  // namespace

int VisibleDeviceCount() { return 0; }
bool DeviceMemoryAvailable() { return false; }
absl::StatusOr<int> CurrentDevice() { return NoCuda(); }
absl::Status SetCurrentDevice(int) { return NoCuda(); }
absl::StatusOr<DeviceStream> DeviceStream::Create() { return NoCuda(); }
DeviceStream::~DeviceStream() = default;
absl::StatusOr<DeviceBytes> DeviceBytes::Allocate(size_t) { return NoCuda(); }
absl::StatusOr<DeviceGraph> DeviceGraph::Capture(void*,
                                                 const std::function<absl::Status()>&) {
  return NoCuda();
}
DeviceGraph::~DeviceGraph() = default;
absl::Status DeviceGraph::Launch(void*) const { return NoCuda(); }
absl::Status SynchronizeStream(void*) { return NoCuda(); }
struct StreamHold::State {};
absl::StatusOr<StreamHold> StreamHold::On(void*, absl::Duration) { return NoCuda(); }
void StreamHold::Release() {}
DeviceBytes::~DeviceBytes() = default;
absl::Status DeviceBytes::CopyFrom(const void*, size_t, size_t) { return NoCuda(); }
absl::Status DeviceBytes::CopyTo(void*, size_t, size_t) const { return NoCuda(); }

#endif  // RELAY_HAVE_CUDA

int GpuOfLocalRank(int local_rank) {
  const int visible = VisibleDeviceCount();
  return visible > 0 ? local_rank % visible : local_rank;
}

absl::StatusOr<int> UseGpuOfLocalRank(int local_rank) {
  if (VisibleDeviceCount() == 0) return absl::FailedPreconditionError("no GPU is visible");
  const int gpu = GpuOfLocalRank(local_rank);
  if (absl::Status s = SetCurrentDevice(gpu); !s.ok()) return s;
  return gpu;
}

DeviceBytes::DeviceBytes(DeviceBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceBytes& DeviceBytes::operator=(DeviceBytes&& other) noexcept {
  if (this != &other) {
    DeviceBytes doomed(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

absl::StatusOr<DeviceMirror> DeviceMirror::Of(absl::Span<const char> send,
                                              absl::Span<const char> recv) {
  DeviceMirror m;
  absl::StatusOr<int> device = CurrentDevice();
  if (!device.ok()) return device.status();
  m.device_ = *device;
  m.send_host_ = send.data();
  m.send_size_ = send.size();
  m.recv_host_ = recv.data();
  for (auto [image, copy] : {std::pair{send, &m.send_}, std::pair{recv, &m.recv_}}) {
    absl::StatusOr<DeviceBytes> bytes = DeviceBytes::Allocate(image.size());
    if (!bytes.ok()) return bytes.status();
    *copy = *std::move(bytes);
    if (absl::Status s = copy->CopyFrom(image.data(), image.size()); !s.ok()) {
      return s;
    }
  }
  return m;
}

void* DeviceMirror::MapPointer(const void* host) const {
  const char* p = static_cast<const char*>(host);
  if (p == nullptr) return nullptr;
  if (p >= send_host_ && p <= send_host_ + send_size_) {
    return send_.data() + (p - send_host_);
  }
  return recv_.data() + (p - recv_host_);
}

ConstBuffer DeviceMirror::Map(const ConstBuffer& host) const {
  return {MapPointer(host.data), host.count, host.dtype, Device::Cuda(device_)};
}

Buffer DeviceMirror::Map(const Buffer& host) const {
  return {MapPointer(host.data), host.count, host.dtype, Device::Cuda(device_)};
}

absl::Status DeviceMirror::CopyBack(absl::Span<char> send,
                                    absl::Span<char> recv) const {
  if (absl::Status s = send_.CopyTo(send.data(), send.size()); !s.ok()) return s;
  return recv_.CopyTo(recv.data(), recv.size());
}

absl::Status DeviceMirror::CopyIn(absl::Span<const char> send, absl::Span<const char> recv) {
  if (send.size() != send_.size() || recv.size() != recv_.size()) {
    return absl::InvalidArgumentError("DeviceMirror::CopyIn: images of other sizes");
  }
  if (absl::Status s = send_.CopyFrom(send.data(), send.size()); !s.ok()) return s;
  return recv_.CopyFrom(recv.data(), recv.size());
}

}  // namespace relay
