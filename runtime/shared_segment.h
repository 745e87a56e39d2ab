// File: runtime/shared_segment.h
//
// SharedSegment: a block of memory mapped by every rank of a group of
// processes on one host (a POSIX shared-memory object), set up through the
// group's store. Transports whose ranks are processes put a SlotExchange
// (runtime/slot_exchange.h) in one.
//
// Setup. Rank 0 creates the object under a fresh random name (mode 0600),
// reserves its memory (a full /dev/shm fails here, not with a SIGBUS on
// first touch), and publishes the name; every rank maps it and says
// whether it could; once all have, rank 0 unlinks the name, so nothing is
// left in /dev/shm whatever happens to the processes later, and the memory
// goes when the last rank unmaps it. Every rank gets the same answer: the
// segment, or FailedPrecondition naming what failed on which rank (no
// /dev/shm, a size limit, ranks on different hosts that were told
// otherwise), in which case no rank uses one.
//
// Example:
//   absl::StatusOr<std::unique_ptr<SharedSegment>> seg =
//       SharedSegment::Create(*store, "shm", rank, size, bytes, timeout);
//   if (seg.ok()) UseSharedMemory((*seg)->data());
#ifndef RELAY_RUNTIME_SHARED_SEGMENT_H_
#define RELAY_RUNTIME_SHARED_SEGMENT_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/store.h"

namespace relay {

class SharedSegment {
 public:
  // Every rank of the group calls it with the same `key` (a store prefix
  // for this segment), `size` and `bytes`. The memory starts zeroed and
  // page-aligned.
  static absl::StatusOr<std::unique_ptr<SharedSegment>> Create(
      Store& store, absl::string_view key, int rank, int size, size_t bytes,
      absl::Duration timeout);

  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  SharedSegment(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

  void* const data_;
  const size_t bytes_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_SHARED_SEGMENT_H_
