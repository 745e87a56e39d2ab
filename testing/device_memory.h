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

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace relay {

// True if this build has CUDA and a GPU is visible.
bool DeviceMemoryAvailable();
// Visible GPUs (0 without CUDA).
int VisibleDeviceCount();
// The calling thread's current CUDA device.
absl::StatusOr<int> CurrentDevice();
// cudaSetDevice for the calling thread.
absl::Status SetCurrentDevice(int device);

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

}  // namespace relay

#endif  // RELAY_TESTING_DEVICE_MEMORY_H_
