// File: testing/device_memory.h
//
// CUDA memory for tests and test drivers, without making them CUDA code:
// DeviceBytes (an owned device allocation) and the current-device helpers.
// In a build without CUDA, DeviceMemoryAvailable() is false and every call
// returns FailedPrecondition, so callers compile and skip.
//
// Lifetime and ownership. DeviceBytes owns its allocation and frees it on
// destruction (on the device it was allocated on).
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(host.size()));
//   RELAY_RETURN_IF_ERROR(d.CopyFrom(host.data(), host.size()));
#ifndef RELAY_TESTING_DEVICE_MEMORY_H_
#define RELAY_TESTING_DEVICE_MEMORY_H_

#include <cstddef>
#include <utility>

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/buffer.h"

namespace relay {

// True if this build has CUDA and a GPU is visible.
bool DeviceMemoryAvailable();
// Visible GPUs (0 without CUDA).
int VisibleDeviceCount();
// The calling thread's current CUDA device.
absl::StatusOr<int> CurrentDevice();
// cudaSetDevice for the calling thread.
absl::Status SetCurrentDevice(int device);
// The GPU of a host's `local_rank` (a process under a launcher, or a rank
// as a thread): one GPU per local rank, round robin where fewer are
// visible (ranks then share one: processes under cuda_ipc's
// RELAY_CUDA_IPC_SHARED_GPU=1; never NCCL). `local_rank` itself where none
// is visible.
int GpuOfLocalRank(int local_rank);
// Makes GpuOfLocalRank(local_rank) current on the calling thread and
// returns it; FailedPrecondition if no GPU is visible.
absl::StatusOr<int> UseGpuOfLocalRank(int local_rank);

// A CUDA stream of the current device (cudaStreamNonBlocking), destroyed
// with the object; get() is its cudaStream_t as void*.
class DeviceStream {
 public:
  static absl::StatusOr<DeviceStream> Create();
  DeviceStream() = default;
  DeviceStream(DeviceStream&& other) noexcept : stream_(other.stream_) {
    other.stream_ = nullptr;
  }
  DeviceStream& operator=(DeviceStream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  ~DeviceStream();
  void* get() const { return stream_; }

 private:
  void* stream_ = nullptr;
};

// A CUDA graph captured from what `body` queues on `stream` (calls made
// with StreamOrder::kOnStream on that stream), replayed by Launch.
//   RELAY_ASSIGN_OR_RETURN(DeviceGraph g, DeviceGraph::Capture(s, [&] {
//     return comm.AllReduce(in, out, ReduceOp::kSum, on_s).status(); }));
//   RELAY_RETURN_IF_ERROR(g.Launch(s));
class DeviceGraph {
 public:
  static absl::StatusOr<DeviceGraph> Capture(
      void* stream, const std::function<absl::Status()>& body);
  DeviceGraph() = default;
  DeviceGraph(DeviceGraph&& other) noexcept
      : graph_(other.graph_), exec_(other.exec_) {
    other.graph_ = other.exec_ = nullptr;
  }
  DeviceGraph& operator=(DeviceGraph&& other) noexcept {
    std::swap(graph_, other.graph_);
    std::swap(exec_, other.exec_);
    return *this;
  }
  ~DeviceGraph();
  absl::Status Launch(void* stream) const;

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

// Blocks until the work queued on `stream` has finished.
absl::Status SynchronizeStream(void* stream);

// Holds a stream: a host function queued on it spins until Release (or
// destruction, or `limit` after the hold, so that a caller who blocks on
// the held stream fails instead of hanging). Work queued behind it waits,
// and runs back to back once released: what a loop costs the GPU alone.
//   RELAY_ASSIGN_OR_RETURN(StreamHold hold, StreamHold::On(stream));
//   ... queue calls on `stream` ...
//   hold.Release();
class StreamHold {
 public:
  static absl::StatusOr<StreamHold> On(void* stream, absl::Duration limit = absl::Seconds(10));
  StreamHold() = default;
  StreamHold(StreamHold&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}
  StreamHold& operator=(StreamHold&& other) noexcept {
    std::swap(state_, other.state_);
    return *this;
  }
  ~StreamHold() { Release(); }
  void Release();

 private:
  struct State;
  State* state_ = nullptr;  // Shared with the host function: see Release.
};

class DeviceBytes {
 public:
  // `bytes` on the current device (at least one byte is allocated).
  static absl::StatusOr<DeviceBytes> Allocate(size_t bytes);

  DeviceBytes() = default;
  DeviceBytes(DeviceBytes&& other) noexcept;
  DeviceBytes& operator=(DeviceBytes&& other) noexcept;
  ~DeviceBytes();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }
  // Synchronous copies of `bytes` from/to host memory at byte `offset`.
  absl::Status CopyFrom(const void* host, size_t bytes, size_t offset = 0);
  absl::Status CopyTo(void* host, size_t bytes, size_t offset = 0) const;

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  int device_ = -1;
};

// Device copies of a call's two host images (send and recv), for transports
// that move device memory only: a host pointer into either image maps to the
// same offset of its copy, so aliasing (in place) is kept.
//
//   RELAY_ASSIGN_OR_RETURN(DeviceMirror m, DeviceMirror::Of(send_mem, recv_mem));
//   ConstBuffer send = m.Map(host_send);   // same count and dtype, on the GPU
//   ... run, wait ...
//   RELAY_RETURN_IF_ERROR(m.CopyBack(send_mem, recv_mem));
class DeviceMirror {
 public:
  static absl::StatusOr<DeviceMirror> Of(absl::Span<const char> send,
                                         absl::Span<const char> recv);
  // `host` (a view into one of the images) as a view of the device copy.
  ConstBuffer Map(const ConstBuffer& host) const;
  Buffer Map(const Buffer& host) const;
  // Both device copies back into the host images (same sizes as given).
  absl::Status CopyBack(absl::Span<char> send, absl::Span<char> recv) const;
  // Host images of the sizes given to Of into the same device copies (so
  // that work captured on them, a CUDA graph, sees new data).
  absl::Status CopyIn(absl::Span<const char> send, absl::Span<const char> recv);

 private:
  void* MapPointer(const void* host) const;

  const char* send_host_ = nullptr;
  size_t send_size_ = 0;
  const char* recv_host_ = nullptr;
  DeviceBytes send_, recv_;
  int device_ = 0;
};

}  // namespace relay

#endif  // RELAY_TESTING_DEVICE_MEMORY_H_
