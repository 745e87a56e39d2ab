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

// The call's epoch: one more than the calls this rank's arena has seen.
__device__ __forceinline__ uint32_t BeginCall(void* arena, int counter) {
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) {
    s_epoch = *reinterpret_cast<volatile uint32_t*>(Counters(arena) + counter) + 1;
  }
  __syncthreads();
  return s_epoch;
}

// The last block of the call to finish advances the call counter; the next
// call on this rank (a later kernel) reads it.
__device__ __forceinline__ void EndCall(void* arena, int counter, uint32_t epoch) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* c = Counters(arena) + counter;
    if (atomicAdd(c + 1, 1u) == gridDim.x - 1) {
      c[1] = 0;
      c[0] = epoch;
      __threadfence();
    }
  }
}

__device__ __forceinline__ void StoreLowLatency(uint2* p, uint32_t data, uint32_t epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(data), "r"(epoch)
               : "memory");
}

__device__ void Report(const AllReduceLaunch& p, int code, int peer) {
  if (p.error != nullptr) *reinterpret_cast<volatile int*>(p.error) = code | (peer << 8);
}

// The 4 data bytes of a low-latency word once its epoch is `epoch`; false
// if it gave up (the deadline or an abort; `*failed` tells the block's
// other threads to stop waiting too).
__device__ bool WaitLowLatency(const AllReduceLaunch& p, const uint2* word, uint32_t epoch,
                               int peer, volatile int* failed, uint32_t* data) {
  uint64_t start = 0;
  uint32_t spins = 0;
  while (true) {
    uint32_t d, e;
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(d), "=r"(e) : "l"(word)
                 : "memory");
    if (e == epoch) {
      *data = d;
      return true;
    }
    if ((++spins & 255) != 0) continue;
    if (*failed) return false;
    if (start == 0) start = GlobalTimer();
    int code = 0;
    if (*reinterpret_cast<const volatile int*>(p.abort_flag) != 0) {
      code = kErrorAborted;
    } else if (GlobalTimer() - start > p.timeout_ns) {
      code = kErrorTimeout;
    }
    if (code != 0) {
      Report(p, code, peer);
      *failed = 1;
      return false;
    }
  }
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

// dst[base_d + i] = src[base_s + i] for i in [r.begin, r.end), the block's
// threads striding, four units in flight per thread (a peer's memory is a
// round trip away; stores to it are posted).
template <typename R>
__device__ __forceinline__ void CopyUnits(R* __restrict__ dst, size_t base_d,
                                          const R* __restrict__ src, size_t base_s,
                                          Range r) {
  constexpr int kUnroll = 4;
  const size_t stride = blockDim.x;
  size_t i = r.begin + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < r.end; i += kUnroll * stride) {
    R v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(src + base_s + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[base_d + i + u * stride] = v[u];
  }
  for (; i < r.end; i += stride) dst[base_d + i] = __ldcg(src + base_s + i);
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
  const int b = blockIdx.x;
  const int blocks = gridDim.x;
  void* own_arena = p.arenas[p.rank];
  const uint32_t epoch = BeginCall(own_arena, 0);
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
    // Two units a thread per step, so that twice the loads are in flight.
    constexpr int kUnroll = 2;
    const size_t stride = blockDim.x;
    for (size_t first = r.begin + threadIdx.x; first < r.end; first += kUnroll * stride) {
      A acc[kUnroll][kLanes];
      for (int q = 0; q < n; ++q) {
        const R* src = q == p.rank
                           ? own + own_base
                           : reinterpret_cast<const R*>(Slot(p, own_arena, half, q));
        Unit u[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const size_t i = first + k * stride;
          if (i < r.end) u[k].raw = __ldcg(src + i);
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
#pragma unroll
          for (int l = 0; l < kLanes; ++l) {
            acc[k][l] = q == 0 ? Widen(u[k].e[l]) : Apply<kOp>(acc[k][l], Widen(u[k].e[l]));
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const size_t i = first + k * stride;
        if (i >= r.end) break;
        Unit o;
#pragma unroll
        for (int l = 0; l < kLanes; ++l) o.e[l] = Narrow<T>(Finish<kOp>(acc[k][l], n));
        dst[dst_base + i] = o.raw;
        if (push_result) {
          for (int s = 0; s < n; ++s) {
            if (s != p.rank) {
              reinterpret_cast<R*>(Slot(p, p.arenas[s], half, n + p.rank))[i] = o.raw;
            }
          }
        }
      }
    }
  };

  bool ok = true;
  if (p.low_latency) {
    // Units of 8 data bytes (whole elements), each sent as two 8-byte
    // stores of 4 data bytes and the epoch.
    constexpr int kPer = 8 / sizeof(T);
    union Word {
      unsigned long long raw;
      uint32_t w[2];
      T e[kPer];
    };
    __shared__ int s_failed;
    if (threadIdx.x == 0) s_failed = 0;
    __syncthreads();
    const T* in_t = static_cast<const T*>(p.input);
    T* out_t = static_cast<T*>(p.output);
    const Range r = Split(0, (p.count + kPer - 1) / kPer, b, blocks);
    for (size_t i = r.begin + threadIdx.x; i < r.end && ok; i += blockDim.x) {
      Word mine;
      mine.raw = 0;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (i * kPer + k < p.count) mine.e[k] = in_t[i * kPer + k];
      }
      for (int s = 0; s < n; ++s) {
        if (s == p.rank) continue;
        uint2* dst = reinterpret_cast<uint2*>(Slot(p, p.arenas[s], half, p.rank)) + 2 * i;
        StoreLowLatency(dst, mine.w[0], epoch);
        StoreLowLatency(dst + 1, mine.w[1], epoch);
      }
      A acc[kPer];
      for (int q = 0; q < n && ok; ++q) {
        Word got = mine;
        if (q != p.rank) {
          const uint2* src = reinterpret_cast<const uint2*>(Slot(p, own_arena, half, q)) + 2 * i;
          ok = WaitLowLatency(p, src, epoch, q, &s_failed, &got.w[0]) &&
               WaitLowLatency(p, src + 1, epoch, q, &s_failed, &got.w[1]);
        }
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          acc[k] = q == 0 ? Widen(got.e[k]) : Apply<kOp>(acc[k], Widen(got.e[k]));
        }
      }
      if (!ok) break;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (i * kPer + k < p.count) out_t[i * kPer + k] = Narrow<T>(Finish<kOp>(acc[k], n));
      }
    }
  } else if (!p.two_shot) {
    // Every rank pushes its whole contribution to every peer and reduces
    // locally.
    const Range r = Split(0, units, b, blocks);
    for (int s = 0; s < n; ++s) {
      if (s == p.rank) continue;
      CopyUnits(reinterpret_cast<R*>(Slot(p, p.arenas[s], half, p.rank)), 0, in, 0, r);
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
      CopyUnits(reinterpret_cast<R*>(Slot(p, p.arenas[s], half, p.rank)), 0, in,
                slice.begin, part);
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
        CopyUnits(out, slice.begin,
                  reinterpret_cast<const R*>(Slot(p, own_arena, half, n + s)), 0, part);
      }
    }
  }
  EndCall(own_arena, 0, epoch);
}

__global__ void TeardownKernel(AllReduceLaunch p) {
  const uint32_t epoch = BeginCall(p.arenas[p.rank], 2);
  Barrier(p, kTeardownPhase, 0, epoch);
  EndCall(p.arenas[p.rank], 2, epoch);
}

int Blocks(const AllReduceLaunch& p, size_t units, size_t esize) {
  // A unit per thread up to kMaxBlocks blocks: more blocks keep more stores
  // in flight, fewer take part in fewer barriers.
  const size_t work = p.low_latency ? (p.count * esize + 7) / 8
                     : p.two_shot  ? units / p.size
                                   : units;
  const size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<int>(want < 1 ? 1 : (want > kMaxBlocks ? kMaxBlocks : want));
}

template <typename T, IpcOp kOp>
int Launch(const AllReduceLaunch& p, cudaStream_t stream) {
  using E = typename RawOf<sizeof(T)>::type;
  const bool aligned = (reinterpret_cast<uintptr_t>(p.input) % 16) == 0 &&
                       (reinterpret_cast<uintptr_t>(p.output) % 16) == 0;
  if (aligned) {
    const int blocks = Blocks(p, p.count / (16 / sizeof(T)), sizeof(T));
    AllReduceKernel<T, uint4, kOp><<<blocks, kThreads, 0, stream>>>(p);
  } else {
    const int blocks = Blocks(p, p.count, sizeof(T));
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
