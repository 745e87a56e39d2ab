// File: runtime/device_buffer_check.h
//
// The device transports' CheckMemory (NCCL, cuda_ipc): is a buffer declared
// on a GPU really memory of the rank's GPU? CheckDeviceBuffer asks CUDA
// (through device_runtime.h) once per address and remembers the answer in
// a CheckedPointers set.
#ifndef RELAY_RUNTIME_DEVICE_BUFFER_CHECK_H_
#define RELAY_RUNTIME_DEVICE_BUFFER_CHECK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/buffer.h"

namespace relay {

// Addresses CheckMemory found to be memory of this rank's GPU, so a buffer
// used again (a training loop's gradients, the stream executor's scratch
// from its pool) is not asked about again: cudaPointerGetAttributes costs
// microseconds a call (docs/design/tuning-history.md). The cost: an address freed and then reused for
// another GPU's or pinned host memory passes unchecked, as it would in bare
// NCCL. Direct-mapped, lock-free: an entry is 0 or an address that was
// checked.
class CheckedPointers {
 public:
  bool Contains(const void* p) const {
    return slots_[Slot(p)].load(std::memory_order_relaxed) == Key(p);
  }
  void Add(const void* p) {
    slots_[Slot(p)].store(Key(p), std::memory_order_relaxed);
  }

 private:
  static constexpr size_t kSlots = 256;
  static uintptr_t Key(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  // Device buffers are at least 256-byte aligned; mix in the higher bits.
  static size_t Slot(const void* p) {
    const uintptr_t k = Key(p);
    return ((k >> 8) ^ (k >> 20) ^ (k >> 32)) % kSlots;
  }
  std::atomic<uintptr_t> slots_[kSlots] = {};
};

// OK if `b` is empty, or declared on cuda:`device` and is memory of that
// GPU (device or managed memory). Otherwise InvalidArgument naming
// `transport` and `what` ("send buffer"): declared on another device, host
// memory or an address CUDA does not know, or memory of another GPU.
// Addresses that pass go into `checked` and are not asked about again.
absl::Status CheckDeviceBuffer(const ConstBuffer& b, int device,
                               absl::string_view transport,
                               absl::string_view what,
                               CheckedPointers& checked);

}  // namespace relay

#endif  // RELAY_RUNTIME_DEVICE_BUFFER_CHECK_H_
