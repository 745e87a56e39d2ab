// The cuda_ipc kernels (ipc_kernels.h): one-shot and two-shot all_reduce
// over arenas that every rank maps, and the teardown barrier.
//
// Each block owns the same share of the data on every rank (the grid is a
// function of the call alone), so ranks synchronise block by block through
// per-block flags and no grid-wide barrier is needed. A flag is raised with
// a system-scope release after the block's stores into the peer's arena,
// and read with a system-scope acquire; slots are read bypassing L1
// (ld.cg), since peers write them again two calls later.
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
  // Every thread's stores into peers' arenas are done (acknowledged) before
  // any flag goes up.
  __threadfence_system();
  __syncthreads();
  bool ok = true;
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank) {
    const size_t row = (size_t{static_cast<size_t>(phase)} * kMaxBlocks + block) * kMaxRanks;
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

// Slot `slot` of `arena`'s half `half` (ArenaLayout::SlotBytes).
__device__ __forceinline__ char* Slot(const AllReduceLaunch& p, void* arena, int half,
                                      int slot) {
  return Data(arena, half, p.half_bytes) + static_cast<size_t>(slot) * p.slot_bytes;
}

// R: the unit the body moves (16 bytes where the buffers allow, else one
// element); the elements after the last whole unit (fewer than 16 bytes)
// go through block 0, one-shot, in each contribution slot's tail.
template <typename T, typename R, IpcOp kOp>
__global__ void __launch_bounds__(kThreads) AllReduceKernel(AllReduceLaunch p) {
  using A = typename Acc<T>::type;
  using E = typename RawOf<sizeof(T)>::type;
  constexpr int kLanes = sizeof(R) / sizeof(T);
  __shared__ uint32_t s_epoch;
  const int b = blockIdx.x;
  const int blocks = gridDim.x;
  void* own_arena = p.arenas[p.rank];
  uint32_t* counter = Counters(own_arena) + b;
  if (threadIdx.x == 0) s_epoch = *counter + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const int half = epoch & 1;
  const int n = p.size;
  const size_t units = p.count / kLanes;
  const size_t tail_begin = units * kLanes;
  const size_t tail = p.count - tail_begin;
  const R* in = static_cast<const R*>(p.input);
  R* out = static_cast<R*>(p.output);
  const size_t tail_offset = p.slot_bytes - ArenaLayout::kTailBytes;

  // The tail, one-shot: pushed by block 0 with the body, reduced after the
  // first barrier.
  auto push_tail = [&] {
    const E* src = static_cast<const E*>(p.input) + tail_begin;
    for (int s = 0; s < n; ++s) {
      if (s == p.rank) continue;
      E* dst = reinterpret_cast<E*>(Slot(p, p.arenas[s], half, p.rank) + tail_offset);
      for (size_t i = threadIdx.x; i < tail; i += blockDim.x) dst[i] = src[i];
    }
  };
  auto reduce_tail = [&] {
    const E* own = static_cast<const E*>(p.input) + tail_begin;
    E* dst = static_cast<E*>(p.output) + tail_begin;
    for (size_t i = threadIdx.x; i < tail; i += blockDim.x) {
      A acc{};
      for (int q = 0; q < n; ++q) {
        const E* src = q == p.rank
                           ? own
                           : reinterpret_cast<const E*>(Slot(p, own_arena, half, q) + tail_offset);
        union { E raw; T e; } u;
        u.raw = src[i];
        acc = q == 0 ? Widen(u.e) : Apply<kOp>(acc, Widen(u.e));
      }
      union { E raw; T e; } o;
      o.e = Narrow<T>(Finish<kOp>(acc, n));
      dst[i] = o.raw;
    }
  };
  // dst[dst_base + i] = the ranks' units i reduced in rank order (this
  // rank's from own[own_base + i], the others' from their slots here); with
  // push_result, also stored into every peer's result slot for this rank.
  auto reduce = [&](Range r, const R* own, size_t own_base, R* dst, size_t dst_base,
                    bool push_result) {
    union Unit {
      R raw;
      T e[kLanes];
    };
    for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
      A acc[kLanes];
      for (int q = 0; q < n; ++q) {
        Unit u;
        u.raw = q == p.rank ? own[own_base + i]
                            : __ldcg(reinterpret_cast<const R*>(Slot(p, own_arena, half, q)) + i);
#pragma unroll
        for (int l = 0; l < kLanes; ++l) {
          acc[l] = q == 0 ? Widen(u.e[l]) : Apply<kOp>(acc[l], Widen(u.e[l]));
        }
      }
      Unit o;
#pragma unroll
      for (int l = 0; l < kLanes; ++l) o.e[l] = Narrow<T>(Finish<kOp>(acc[l], n));
      dst[dst_base + i] = o.raw;
      if (push_result) {
        for (int s = 0; s < n; ++s) {
          if (s != p.rank) {
            reinterpret_cast<R*>(Slot(p, p.arenas[s], half, n + p.rank))[i] = o.raw;
          }
        }
      }
    }
  };

  bool ok = true;
  if (!p.two_shot) {
    // Every rank pushes its whole contribution to every peer and reduces
    // locally.
    const Range r = Split(0, units, b, blocks);
    for (int s = 0; s < n; ++s) {
      if (s == p.rank) continue;
      R* dst = reinterpret_cast<R*>(Slot(p, p.arenas[s], half, p.rank));
      for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) dst[i] = in[i];
    }
    if (b == 0) push_tail();
    ok = Barrier(p, 0, b, epoch);
    if (ok) {
      reduce(r, in, 0, out, 0, false);
      if (b == 0) reduce_tail();
    }
  } else {
    // Rank s reduces slice s: every rank pushes slice s of its input into
    // rank s's slot for it, rank s reduces the slice from its slots and
    // pushes the result into every peer's result slot, and every rank
    // copies the other slices' results out of its own arena.
    for (int s = 0; s < n; ++s) {
      if (s == p.rank) continue;
      const Range slice = Split(0, units, s, n);
      const Range part = Split(0, slice.end - slice.begin, b, blocks);
      R* dst = reinterpret_cast<R*>(Slot(p, p.arenas[s], half, p.rank));
      for (size_t i = part.begin + threadIdx.x; i < part.end; i += blockDim.x) {
        dst[i] = in[slice.begin + i];
      }
    }
    if (b == 0) push_tail();
    ok = Barrier(p, 0, b, epoch);
    if (ok) {
      const Range slice = Split(0, units, p.rank, n);
      reduce(Split(0, slice.end - slice.begin, b, blocks), in, slice.begin, out,
             slice.begin, true);
      if (b == 0) reduce_tail();
      ok = Barrier(p, 1, b, epoch);
    }
    if (ok) {
      for (int s = 0; s < n; ++s) {
        if (s == p.rank) continue;
        const Range slice = Split(0, units, s, n);
        const Range part = Split(0, slice.end - slice.begin, b, blocks);
        const R* src = reinterpret_cast<const R*>(Slot(p, own_arena, half, n + s));
        for (size_t i = part.begin + threadIdx.x; i < part.end; i += blockDim.x) {
          out[slice.begin + i] = __ldcg(src + i);
        }
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
  // A unit per thread up to kMaxBlocks blocks: more blocks keep more stores
  // in flight, fewer take part in fewer barriers.
  const size_t work = p.two_shot ? units / p.size : units;
  const size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<int>(want < 1 ? 1 : (want > kMaxBlocks ? kMaxBlocks : want));
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
