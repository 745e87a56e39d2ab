// File: collectives/schedule.h
//
// Schedule: one rank's part of a collective algorithm as plain data: which
// region goes to which peer at which step. Schedules are built by pure
// functions (ring.h, tree.h, ...) from the rank, the group size and the
// counts, tested alone (schedule_test.cc runs every rank's schedule in a
// simulator), and run over any Transport by the executor (executor.h).
//
// Shape. A schedule has lanes; each lane is a list of steps run in order,
// and different lanes run independently (pipelining: a large message is cut
// into segments, one lane each, and the executor keeps a few lanes in flight).
// A step posts all its communication actions at once, waits for all of them,
// then runs its local actions in order. Regions are element offsets into the
// call's send buffer, recv buffer, or a scratch buffer the executor allocates.
//
// Rule for RecvReduce: a step must not send from a region that the same step
// reduces into (the sender's bytes are read while the receiver writes).
//
// Example (rank 0 of 2 exchanging halves and reducing):
//   Step s;
//   s.actions.push_back(Action::Send(1, {BufferId::kRecv, half, half}));
//   s.actions.push_back(Action::RecvReduce(1, {BufferId::kSend, 0, half},
//                                          {BufferId::kRecv, 0, half}));
#ifndef RELAY_COLLECTIVES_SCHEDULE_H_
#define RELAY_COLLECTIVES_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace relay {

enum class BufferId : uint8_t { kSend, kRecv, kScratch };

// `count` elements at element `offset` of one buffer.
struct Region {
  BufferId buffer = BufferId::kRecv;
  size_t offset = 0;
  size_t count = 0;

  friend bool operator==(const Region& a, const Region& b) {
    return a.buffer == b.buffer && a.offset == b.offset && a.count == b.count;
  }
};

struct Action {
  enum class Kind : uint8_t {
    kSend,        // Send `src` to `peer`.
    kRecv,        // Receive from `peer` into `dst`.
    kRecvReduce,  // dst = reduce(src, incoming from `peer`).
    kCopy,        // Local: dst = src.
    kReduce,      // Local: dst = reduce(dst, src).
    kDivide,      // Local: dst /= group size (finishes an average).
  };
  Kind kind = Kind::kCopy;
  int peer = -1;
  Region src;
  Region dst;

  bool is_communication() const {
    return kind == Kind::kSend || kind == Kind::kRecv ||
           kind == Kind::kRecvReduce;
  }

  static Action Send(int peer, Region src) {
    return {Kind::kSend, peer, src, {}};
  }
  static Action Recv(int peer, Region dst) {
    return {Kind::kRecv, peer, {}, dst};
  }
  static Action RecvReduce(int peer, Region local, Region dst) {
    return {Kind::kRecvReduce, peer, local, dst};
  }
  static Action Copy(Region src, Region dst) {
    return {Kind::kCopy, -1, src, dst};
  }
  static Action Reduce(Region src, Region dst) {
    return {Kind::kReduce, -1, src, dst};
  }
  static Action Divide(Region dst) { return {Kind::kDivide, -1, {}, dst}; }
};

struct Step {
  // Most steps hold one to three actions: stored inline, no allocation.
  absl::InlinedVector<Action, 3> actions;
};

struct Lane {
  std::vector<Step> steps;
};

struct Schedule {
  std::vector<Lane> lanes;
  size_t scratch_count = 0;  // Elements of scratch the executor provides.

  // Steps in the longest lane (for cost estimates and tests).
  size_t MaxSteps() const;
  // A readable dump, one action per line (for test failures).
  std::string DebugString() const;
};

// What a schedule builder needs to know about one rank's call.
struct ScheduleParams {
  int rank = 0;
  int size = 1;
  int root = 0;
  // Elements, by the conventions of runtime/collective.h: all_reduce,
  // broadcast, reduce: the whole vector; all_gather, reduce_scatter, gather,
  // scatter: one rank's block; all_to_all: the block for one peer.
  size_t count = 0;
  bool in_place = false;
  bool average = false;  // Divide the reduced result by `size`.
  size_t lanes = 1;      // Pipeline segments, for builders that pipeline.
  // Ring all_reduce: each segment's halves go round the ring in opposite
  // directions, so every step sends to both neighbours (ring.h).
  bool bidirectional = false;

  // Every field: CachedSchedule (engine.h) reuses a schedule only for equal
  // params, so a field added above must be compared here too.
  friend bool operator==(const ScheduleParams& a, const ScheduleParams& b) {
    return a.rank == b.rank && a.size == b.size && a.root == b.root &&
           a.count == b.count && a.in_place == b.in_place &&
           a.average == b.average && a.lanes == b.lanes &&
           a.bidirectional == b.bidirectional;
  }
};

// Splits [0, count) into `parts` contiguous blocks that start at multiples
// of kPartitionAlign elements (the last block also takes the count %
// kPartitionAlign elements left over), balanced to within that: the first
// blocks get one unit more. Aligned starts keep the kernels that work on a
// block on their vector path: on device buffers, the reduction kernel of a
// block starting mid-vector goes element by element, at half the speed
// (docs/design/tuning-history.md). 16 elements: 16 bytes for 1-byte types, a cache line for float32.
// Below parts x 16 elements, blocks but the last may be empty (all of them
// below 16).
inline constexpr size_t kPartitionAlign = 16;

struct BlockPartition {
  size_t count;
  size_t parts;
  size_t offset(size_t i) const {
    if (i >= parts) return count;
    const size_t units = count / kPartitionAlign;
    const size_t base = units / parts, extra = units % parts;
    return (i * base + (i < extra ? i : extra)) * kPartitionAlign;
  }
  size_t size(size_t i) const { return offset(i + 1) - offset(i); }
};

}  // namespace relay

#endif  // RELAY_COLLECTIVES_SCHEDULE_H_
