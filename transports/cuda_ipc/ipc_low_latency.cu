// The cuda_ipc low-latency kernels (ipc_kernels.h): all_reduce, all_gather,
// all_to_all and reduce_scatter of small data. Every 8 bytes a rank sends
// go into the peer's low-latency slot for it as two words of 4 data bytes
// and the call's epoch, and the peer polls the words themselves: no flag,
// no fence and no barrier, one trip over NVLink a call.
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
  using A = typename Acc<T>::type;
  constexpr int kPer = 8 / sizeof(T);
  union Unit {
    uint64_t raw;
    T e[kPer];
  };
  __shared__ int s_failed;
  if (threadIdx.x == 0) s_failed = 0;  // BeginCall's barrier publishes it.
  void* own_arena = p.arenas[p.rank];
  const uint32_t epoch = BeginCall(own_arena, 0);
  const int half = epoch & 1;
  const int n = p.size;
  const size_t bytes = p.count * sizeof(T);
  const char* in = static_cast<const char*>(p.input);
  char* out = static_cast<char*>(p.output);
  auto input = [&](int d) { return in + Chunks::InputChunk(p, d) * sizeof(T); };
  auto output = [&](int q) { return out + Chunks::OutputChunk(p, q) * sizeof(T); };
  const Range r = Split(0, (bytes + 7) / 8, blockIdx.x, gridDim.x);
  bool ok = true;
  for (size_t i = r.begin + threadIdx.x; i < r.end && ok; i += blockDim.x) {
    const size_t at = i * 8;
    for (int k = 1; k < n; ++k) {
      const int d = Peer(p, blockIdx.x, k);
      PushLowLatency(LowLatencySlot(p, p.arenas[d], half, p.rank), i,
                     LoadEight(input(d), at, bytes), epoch);
    }
    if constexpr (kReduces) {
      A acc[kPer];
      for (int q = 0; q < n && ok; ++q) {
        Unit u;
        if (q == p.rank) {
          u.raw = LoadEight(input(q), at, bytes);
        } else {
          ok = TakeLowLatency(p, LowLatencySlot(p, own_arena, half, q), i, epoch, q, &s_failed,
                              &u.raw);
        }
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          acc[k] = q == 0 ? Widen(u.e[k]) : Apply<kOp>(acc[k], Widen(u.e[k]));
        }
      }
      if (!ok) break;
      Unit o;
#pragma unroll
      for (int k = 0; k < kPer; ++k) o.e[k] = Narrow<T>(Finish<kOp>(acc[k], n));
      StoreEight(output(p.rank), at, bytes, o.raw);
    } else {
      for (int q = 0; q < n && ok; ++q) {
        uint64_t word;
        if (q == p.rank) {
          if (input(q) == output(q)) continue;  // In place: there.
          word = LoadEight(input(q), at, bytes);
        } else {
          ok = TakeLowLatency(p, LowLatencySlot(p, own_arena, half, q), i, epoch, q, &s_failed,
                              &word);
          if (!ok) break;
        }
        StoreEight(output(q), at, bytes, word);
      }
    }
  }
  EndCall(p, 0, epoch);
}

// A thread per 8-byte unit, up to kMaxBlocks blocks: the same on every rank.
int Blocks(size_t bytes) { return BlocksFor((bytes + 7) / 8); }

template <typename T, IpcOp kOp, typename Chunks>
int LaunchReducing(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return Queue(LowLatencyKernel<T, kOp, Chunks, true>, Blocks(p.count * sizeof(T)), kThreads,
               p, stream, via);
}

template <typename T, typename Chunks>
int LaunchOp(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.op) {
    case IpcOp::kSum: return LaunchReducing<T, IpcOp::kSum, Chunks>(p, stream, via);
    case IpcOp::kProd: return LaunchReducing<T, IpcOp::kProd, Chunks>(p, stream, via);
    case IpcOp::kMin: return LaunchReducing<T, IpcOp::kMin, Chunks>(p, stream, via);
    case IpcOp::kMax: return LaunchReducing<T, IpcOp::kMax, Chunks>(p, stream, via);
    case IpcOp::kAvg: return LaunchReducing<T, IpcOp::kAvg, Chunks>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename Chunks>
int LaunchType(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.type) {
    case IpcType::kInt8: return LaunchOp<int8_t, Chunks>(p, stream, via);
    case IpcType::kUint8: return LaunchOp<uint8_t, Chunks>(p, stream, via);
    case IpcType::kInt32: return LaunchOp<int32_t, Chunks>(p, stream, via);
    case IpcType::kUint32: return LaunchOp<uint32_t, Chunks>(p, stream, via);
    case IpcType::kInt64: return LaunchOp<int64_t, Chunks>(p, stream, via);
    case IpcType::kUint64: return LaunchOp<uint64_t, Chunks>(p, stream, via);
    case IpcType::kFloat16: return LaunchOp<__half, Chunks>(p, stream, via);
    case IpcType::kBfloat16: return LaunchOp<__nv_bfloat16, Chunks>(p, stream, via);
    case IpcType::kFloat32: return LaunchOp<float, Chunks>(p, stream, via);
    case IpcType::kFloat64: return LaunchOp<double, Chunks>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <ExchangeKind kKind>
int LaunchCopy(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return Queue(LowLatencyKernel<unsigned char, IpcOp::kSum, Plan<kKind>, false>,
               Blocks(p.count), kThreads, p, stream, via);
}

}  // namespace

int LaunchLowLatencyAllReduce(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return LaunchType<AllReduceChunks>(p, stream, via);
}

int LaunchLowLatencyExchange(const IpcLaunch& p, ExchangeKind kind, cudaStream_t stream,
                             KernelLauncher* via) {
  switch (kind) {
    case ExchangeKind::kAllGather: return LaunchCopy<ExchangeKind::kAllGather>(p, stream, via);
    case ExchangeKind::kAllToAll: return LaunchCopy<ExchangeKind::kAllToAll>(p, stream, via);
    case ExchangeKind::kReduceScatter:
      return LaunchType<Plan<ExchangeKind::kReduceScatter>>(p, stream, via);
    default: break;  // Not every rank takes from every peer (see above).
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace cuda_ipc
}  // namespace relay
