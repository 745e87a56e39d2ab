// File: transports/cuda_ipc/ipc_kernels.h
//
// The cuda_ipc transport's kernels, behind a plain C++ interface (no CUDA
// or Abseil headers) so the host code and a build without CUDA compile the
// same way. Every rank's arena (ArenaLayout) is mapped into every peer; a
// kernel copies this rank's contribution into its own arena, raises its
// flag in each peer's arena, waits for theirs, and reads theirs.
//
// Data moves by stores into the peers' arenas (NVLink carries posted writes
// at full rate, where loads from a peer wait a round trip each) and is read
// locally: each arena half holds a slot per rank for its contribution and
// a slot per rank for its reduced slice (ArenaLayout::SlotBytes).
//
// Synchronisation lives in device memory only, so a launch needs no host in
// its path and a CUDA graph can replay it: the arena holds the rank's call
// counter (the epoch), which the last block of each call to finish
// advances, and the epoch's parity picks the arena half the call uses. A
// rank starts call k+2 in a half only after it saw every peer arrive at
// call k+1, by which time they have finished call k there, whatever grid
// either call had.
//
// Small all_reduces take the low-latency path: every 4 bytes of data
// travel with the epoch beside them in one 8-byte store, so a receiver
// polls the data itself and no flag, fence or barrier is needed.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_
#define RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace relay {
namespace cuda_ipc {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 128;
inline constexpr int kThreads = 512;
// Barrier phases: two within an all_reduce, one for the teardown barrier.
inline constexpr int kPhases = 3;
inline constexpr int kTeardownPhase = 2;

// One rank's arena: flags its peers raise, this rank's own per-block call
// counters, then the two data halves.
struct ArenaLayout {
  static constexpr size_t kFlagWords = size_t{kPhases} * kMaxBlocks * kMaxRanks;
  // [0] calls, [1] blocks of the current call that finished; [2], [3] the
  // same for teardown barriers.
  static constexpr size_t kCounterWords = 4;
  static constexpr size_t kDataOffset = 16384;
  static_assert((kFlagWords + kCounterWords) * 4 <= kDataOffset);
  static size_t Bytes(size_t half_bytes) { return kDataOffset + 2 * half_bytes; }
  // A half holds 2 x `ranks` slots of this many bytes (a multiple of 256):
  // slot q < ranks takes rank q's contribution, slot ranks + q rank q's
  // reduced slice. The last kTailBytes of a contribution slot take the
  // elements after the last whole 16-byte unit.
  static size_t SlotBytes(size_t half_bytes, int ranks) {
    return half_bytes / (2 * static_cast<size_t>(ranks)) / 256 * 256;
  }
  static constexpr size_t kTailBytes = 64;
};

enum class IpcType : int {
  kInt8, kUint8, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBfloat16, kFloat32, kFloat64,
};
enum class IpcOp : int { kSum, kProd, kMin, kMax, kAvg };

// Written by a kernel that gave up, into host-mapped memory the host reads
// when the call's event completes (0: no error).
inline constexpr int kErrorTimeout = 1;  // A peer's flag did not come.
inline constexpr int kErrorAborted = 2;  // The host set the abort flag.
inline int ErrorCode(int word) { return word & 0xff; }
inline int ErrorPeer(int word) { return (word >> 8) & 0xff; }

struct AllReduceLaunch {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // Elements; the bytes fit in one arena half.
  IpcType type = IpcType::kFloat32;
  IpcOp op = IpcOp::kSum;
  int rank = 0;
  int size = 1;
  void* arenas[kMaxRanks] = {};  // Every rank's arena, as this process sees it.
  size_t half_bytes = 0;
  size_t slot_bytes = 0;  // ArenaLayout::SlotBytes(half_bytes, size).
  // One-shot: count's bytes <= slot_bytes - kTailBytes. Two-shot: each
  // rank's slice (count / size, rounded up to whole 16-byte units) too.
  // Low latency (one-shot only): twice count's bytes, rounded up to 8, fit
  // a slot.
  bool two_shot = false;
  bool low_latency = false;
  // Give up waiting for a peer after this long (nanoseconds of the GPU's
  // global timer), or once *abort_flag is non-zero.
  uint64_t timeout_ns = ~uint64_t{0};
  const int* abort_flag = nullptr;  // Device view of host-mapped memory.
  int* error = nullptr;             // Device view of host-mapped memory.
};

// Queues the all_reduce on `stream` (a cudaStream_t). Returns a cudaError_t
// value (0: queued).
int LaunchAllReduce(const AllReduceLaunch& launch, void* stream);

// Every rank raises its teardown flag and waits for every peer's (or the
// timeout, or the abort flag): after it, no peer's kernel touches this
// rank's arena, so it may be freed. Same fields as above; buffers unused.
int LaunchTeardownBarrier(const AllReduceLaunch& launch, void* stream);

// True if this build has the kernels (CUDA was found at configure time).
bool KernelsBuilt();

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_
