// The cuda_ipc kernels (ipc_kernels.h): one-shot and two-shot all_reduce
// over arenas that every rank maps, and the teardown barrier.
//
// Each block owns the same share of the data on every rank (the grid is a
// function of the call alone), so ranks synchronise block by block through
// per-block flags and no grid-wide barrier is needed. A flag is raised with
// a system-scope release after the block's writes and read with a
// system-scope acquire; peers' data is read bypassing L1 (ld.cg), since an
// arena half is written again two calls later.
//
// Sums accumulate across all ranks in the widened type (float32 for
// float16 and bfloat16) and round once; every rank adds the contributions
// in rank order, so every rank gets the same bits. Integer sums and
// products wrap; kAvg divides the sum by the rank count (integers truncate
// toward zero), as the host kernels do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {
namespace {

template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type Widen(T v) { return v; }
template <> __device__ __forceinline__ float Widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float Widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T Narrow(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half Narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 Narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <IpcOp kOp, typename A>
__device__ __forceinline__ A Apply(A x, A y) {
  if constexpr (kOp == IpcOp::kMin) {
    return y < x ? y : x;
  } else if constexpr (kOp == IpcOp::kMax) {
    return x < y ? y : x;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::common_type_t<std::make_unsigned_t<A>, unsigned>;
    return static_cast<A>(kOp == IpcOp::kProd
                              ? static_cast<U>(x) * static_cast<U>(y)
                              : static_cast<U>(x) + static_cast<U>(y));
  } else {
    return kOp == IpcOp::kProd ? x * y : x + y;
  }
}

template <IpcOp kOp, typename A>
__device__ __forceinline__ A Finish(A acc, int ranks) {
  if constexpr (kOp == IpcOp::kAvg) {
    return static_cast<A>(acc / static_cast<A>(ranks));
  } else {
    return acc;
  }
}

// The unsigned type of each width, for loads that bypass L1.
template <int kBytes> struct RawOf;
template <> struct RawOf<1> { using type = unsigned char; };
template <> struct RawOf<2> { using type = unsigned short; };
template <> struct RawOf<4> { using type = unsigned int; };
template <> struct RawOf<8> { using type = unsigned long long; };
template <> struct RawOf<16> { using type = uint4; };

__device__ __forceinline__ uint32_t* Flags(void* arena) {
  return static_cast<uint32_t*>(arena);
}
__device__ __forceinline__ uint32_t* Counters(void* arena) {
  return static_cast<uint32_t*>(arena) + ArenaLayout::kFlagWords;
}
__device__ __forceinline__ char* Data(void* arena, int half, size_t half_bytes) {
  return static_cast<char*>(arena) + ArenaLayout::kDataOffset + half * half_bytes;
}

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void Report(const AllReduceLaunch& p, int code, int peer) {
  if (p.error != nullptr) *reinterpret_cast<volatile int*>(p.error) = code | (peer << 8);
}

// Block `block` raises its flag of `phase` in every peer's arena and waits
// for every peer's in its own. False (on every thread) if it gave up.
__device__ bool Barrier(const AllReduceLaunch& p, int phase, int block, uint32_t epoch) {
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank) {
    const size_t row = (size_t{static_cast<size_t>(phase)} * kMaxBlocks + block) * kMaxRanks;
    __threadfence_system();
    StoreRelease(Flags(p.arenas[t]) + row + p.rank, epoch);
    const uint32_t* mine = Flags(p.arenas[p.rank]) + row + t;
    const uint64_t start = GlobalTimer();
    uint32_t spins = 0;
    while (static_cast<int32_t>(LoadAcquire(mine) - epoch) < 0) {
      if ((++spins & 255) != 0) continue;
      if (*reinterpret_cast<const volatile int*>(p.abort_flag) != 0) {
        Report(p, kErrorAborted, t);
        ok = false;
        break;
      }
      if (GlobalTimer() - start > p.timeout_ns) {
        Report(p, kErrorTimeout, t);
        ok = false;
        break;
      }
    }
  }
  return __syncthreads_and(ok) != 0;
}

struct Range {
  size_t begin, end;
};
// Part `part` of `parts` of [begin, end), in whole units.
__device__ __forceinline__ Range Split(size_t begin, size_t end, int part, int parts) {
  const size_t n = end - begin;
  const size_t each = (n + parts - 1) / parts;
  const size_t b = begin + min(n, each * part);
  return {b, begin + min(n, each * (part + 1))};
}

template <typename R>
__device__ __forceinline__ void Copy(R* dst, const R* src, Range r) {
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) dst[i] = src[i];
}

template <typename R>
__device__ __forceinline__ void CopyFromPeer(R* dst, const R* src, Range r) {
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) dst[i] = __ldcg(src + i);
}

// out[i] (and arena_out[i], if given) = every rank's unit i reduced, for
// units of type R holding sizeof(R) / sizeof(T) elements.
template <typename T, typename R, IpcOp kOp>
__device__ __forceinline__ void Reduce(const AllReduceLaunch& p, int half, Range r,
                                       R* out, R* arena_out) {
  using A = typename Acc<T>::type;
  constexpr int kLanes = sizeof(R) / sizeof(T);
  union Unit {
    R raw;
    T e[kLanes];
  };
  const R* own = static_cast<const R*>(p.input);
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    A acc[kLanes];
    for (int q = 0; q < p.size; ++q) {
      Unit u;
      u.raw = q == p.rank
                  ? own[i]
                  : __ldcg(reinterpret_cast<const R*>(Data(p.arenas[q], half, p.half_bytes)) + i);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) {
        acc[l] = q == 0 ? Widen(u.e[l]) : Apply<kOp>(acc[l], Widen(u.e[l]));
      }
    }
    Unit o;
#pragma unroll
    for (int l = 0; l < kLanes; ++l) o.e[l] = Narrow<T>(Finish<kOp>(acc[l], p.size));
    out[i] = o.raw;
    if (arena_out != nullptr) arena_out[i] = o.raw;
  }
}

// R: the unit the body moves (16 bytes where the buffers allow, else one
// element); the elements after the last whole unit go through block 0 one
// by one.
template <typename T, typename R, IpcOp kOp>
__global__ void __launch_bounds__(kThreads) AllReduceKernel(AllReduceLaunch p) {
  using E = typename RawOf<sizeof(T)>::type;
  constexpr int kLanes = sizeof(R) / sizeof(T);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x;
  const int blocks = gridDim.x;
  uint32_t* counter = Counters(p.arenas[p.rank]) + b;
  if (threadIdx.x == 0) s_epoch = *counter + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const int half = epoch & 1;
  char* mine = Data(p.arenas[p.rank], half, p.half_bytes);
  const size_t units = p.count / kLanes;
  const Range tail{units * kLanes, p.count};
  const R* in = static_cast<const R*>(p.input);
  R* out = static_cast<R*>(p.output);
  R* arena = reinterpret_cast<R*>(mine);

  bool ok = true;
  if (!p.two_shot) {
    const Range r = Split(0, units, b, blocks);
    Copy(arena, in, r);
    if (b == 0) Copy(reinterpret_cast<E*>(mine), static_cast<const E*>(p.input), tail);
    ok = Barrier(p, 0, b, epoch);
    if (ok) {
      Reduce<T, R, kOp>(p, half, r, out, nullptr);
      if (b == 0) {
        Reduce<T, E, kOp>(p, half, tail, static_cast<E*>(p.output), nullptr);
      }
    }
  } else {
    // Slice s of the units is reduced by rank s: everyone copies the other
    // slices into its arena, rank s reduces slice s from every arena into
    // its own (and its output), and everyone copies slice s from rank s.
    for (int s = 0; s < p.size; ++s) {
      if (s != p.rank) Copy(arena, in, Split(Split(0, units, s, p.size).begin,
                                            Split(0, units, s, p.size).end, b, blocks));
    }
    if (b == 0) Copy(reinterpret_cast<E*>(mine), static_cast<const E*>(p.input), tail);
    ok = Barrier(p, 0, b, epoch);
    if (ok) {
      const Range slice = Split(0, units, p.rank, p.size);
      Reduce<T, R, kOp>(p, half, Split(slice.begin, slice.end, b, blocks), out, arena);
      if (b == 0) {
        Reduce<T, E, kOp>(p, half, tail, static_cast<E*>(p.output), nullptr);
      }
      ok = Barrier(p, 1, b, epoch);
    }
    if (ok) {
      for (int s = 0; s < p.size; ++s) {
        if (s == p.rank) continue;
        const Range slice = Split(0, units, s, p.size);
        CopyFromPeer(out,
                     reinterpret_cast<const R*>(Data(p.arenas[s], half, p.half_bytes)),
                     Split(slice.begin, slice.end, b, blocks));
      }
    }
  }
  if (threadIdx.x == 0) *counter = epoch;
}

__global__ void TeardownKernel(AllReduceLaunch p) {
  __shared__ uint32_t s_epoch;
  uint32_t* counter = Counters(p.arenas[p.rank]) + kTeardownPhase * kMaxBlocks;
  if (threadIdx.x == 0) s_epoch = *counter + 1;
  __syncthreads();
  Barrier(p, kTeardownPhase, 0, s_epoch);
  if (threadIdx.x == 0) *counter = s_epoch;
}

int Blocks(const AllReduceLaunch& p, size_t units) {
  // Enough blocks for the units each one reduces to keep its threads busy
  // a few times over, no more: every block takes part in every barrier.
  const size_t work = p.two_shot ? units / p.size : units;
  const size_t want = (work + 4 * kThreads - 1) / (4 * kThreads);
  return static_cast<int>(want < 1 ? 1 : (want > 32 ? 32 : want));
}

template <typename T, IpcOp kOp>
int Launch(const AllReduceLaunch& p, cudaStream_t stream) {
  using E = typename RawOf<sizeof(T)>::type;
  const bool aligned = (reinterpret_cast<uintptr_t>(p.input) % 16) == 0 &&
                       (reinterpret_cast<uintptr_t>(p.output) % 16) == 0;
  if (aligned) {
    const int blocks = Blocks(p, p.count / (16 / sizeof(T)));
    AllReduceKernel<T, uint4, kOp><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    const int blocks = Blocks(p, p.count);
    AllReduceKernel<T, E, kOp><<<blocks, kThreads, 0, stream>>>(p);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int LaunchOp(const AllReduceLaunch& p, cudaStream_t stream) {
  switch (p.op) {
    case IpcOp::kSum: return Launch<T, IpcOp::kSum>(p, stream);
    case IpcOp::kProd: return Launch<T, IpcOp::kProd>(p, stream);
    case IpcOp::kMin: return Launch<T, IpcOp::kMin>(p, stream);
    case IpcOp::kMax: return Launch<T, IpcOp::kMax>(p, stream);
    case IpcOp::kAvg: return Launch<T, IpcOp::kAvg>(p, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int LaunchAllReduce(const AllReduceLaunch& p, void* stream_ptr) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  switch (p.type) {
    case IpcType::kInt8: return LaunchOp<int8_t>(p, stream);
    case IpcType::kUint8: return LaunchOp<uint8_t>(p, stream);
    case IpcType::kInt32: return LaunchOp<int32_t>(p, stream);
    case IpcType::kUint32: return LaunchOp<uint32_t>(p, stream);
    case IpcType::kInt64: return LaunchOp<int64_t>(p, stream);
    case IpcType::kUint64: return LaunchOp<uint64_t>(p, stream);
    case IpcType::kFloat16: return LaunchOp<__half>(p, stream);
    case IpcType::kBfloat16: return LaunchOp<__nv_bfloat16>(p, stream);
    case IpcType::kFloat32: return LaunchOp<float>(p, stream);
    case IpcType::kFloat64: return LaunchOp<double>(p, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchTeardownBarrier(const AllReduceLaunch& p, void* stream) {
  TeardownKernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

bool KernelsBuilt() { return true; }

}  // namespace cuda_ipc
}  // namespace relay
