// File: transports/cuda_ipc/ipc_kernels.h
//
// The cuda_ipc transport's kernels, behind a plain C++ interface (no CUDA
// or Abseil headers) so the host code and a build without CUDA compile the
// same way. Every rank's arena (ArenaLayout) is mapped into every peer.
//
// Data moves by stores into the peers' arenas (NVLink carries posted writes
// at full rate, where loads from a peer wait a round trip each) and is read
// locally: a kernel stores what each peer needs into that peer's slot for
// this rank, raises its flag in each peer's arena, waits for theirs, and
// then reads (copies or reduces) from its own arena into the output.
//
// Synchronisation lives in device memory only, so a launch needs no host in
// its path and a CUDA graph can replay it: the arena holds the rank's call
// counter (the epoch), which the last block of each call to finish
// advances, and the epoch's parity picks the arena half the call uses. A
// rank starts call k+2 in a half only after it saw every peer arrive at
// call k+1, by which time they have finished call k there, whatever kind
// of call or grid either had.
//
// The grid and the share of the data each block moves are a function of
// the call alone (its kind and byte counts), never of a rank's buffer
// addresses: ranks synchronise block by block, so a rank whose buffers are
// misaligned (moved in narrower units) still splits the data as its peers do.
//
// Small all_reduces, all_gathers, all_to_alls and reduce_scatters take the
// low-latency path: every 4 bytes of data travel with the epoch beside them
// in one 8-byte store, so a receiver polls the data itself and no flag,
// fence or barrier is needed. Those words live in a region of their own, so
// data a flag-based call left in a slot is never taken for a low-latency
// word.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_
#define RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace relay {
namespace cuda_ipc {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 128;
inline constexpr int kThreads = 512;
// Barrier phases: two within an all_reduce, one for the teardown barrier.
inline constexpr int kPhases = 3;
inline constexpr int kTeardownPhase = 2;

// Point-to-point: a message moves in chunks of kP2PChunkBytes through a
// channel per (source, destination) pair in the destination's arena (two
// chunks, used in turn), each chunk split among the op's kP2PParts blocks.
// Part b of chunk c goes up with its own flag (the pair's running chunk
// number), and comes back as freed when the receiver has copied it out.
inline constexpr int kMaxP2POps = 32;
inline constexpr int kP2PParts = 8;
inline constexpr size_t kP2PChunkBytes = size_t{1} << 20;

// One rank's arena: flags its peers raise, this rank's call counters, the
// point-to-point control words, the low-latency region, the point-to-point
// channels, then the two data halves.
struct ArenaLayout {
  static constexpr size_t kFlagWords = size_t{kPhases} * kMaxBlocks * kMaxRanks;
  // [0] calls, [1] blocks of the current call that finished; [2], [3] the
  // same for teardown barriers.
  static constexpr size_t kCounterWords = 4;
  // After the counters, a word per peer: the epoch of the last direct
  // all_gather that peer refused (LaunchRefusedDirectAllGather).
  static constexpr size_t kRefusalWord = kFlagWords + kCounterWords;
  // The low-latency region: a slot per half and source rank, split among
  // the communicator's ranks. A call sends twice its bytes (data and
  // epoch), so all_reduces, and exchanges whose chunk per rank is, of up
  // to LowLatencyBytes(ranks) may take the low-latency path
  // (RELAY_CUDA_IPC_LOW_LATENCY_BYTES): 1 MiB on 2 ranks, 256 KiB on 8.
  static constexpr size_t kLowLatencyRegionBytes = size_t{8} << 20;
  static constexpr size_t LowLatencySlotBytes(int ranks) {
    return kLowLatencyRegionBytes / (2 * static_cast<size_t>(ranks)) / 256 * 256;
  }
  static constexpr size_t LowLatencyBytes(int ranks) { return LowLatencySlotBytes(ranks) / 2; }
  // Two-shot all_reduce on words: a slot holds a slice's words of both
  // phases, 32 bytes for each 8 of a rank's slice, so the call may be up to
  // `ranks` slices of LowLatencySlotBytes / 32 (1 MiB on any rank count).
  static constexpr size_t LowLatencyTwoShotBytes(int ranks) {
    return LowLatencySlotBytes(ranks) / 32 * 8 * static_cast<size_t>(ranks);
  }
  // Point-to-point control, from kP2POffset: ready flags [source][chunk
  // slot][part] (raised by the sender), freed flags [destination][slot]
  // [part] (raised by the receiver), message sizes [source][slot][part]
  // (64-bit), chunks sent [destination] and received [source], and the
  // count of a batch's blocks that finished.
  static constexpr size_t kP2POffset = 16384;
  static constexpr size_t kP2PFlagWords = size_t{kMaxRanks} * 2 * kP2PParts;
  static constexpr size_t kP2PReadyWord = 0;
  static constexpr size_t kP2PFreedWord = kP2PFlagWords;
  static constexpr size_t kP2PSizeWord = 2 * kP2PFlagWords;  // 2 words each.
  static constexpr size_t kP2PSentWord = 4 * kP2PFlagWords;
  static constexpr size_t kP2PReceivedWord = kP2PSentWord + kMaxRanks;
  static constexpr size_t kP2PDoneWord = kP2PReceivedWord + kMaxRanks;
  static constexpr size_t kLowLatencyOffset = 32768;
  static_assert((kRefusalWord + kMaxRanks) * 4 <= kP2POffset);
  static_assert(kP2POffset + (kP2PDoneWord + 1) * 4 <= kLowLatencyOffset);
  static constexpr size_t kP2PChannelOffset = kLowLatencyOffset + kLowLatencyRegionBytes;
  // The line region, after the channels: a slot per half and source rank,
  // split among the communicator's ranks, of 128-byte lines that each
  // carry 120 data bytes and the epoch (one-shot all_reduces past the
  // low-latency words, RELAY_CUDA_IPC_LINES_BYTES, up to LinesBytes(ranks):
  // 3.75 MiB on 2 ranks).
  static constexpr size_t kLinesOffset =
      kP2PChannelOffset + size_t{kMaxRanks} * 2 * kP2PChunkBytes;
  static constexpr size_t kLinesRegionBytes = size_t{16} << 20;
  static constexpr size_t LinesSlotBytes(int ranks) {
    return kLinesRegionBytes / (2 * static_cast<size_t>(ranks)) / 512 * 512;
  }
  static constexpr size_t LinesBytes(int ranks) { return LinesSlotBytes(ranks) / 128 * 120; }
  static constexpr size_t kDataOffset = kLinesOffset + kLinesRegionBytes;
  // What must start at zero: everything before the data halves.
  static constexpr size_t kZeroedBytes = kDataOffset;
  static size_t Bytes(size_t half_bytes) { return kDataOffset + 2 * half_bytes; }
  // all_reduce: a half holds 2 x `ranks` slots of this many bytes (a
  // multiple of 256): slot q < ranks takes rank q's contribution, slot
  // ranks + q rank q's reduced slice (a two-shot call into windows has
  // contribution slots of ExchangeSlotBytes and no result slots). The last
  // kTailBytes of a contribution slot take the elements after the last
  // whole 16-byte unit.
  static size_t SlotBytes(size_t half_bytes, int ranks) {
    return half_bytes / (2 * static_cast<size_t>(ranks)) / 256 * 256;
  }
  // The other collectives: `ranks` slots per half, each for one source
  // rank's contribution, its bytes contiguous.
  static size_t ExchangeSlotBytes(size_t half_bytes, int ranks) {
    return half_bytes / static_cast<size_t>(ranks) / 256 * 256;
  }
  static constexpr size_t kTailBytes = 64;
};

enum class IpcType : int {
  kInt8, kUint8, kInt32, kUint32, kInt64, kUint64,
  kFloat16, kBfloat16, kFloat32, kFloat64,
};
enum class IpcOp : int { kSum, kProd, kMin, kMax, kAvg };
inline constexpr size_t IpcTypeBytes(IpcType t) {
  switch (t) {
    case IpcType::kInt8:
    case IpcType::kUint8: return 1;
    case IpcType::kFloat16:
    case IpcType::kBfloat16: return 2;
    case IpcType::kInt32:
    case IpcType::kUint32:
    case IpcType::kFloat32: return 4;
    case IpcType::kInt64:
    case IpcType::kUint64:
    case IpcType::kFloat64: return 8;
  }
  return 1;
}

// The collectives other than all_reduce. Each moves a chunk of `count`
// elements per (source, destination) pair; chunk j of a buffer that holds
// one per rank starts at element j x stride. Who stores to whom:
//   kAllGather      every rank's input to every rank's output chunk (source)
//   kBroadcast      the root's input to every rank's output
//   kAllToAll       input chunk d of every rank to output chunk (source) of d
//   kGather         every rank's input to the root's output chunk (source)
//   kScatter        the root's input chunk d to rank d's output
//   kReduceScatter  input chunk d of every rank, reduced, to d's output
//   kReduce         every rank's input, reduced, to the root's output
enum class ExchangeKind : int {
  kAllGather, kBroadcast, kAllToAll, kGather, kScatter, kReduceScatter, kReduce,
};

// Written by a kernel that gave up, into host-mapped memory the host reads
// when the call's event completes and between the watchdog's looks (0: no
// error). The first error stays: the kernels queued after a failed one
// give up on the abort that follows it and must not hide its cause.
inline constexpr int kErrorTimeout = 1;  // A peer's flag did not come.
inline constexpr int kErrorAborted = 2;  // The host set the abort flag.
// A receive's count differs from its send's (the peer is the sender).
inline constexpr int kErrorSizeMismatch = 3;
// The peer's output window was freed while registered: no rank stored.
inline constexpr int kErrorWindowFreed = 4;
inline int ErrorCode(int word) { return word & 0xff; }
inline int ErrorPeer(int word) { return (word >> 8) & 0xff; }

// How a call's data and readiness travel (IpcLaunch::low_latency):
// through the arena's slots and a flag barrier; as 8-byte words of 4 data
// bytes and the epoch; or as 128-byte lines of 120 data bytes and the
// epoch, stored by 8 threads of a warp at once, which NVLink delivers
// whole (NCCL's LL128 relies on the same).
inline constexpr int kFlagBarriers = 0;
inline constexpr int kLowLatencyWords = 1;
inline constexpr int kLowLatencyLines = 2;

// No padding (checked below): the graph launcher compares a call's bytes
// with the last call's to skip re-setting identical parameters.
struct IpcLaunch {
  const void* input = nullptr;
  void* output = nullptr;
  // Elements: all_reduce's whole piece; an exchange's chunk per pair.
  size_t count = 0;
  // Elements between consecutive chunks of a buffer holding one per rank.
  size_t stride = 0;
  void* arenas[kMaxRanks] = {};  // Every rank's arena, as this process sees it.
  size_t half_bytes = 0;
  // ArenaLayout::SlotBytes for all_reduce (ExchangeSlotBytes for a
  // two-shot one into windows, which has no result slots),
  // ExchangeSlotBytes otherwise; a chunk's bytes fit one.
  size_t slot_bytes = 0;
  // Every rank's output, as this process sees it (symmetric windows: the
  // same offset in each rank's registered region): LaunchDirectAllGather's,
  // and a two-shot all_reduce's on the flag path where set (null: through
  // the result slots).
  void* peer_outputs[kMaxRanks] = {};
  // Give up waiting for a peer after this long (nanoseconds of the GPU's
  // global timer), or once *abort_flag is non-zero.
  uint64_t timeout_ns = ~uint64_t{0};
  const int* abort_flag = nullptr;  // Device view of host-mapped memory.
  int* error = nullptr;             // Device view of host-mapped memory.
  IpcType type = IpcType::kFloat32;
  IpcOp op = IpcOp::kSum;
  int root = 0;
  int rank = 0;
  int size = 1;
  // Exchanges: each chunk moves in this many steps (1 or 4), the stores of
  // step s + 1 draining into the peers while this rank copies or reduces
  // what step s brought. Set by LaunchExchange from the call's bytes;
  // callers leave it. (all_reduce's two-shot runs in one step: in steps it
  // lost 5-11% busbw at 16 MB - 1 GB on 2 H200s, docs/design.)
  int steps = 1;
  // all_reduce (0 or 1). One-shot: count's bytes <= slot_bytes -
  // kTailBytes. Two-shot: each rank's slice (count / size, rounded up to
  // whole 16-byte units) too.
  // kLowLatencyWords (all_reduce, all_gather, all_to_all and
  // reduce_scatter; size > 1): an all_reduce's or a chunk's bytes <=
  // ArenaLayout::LowLatencyBytes(size), a two-shot all_reduce's <=
  // LowLatencyTwoShotBytes(size); kLowLatencyLines (all_reduce
  // one-shot, size > 1): count's bytes <= ArenaLayout::LinesBytes(size);
  // both whatever slot_bytes is.
  int two_shot = 0;
  int low_latency = kFlagBarriers;
};
static_assert(std::has_unique_object_representations_v<IpcLaunch>,
              "IpcLaunch has padding");

// How a kernel goes on a stream when not launched directly: `func` is the
// kernel, `args` its parameters (cudaLaunchKernel's forms); returns a
// cudaError_t value. The transport's GraphLauncher (graph_launcher.h).
class KernelLauncher {
 public:
  virtual ~KernelLauncher() = default;
  // `param_bytes`: the size of the kernel's one parameter, *args[0].
  virtual int Launch(const void* func, int blocks, int threads, void** args,
                     size_t param_bytes, void* stream) = 0;
};

// Each queues the call on `stream` (a cudaStream_t), launched directly, or
// through `via` where given, and returns a cudaError_t value (0: queued).
// A two-shot all_reduce with peer_outputs set stores each reduced slice
// straight into every rank's output (outputs in symmetric windows).
int LaunchAllReduce(const IpcLaunch& launch, void* stream, KernelLauncher* via = nullptr);
// In place of such an all_reduce on a rank whose output window was freed
// while registered; as LaunchRefusedDirectAllGather.
int LaunchRefusedAllReduce(const IpcLaunch& launch, void* stream,
                           KernelLauncher* via = nullptr);
int LaunchExchange(const IpcLaunch& launch, ExchangeKind kind, void* stream,
                   KernelLauncher* via = nullptr);
// all_gather into outputs in symmetric windows (launch.peer_outputs): the
// ranks meet once each block has started (so a peer's earlier work on its
// output is done), every rank stores its input straight into every peer's
// output, and they meet again. No staging copy, no pieces; count and
// stride in bytes.
int LaunchDirectAllGather(const IpcLaunch& launch, void* stream,
                          KernelLauncher* via = nullptr);
// In place of LaunchDirectAllGather on a rank whose output window was
// freed while registered: it tells every peer before they meet, so that
// no rank stores into any window, and each peer's call fails with
// kErrorWindowFreed naming this rank. The same launch as the peers'.
int LaunchRefusedDirectAllGather(const IpcLaunch& launch, void* stream,
                                 KernelLauncher* via = nullptr);

// A batch of sends and receives, every op's blocks running at once (a
// batch cannot deadlock on itself). A pair's messages match in the order
// they were posted; a receive's count must equal its send's.
struct P2POpLaunch {
  void* data = nullptr;
  size_t bytes = 0;
  int peer = 0;
  bool send = false;
};
struct P2PLaunch {
  IpcLaunch base;  // rank, size, arenas, timeout, abort and error words.
  int ops = 0;
  P2POpLaunch op[kMaxP2POps];
};
int LaunchP2P(const P2PLaunch& launch, void* stream, KernelLauncher* via = nullptr);

// Every rank raises its teardown flag and waits for every peer's (or the
// timeout, or the abort flag): after it, no peer's kernel touches this
// rank's arena, so it may be freed. Buffers unused.
int LaunchTeardownBarrier(const IpcLaunch& launch, void* stream);

// Loads the teardown barrier's kernel without launching it (LoadKernels).
int LoadTeardownKernel();

// Loads every kernel the launch functions above can queue into the
// current device's context, once per process and device; returns a
// cudaError_t value. CUDA loads a kernel when it is first launched (lazy
// loading, its default) and waits until nothing runs on the GPU to do so,
// so a rank's first call of some kind, dtype and op would block its
// caller until the GPU's other work is done, or for good where that work
// waits for the caller (design note finding 37). Loading all of them when
// a communicator is made puts that wait where the caller waits anyway.
int LoadKernels();

// True if this build has the kernels (CUDA was found at configure time).
bool KernelsBuilt();

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_IPC_KERNELS_H_
