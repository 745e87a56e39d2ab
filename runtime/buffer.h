// File: runtime/buffer.h
//
// Device (host memory, or CUDA device N) and the buffer views every operation
// takes: a pointer, an element count, a DataType and the Device the memory lives
// on. Views do not own memory; the caller keeps it alive and untouched until the
// operation's Request completes.
//
// Example:
//   std::vector<float> grads(1024);
//   Buffer out = Buffer::Of(grads);          // float32, host
//   ConstBuffer in = ConstBuffer::Of(grads); // same memory: an in-place call
#ifndef RELAY_RUNTIME_BUFFER_H_
#define RELAY_RUNTIME_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/data_type.h"

namespace relay {

// Aligned to 8 so that ConstBuffer and Buffer end at the end of a Device,
// with no tail padding: 32 bytes that a copy moves as two aligned 16-byte
// halves. With the Device at byte 20, GCC copied a view's 28 bytes as two
// overlapping 16-byte loads; a load that spans two recent stores cannot be
// forwarded from them and waits for both to reach the cache, which measured
// as the hottest instructions of a small blocking collective's call path.
struct alignas(8) Device {
  enum class Kind : uint8_t { kHost, kCuda };
  Kind kind = Kind::kHost;
  int index = 0;  // CUDA ordinal; 0 for host.

  static Device Host() { return Device{}; }
  static Device Cuda(int ordinal) { return Device{Kind::kCuda, ordinal}; }
  bool is_host() const { return kind == Kind::kHost; }
  std::string ToString() const;
  friend bool operator==(const Device& a, const Device& b) {
    return a.kind == b.kind && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// A read-only view of `count` elements of `dtype` at `data`.
struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  Device device;

  size_t bytes() const { return count * DataTypeSize(dtype); }
  // The sub-view of `n` elements starting at element `offset`.
  ConstBuffer Slice(size_t offset, size_t n) const {
    return {static_cast<const char*>(data) + offset * DataTypeSize(dtype), n,
            dtype, device};
  }

  template <typename T>
  static ConstBuffer Of(const T* data, size_t count,
                        Device device = Device::Host()) {
    return {data, count, DataTypeOf<T>::value, device};
  }
  template <typename T>
  static ConstBuffer Of(const std::vector<T>& v) {
    return Of(v.data(), v.size());
  }
};

// A writable view of `count` elements of `dtype` at `data`.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  Device device;

  size_t bytes() const { return count * DataTypeSize(dtype); }
  Buffer Slice(size_t offset, size_t n) const {
    return {static_cast<char*>(data) + offset * DataTypeSize(dtype), n, dtype,
            device};
  }
  operator ConstBuffer() const { return {data, count, dtype, device}; }

  template <typename T>
  static Buffer Of(T* data, size_t count, Device device = Device::Host()) {
    return {data, count, DataTypeOf<T>::value, device};
  }
  template <typename T>
  static Buffer Of(std::vector<T>& v) {
    return Of(v.data(), v.size());
  }
};

// See Device: no tail padding in the views (on 64-bit targets).
static_assert(sizeof(void*) != 8 || sizeof(ConstBuffer) == 32);
static_assert(sizeof(void*) != 8 || sizeof(Buffer) == 32);

}  // namespace relay

#endif  // RELAY_RUNTIME_BUFFER_H_
