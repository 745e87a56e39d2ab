// The cuda_ipc low-latency kernels (ipc_kernels.h): all_reduce (one-shot,
// or two-shot for many ranks), all_gather, all_to_all and reduce_scatter
// of small data. Every 8 bytes a rank sends go into the peer's low-latency
// slot for it as two words of 4 data bytes and the call's epoch, and the
// peer polls the words themselves: no flag, no fence and no barrier, one
// trip over NVLink a call (two for two-shot).
//
// Larger one-shot all_reduces go as 128-byte lines instead: 120 data bytes
// and the epoch, stored by 8 threads of a warp in one instruction, which
// NVLink delivers whole; the receiving warp polls the lines' epochs. 1/16
// of the bytes carry epochs, where words spend half.
//
// Only collectives where every rank takes data from every peer go this
// way: a word of call k+1 from each peer shows that the peer finished call
// k, which is what lets this rank write the arena half of call k again in
// call k+2 (ipc_kernels.h). A rank that only sent would never learn it.
#include "transports/cuda_ipc/ipc_device.h"

namespace relay {
namespace cuda_ipc {
namespace {

// The 8 bytes of `src` from byte `at`; those at or past `end` read as zero.
__device__ __forceinline__ uint64_t LoadEight(const char* src, size_t at, size_t end) {
  const char* s = src + at;
  if (at + 8 <= end && reinterpret_cast<uintptr_t>(s) % 8 == 0) {
    return *reinterpret_cast<const uint64_t*>(s);
  }
  union {
    uint64_t word;
    char bytes[8];
  } u;
  u.word = 0;
  for (int k = 0; k < 8 && at + k < end; ++k) u.bytes[k] = s[k];
  return u.word;
}

// Stores the bytes of `word` that fall before `end` at `dst` + `at`.
__device__ __forceinline__ void StoreEight(char* dst, size_t at, size_t end, uint64_t word) {
  char* d = dst + at;
  if (at + 8 <= end && reinterpret_cast<uintptr_t>(d) % 8 == 0) {
    *reinterpret_cast<uint64_t*>(d) = word;
    return;
  }
  union {
    uint64_t word;
    char bytes[8];
  } u;
  u.word = word;
  for (int k = 0; k < 8 && at + k < end; ++k) d[k] = u.bytes[k];
}

// 8 bytes of T's elements, and their accumulation over the ranks in rank
// order (every rank gets the same bits).
template <typename T>
union Eight {
  static constexpr int kPer = 8 / sizeof(T);
  uint64_t raw;
  T e[kPer];
};
template <typename T, IpcOp kOp>
struct Accumulator {
  typename Acc<T>::type acc[Eight<T>::kPer];
  // Rank q's 8 bytes, q = 0, 1, ... in turn.
  __device__ __forceinline__ void Add(int q, Eight<T> u) {
#pragma unroll
    for (int k = 0; k < Eight<T>::kPer; ++k) {
      acc[k] = q == 0 ? Widen(u.e[k]) : Apply<kOp>(acc[k], Widen(u.e[k]));
    }
  }
  __device__ __forceinline__ uint64_t Result(int ranks) const {
    Eight<T> o;
#pragma unroll
    for (int k = 0; k < Eight<T>::kPer; ++k) o.e[k] = Narrow<T>(Finish<kOp>(acc[k], ranks));
    return o.raw;
  }
};

// What every low-latency kernel starts with: the call's epoch, the arena
// half it uses, this rank's arena, and the block's give-up word (set by a
// thread that gave up, so that the others stop waiting).
struct LowLatencyCall {
  uint32_t epoch;
  int half;
  void* own_arena;
  volatile int* failed;
  const char* in;
  char* out;
};
__device__ __forceinline__ LowLatencyCall BeginLowLatencyCall(const IpcLaunch& p) {
  __shared__ int s_failed;
  if (threadIdx.x == 0) s_failed = 0;  // BeginCall's barrier publishes it.
  LowLatencyCall c;
  c.own_arena = p.arenas[p.rank];
  c.epoch = BeginCall(c.own_arena, 0);
  c.half = c.epoch & 1;
  c.failed = &s_failed;
  c.in = static_cast<const char*>(p.input);
  c.out = static_cast<char*>(p.output);
  return c;
}

// Stores `data_for(d)` as word pair `i` of every peer d's slot for this
// rank.
template <typename DataFor>
__device__ __forceinline__ void PushToPeers(const IpcLaunch& p, const LowLatencyCall& c,
                                            size_t i, DataFor&& data_for) {
  for (int k = 1; k < p.size; ++k) {
    const int d = Peer(p, blockIdx.x, k);
    PushLowLatency(LowLatencySlot(p, p.arenas[d], c.half, p.rank), i, data_for(d), c.epoch);
  }
}

// The 8 bytes peer `q` pushed as word pair `i` of this rank's slot for it;
// false if the wait gave up.
__device__ __forceinline__ bool TakeFromPeer(const IpcLaunch& p, const LowLatencyCall& c, int q,
                                             size_t i, uint64_t* data) {
  return TakeLowLatency(p, LowLatencySlot(p, c.own_arena, c.half, q), i, c.epoch, q, c.failed,
                        data);
}

// `own` (this rank's 8 bytes) and every peer's word pair `i`, reduced in
// rank order, so that every rank gets the same bits; false if a wait gave
// up.
template <typename T, IpcOp kOp>
__device__ __forceinline__ bool ReduceWithPeers(const IpcLaunch& p, const LowLatencyCall& c,
                                                size_t i, uint64_t own, uint64_t* reduced) {
  Accumulator<T, kOp> sum;
  for (int q = 0; q < p.size; ++q) {
    Eight<T> u;
    if (q == p.rank) {
      u.raw = own;
    } else if (!TakeFromPeer(p, c, q, i, &u.raw)) {
      return false;
    }
    sum.Add(q, u);
  }
  *reduced = sum.Result(p.size);
  return true;
}

// all_reduce sends its whole input to every peer and takes the whole output.
struct AllReduceChunks {
  __device__ static size_t InputChunk(const IpcLaunch&, int) { return 0; }
  __device__ static size_t OutputChunk(const IpcLaunch&, int) { return 0; }
};

// T: the element (unsigned char for the copy kinds, whose count and stride
// are bytes). Chunks: where the chunk for each peer starts in the input and
// where each source's goes in the output (Plan, in elements). Each thread
// moves 8-byte units of the chunk; elements never straddle them (8 is a
// multiple of every element size, and chunks start at whole elements).
// Reductions combine in rank order, so every rank gets the same bits.
template <typename T, IpcOp kOp, typename Chunks, bool kReduces>
__global__ void __launch_bounds__(kThreads) LowLatencyKernel(IpcLaunch p) {
  const LowLatencyCall c = BeginLowLatencyCall(p);
  const int n = p.size;
  const size_t bytes = p.count * sizeof(T);
  auto input = [&](int d) { return c.in + Chunks::InputChunk(p, d) * sizeof(T); };
  auto output = [&](int q) { return c.out + Chunks::OutputChunk(p, q) * sizeof(T); };
  const Range r = Split(0, (bytes + 7) / 8, blockIdx.x, gridDim.x);
  bool ok = true;
  for (size_t i = r.begin + threadIdx.x; i < r.end && ok; i += blockDim.x) {
    const size_t at = i * 8;
    PushToPeers(p, c, i, [&](int d) { return LoadEight(input(d), at, bytes); });
    if constexpr (kReduces) {
      uint64_t reduced;
      ok = ReduceWithPeers<T, kOp>(p, c, i, LoadEight(input(p.rank), at, bytes), &reduced);
      if (ok) StoreEight(output(p.rank), at, bytes, reduced);
    } else {
      for (int q = 0; q < n && ok; ++q) {
        uint64_t word;
        if (q == p.rank) {
          if (input(q) == output(q)) continue;  // In place: there.
          word = LoadEight(input(q), at, bytes);
        } else {
          ok = TakeFromPeer(p, c, q, i, &word);
          if (!ok) break;
        }
        StoreEight(output(q), at, bytes, word);
      }
    }
  }
  EndCall(p, 0, c.epoch);
}

// Two-shot all_reduce on words, for many ranks, where one-shot sends each
// peer the whole input: every rank reduces its slice (a reduce_scatter on
// words), then sends it to every peer (an all_gather on words), about
// 2 (n - 1) / n of the data a rank instead of n - 1 times it (both
// doubled by the epochs). Slice q is units [q U, (q + 1) U) of 8 bytes;
// in a slot, unit j's words of the first phase are word pair j, of the
// second pair U + j. Each thread's unit needs no other thread's, so the
// phases need no barrier, and in place is safe: unit q U + j is read and
// written by thread j alone, read first.
template <typename T, IpcOp kOp>
__global__ void __launch_bounds__(kThreads) TwoShotWordsKernel(IpcLaunch p) {
  const LowLatencyCall c = BeginLowLatencyCall(p);
  const int n = p.size;
  const size_t bytes = p.count * sizeof(T);
  const size_t units = ((bytes + 7) / 8 + n - 1) / n;
  const Range r = Split(0, units, blockIdx.x, gridDim.x);
  bool ok = true;
  for (size_t j = r.begin + threadIdx.x; j < r.end && ok; j += blockDim.x) {
    auto at = [&](int q) { return (static_cast<size_t>(q) * units + j) * 8; };
    PushToPeers(p, c, j, [&](int d) { return LoadEight(c.in, at(d), bytes); });
    uint64_t reduced;
    ok = ReduceWithPeers<T, kOp>(p, c, j, LoadEight(c.in, at(p.rank), bytes), &reduced);
    if (!ok) break;
    PushToPeers(p, c, units + j, [&](int) { return reduced; });
    StoreEight(c.out, at(p.rank), bytes, reduced);
    for (int q = 0; q < n && ok; ++q) {
      if (q == p.rank) continue;
      uint64_t word;
      ok = TakeFromPeer(p, c, q, units + j, &word);
      if (ok) StoreEight(c.out, at(q), bytes, word);
    }
  }
  EndCall(p, 0, c.epoch);
}

__device__ __forceinline__ void StoreLine16(char* dst, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(dst), "l"(a), "l"(b)
               : "memory");
}
__device__ __forceinline__ void LoadLine16(const char* src, uint64_t* a, uint64_t* b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(src)
               : "memory");
}

// A warp's share of lines: each thread holds 16 bytes of one of 4 lines
// (512 bytes a warp store); the 8th thread of a line holds its last 8 data
// bytes and the epoch.
constexpr size_t kLineData = 120;
constexpr size_t kWarpLines = 4;
constexpr size_t kSliceData = kWarpLines * kLineData;  // 480 bytes.
constexpr size_t kSliceWire = kWarpLines * 128;        // 512 bytes.
constexpr unsigned kFullWarp = 0xffffffffu;

// Waits until every line of the slice at `src` that the warp reads carries
// `epoch`, then reads the slice again (so that each thread's 16 bytes come
// from a line seen whole); false if it gave up (the deadline or an abort,
// which `*failed` passes to the block's other warps).
__device__ bool TakeSlice(const IpcLaunch& p, const char* src, uint32_t epoch, int peer,
                          bool epoch_thread, volatile int* failed, uint64_t* a, uint64_t* b) {
  uint64_t start = 0;
  uint32_t spins = 0;
  while (true) {
    LoadLine16(src, a, b);
    if (!__any_sync(kFullWarp, epoch_thread && *b != epoch)) break;
    if ((++spins & 255) != 0) continue;
    int code = 0;
    if ((threadIdx.x & 31) == 0) {
      code = *failed ? -1 : GiveUpReason(p, &start);
    }
    code = __shfl_sync(kFullWarp, code, 0);
    if (code != 0) {
      if (code > 0 && (threadIdx.x & 31) == 0) {
        Report(p, code, peer);
        *failed = 1;
      }
      return false;
    }
  }
  LoadLine16(src, a, b);
  return true;
}

// One-shot all_reduce on lines. Every warp pushes its slices to every peer,
// then takes them slice by slice, reducing in rank order; the grid and
// each warp's slices depend on the call's bytes alone.
template <typename T, IpcOp kOp>
__global__ void __launch_bounds__(kThreads) LinesAllReduceKernel(IpcLaunch p) {
  const LowLatencyCall c = BeginLowLatencyCall(p);
  const int n = p.size;
  const size_t bytes = p.count * sizeof(T);
  const int lane = threadIdx.x & 31;
  const bool epoch_thread = lane % 8 == 7;
  // This thread's data bytes within a slice, and its 16 bytes on the wire.
  const size_t data_at = (lane / 8) * kLineData + (lane % 8) * 16;
  const size_t wire_at = static_cast<size_t>(lane) * 16;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  const size_t slices = (bytes + kSliceData - 1) / kSliceData;
  for (size_t s = warp; s < slices; s += warps) {
    const size_t at = s * kSliceData + data_at;
    const uint64_t a = LoadEight(c.in, at, bytes);
    const uint64_t b = epoch_thread ? c.epoch : LoadEight(c.in, at + 8, bytes);
    for (int k = 1; k < n; ++k) {
      const int d = Peer(p, blockIdx.x, k);
      StoreLine16(LinesSlot(p, p.arenas[d], c.half, p.rank) + s * kSliceWire + wire_at, a, b);
    }
  }
  bool ok = true;
  for (size_t s = warp; s < slices && ok; s += warps) {
    const size_t at = s * kSliceData + data_at;
    Accumulator<T, kOp> first, second;  // This thread's two 8 bytes.
    for (int q = 0; q < n && ok; ++q) {
      Eight<T> a, b;
      if (q == p.rank) {
        a.raw = LoadEight(c.in, at, bytes);
        b.raw = epoch_thread ? 0 : LoadEight(c.in, at + 8, bytes);
      } else {
        ok = TakeSlice(p, LinesSlot(p, c.own_arena, c.half, q) + s * kSliceWire + wire_at, c.epoch,
                       q, epoch_thread, c.failed, &a.raw, &b.raw);
      }
      first.Add(q, a);
      second.Add(q, b);
    }
    if (!ok) break;
    StoreEight(c.out, at, bytes, first.Result(n));
    if (!epoch_thread) StoreEight(c.out, at + 8, bytes, second.Result(n));
  }
  EndCall(p, 0, c.epoch);
}

// A warp per 8 slices (3.75 KiB), up to kMaxBlocks blocks: the same on
// every rank.
int LinesBlocks(size_t bytes) {
  const size_t slices = (bytes + kSliceData - 1) / kSliceData;
  return BlocksFor(slices * 32 / 8);
}

template <typename T, IpcOp kOp>
int LaunchLines(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return Queue(LinesAllReduceKernel<T, kOp>, LinesBlocks(p.count * sizeof(T)), kThreads, p, stream,
               via);
}

// A thread per 8-byte unit, up to kMaxBlocks blocks: the same on every rank.
int Blocks(size_t bytes) { return BlocksFor((bytes + 7) / 8); }

template <typename T, IpcOp kOp, typename Chunks>
int LaunchReducing(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  if constexpr (std::is_same_v<Chunks, AllReduceChunks>) {
    if (p.low_latency == kLowLatencyLines) return LaunchLines<T, kOp>(p, stream, via);
    if (p.two_shot) {
      // A thread per 8-byte unit of a rank's slice.
      const size_t units = ((p.count * sizeof(T) + 7) / 8 + p.size - 1) / p.size;
      return Queue(TwoShotWordsKernel<T, kOp>, BlocksFor(units), kThreads, p, stream, via);
    }
  }
  return Queue(LowLatencyKernel<T, kOp, Chunks, true>, Blocks(p.count * sizeof(T)), kThreads, p,
               stream, via);
}

template <typename T, typename Chunks>
int LaunchOp(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.op) {
    case IpcOp::kSum:
      return LaunchReducing<T, IpcOp::kSum, Chunks>(p, stream, via);
    case IpcOp::kProd:
      return LaunchReducing<T, IpcOp::kProd, Chunks>(p, stream, via);
    case IpcOp::kMin:
      return LaunchReducing<T, IpcOp::kMin, Chunks>(p, stream, via);
    case IpcOp::kMax:
      return LaunchReducing<T, IpcOp::kMax, Chunks>(p, stream, via);
    case IpcOp::kAvg:
      return LaunchReducing<T, IpcOp::kAvg, Chunks>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename Chunks>
int LaunchType(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.type) {
    case IpcType::kInt8:
      return LaunchOp<int8_t, Chunks>(p, stream, via);
    case IpcType::kUint8:
      return LaunchOp<uint8_t, Chunks>(p, stream, via);
    case IpcType::kInt32:
      return LaunchOp<int32_t, Chunks>(p, stream, via);
    case IpcType::kUint32:
      return LaunchOp<uint32_t, Chunks>(p, stream, via);
    case IpcType::kInt64:
      return LaunchOp<int64_t, Chunks>(p, stream, via);
    case IpcType::kUint64:
      return LaunchOp<uint64_t, Chunks>(p, stream, via);
    case IpcType::kFloat16:
      return LaunchOp<__half, Chunks>(p, stream, via);
    case IpcType::kBfloat16:
      return LaunchOp<__nv_bfloat16, Chunks>(p, stream, via);
    case IpcType::kFloat32:
      return LaunchOp<float, Chunks>(p, stream, via);
    case IpcType::kFloat64:
      return LaunchOp<double, Chunks>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <ExchangeKind kKind>
int LaunchCopy(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return Queue(LowLatencyKernel<unsigned char, IpcOp::kSum, Plan<kKind>, false>, Blocks(p.count),
               kThreads, p, stream, via);
}

}  // namespace

int LaunchLowLatencyAllReduce(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return LaunchType<AllReduceChunks>(p, stream, via);
}

int LaunchLowLatencyExchange(const IpcLaunch& p, ExchangeKind kind, cudaStream_t stream,
                             KernelLauncher* via) {
  switch (kind) {
    case ExchangeKind::kAllGather:
      return LaunchCopy<ExchangeKind::kAllGather>(p, stream, via);
    case ExchangeKind::kAllToAll:
      return LaunchCopy<ExchangeKind::kAllToAll>(p, stream, via);
    case ExchangeKind::kReduceScatter:
      return LaunchType<Plan<ExchangeKind::kReduceScatter>>(p, stream, via);
    default:
      break;  // Not every rank takes from every peer (see above).
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace cuda_ipc
}  // namespace relay
