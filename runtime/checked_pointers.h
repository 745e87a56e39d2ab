// File: runtime/checked_pointers.h
//
// CheckedPointers: the device transports' memory of addresses their
// CheckMemory already found to be memory of the rank's GPU.
#ifndef RELAY_RUNTIME_CHECKED_POINTERS_H_
#define RELAY_RUNTIME_CHECKED_POINTERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

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

}  // namespace relay

#endif  // RELAY_RUNTIME_CHECKED_POINTERS_H_
