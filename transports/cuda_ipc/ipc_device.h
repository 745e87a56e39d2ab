// File: transports/cuda_ipc/ipc_device.h
//
// Device code shared by the cuda_ipc kernels (ipc_kernels.h): element
// types and reductions, the arena's parts, epochs, low-latency words, the
// per-block flag barrier, who sends what in an exchange, and copies.
// Included by the .cu files only.
//
// A flag is raised with a system-scope release after the block's stores
// into the peer's arena, and read with a system-scope acquire; slots are
// read bypassing L1 (ld.cg), since peers write them again two calls later.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_IPC_DEVICE_H_
#define RELAY_TRANSPORTS_CUDA_IPC_IPC_DEVICE_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "runtime/device_arithmetic.cuh"
#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {

// Elements combine as the host kernels do (runtime/device_arithmetic.cuh);
// kAvg sums, then Finish divides by the rank count (integers truncate
// toward zero).
using device_arithmetic::Acc;
using device_arithmetic::Apply;
using device_arithmetic::Narrow;
using device_arithmetic::Widen;

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
__device__ __forceinline__ uint32_t* Refusals(void* arena) {
  return static_cast<uint32_t*>(arena) + ArenaLayout::kRefusalWord;
}
// Source rank `src`'s slot in `arena`'s half `half` (p.slot_bytes each).
__device__ __forceinline__ char* Slot(const IpcLaunch& p, void* arena, int half, int src) {
  return static_cast<char*>(arena) + ArenaLayout::kDataOffset + half * p.half_bytes +
         static_cast<size_t>(src) * p.slot_bytes;
}
__device__ __forceinline__ char* LowLatencySlot(const IpcLaunch& p, void* arena, int half,
                                                int src) {
  return static_cast<char*>(arena) + ArenaLayout::kLowLatencyOffset +
         (static_cast<size_t>(half) * p.size + src) * ArenaLayout::LowLatencySlotBytes(p.size);
}
__device__ __forceinline__ char* LinesSlot(const IpcLaunch& p, void* arena, int half, int src) {
  return static_cast<char*>(arena) + ArenaLayout::kLinesOffset +
         (static_cast<size_t>(half) * p.size + src) * ArenaLayout::LinesSlotBytes(p.size);
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

// Waits until the kernels queued before this one on its stream have ended
// (their memory visible), then lets the next kernel start. Queue launches
// every kernel as a programmatic dependent: it may start while its
// predecessor runs and waits here, so the launch hides behind the
// predecessor. Where there is no such dependency both are no-ops.
__device__ __forceinline__ void AfterPredecessors() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// The call's epoch: one more than the calls this rank's arena has seen.
// First of all, AfterPredecessors.
__device__ __forceinline__ uint32_t BeginCall(void* arena, int counter) {
  AfterPredecessors();
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) {
    s_epoch = *reinterpret_cast<volatile uint32_t*>(Counters(arena) + counter) + 1;
  }
  __syncthreads();
  return s_epoch;
}

// The last block of the call to finish advances the call counter; the next
// call on this rank (a later kernel) reads it. A grid of one block writes
// it at once: nothing else reads it before the kernel ends, and the
// kernel's end makes the write visible to the next one.
__device__ __forceinline__ void EndCall(const IpcLaunch& p, int counter, uint32_t epoch) {
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) Counters(p.arenas[p.rank])[counter] = epoch;
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t* c = Counters(p.arenas[p.rank]) + counter;
    if (atomicAdd(c + 1, 1u) == gridDim.x - 1) {
      c[1] = 0;
      c[0] = epoch;
      __threadfence();
    }
  }
}

// The first error stays (ipc_kernels.h): a later kernel of a failed call
// reports the abort that followed it. Blocks of one kernel may race here;
// either word is that kernel's error.
__device__ __forceinline__ void Report(const IpcLaunch& p, int code, int peer) {
  if (p.error == nullptr) return;
  volatile int* word = reinterpret_cast<volatile int*>(p.error);
  if (*word == 0) *word = code | (peer << 8);
}

// Why a wait for a peer should stop now: kErrorAborted once the host set
// the abort flag, kErrorTimeout once the deadline passed since the wait's
// first check (`*start`, 0 until then), else 0. Waits call it every 256th
// spin, so one that ends sooner never reads the clock.
__device__ inline int GiveUpReason(const IpcLaunch& p, uint64_t* start) {
  if (*start == 0) *start = GlobalTimer();
  if (*reinterpret_cast<const volatile int*>(p.abort_flag) != 0) return kErrorAborted;
  if (GlobalTimer() - *start > p.timeout_ns) return kErrorTimeout;
  return 0;
}

// Waits (one thread) until *word reaches `target` (in wrapping order), the
// deadline passes or the host aborts; false if it gave up, after reporting
// why and `peer`.
__device__ inline bool WaitAtLeast(const IpcLaunch& p, const uint32_t* word, uint32_t target,
                                   int peer) {
  uint64_t start = 0;
  uint32_t spins = 0;
  while (static_cast<int32_t>(LoadAcquire(word) - target) < 0) {
    if ((++spins & 255) != 0) continue;
    if (const int code = GiveUpReason(p, &start); code != 0) {
      Report(p, code, peer);
      return false;
    }
  }
  return true;
}

// Low-latency words: 4 data bytes and the call's epoch in one 8-byte store,
// so a receiver that sees the epoch has the data (NVLink delivers an
// aligned 8-byte store whole). 8 data bytes go as two words, 2i and 2i+1.
__device__ __forceinline__ void StoreLowLatency(uint2* p, uint32_t data, uint32_t epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(data), "r"(epoch)
               : "memory");
}
__device__ __forceinline__ void PushLowLatency(char* slot, size_t i, uint64_t data,
                                               uint32_t epoch) {
  uint2* dst = reinterpret_cast<uint2*>(slot) + 2 * i;
  StoreLowLatency(dst, static_cast<uint32_t>(data), epoch);
  StoreLowLatency(dst + 1, static_cast<uint32_t>(data >> 32), epoch);
}

// The 4 data bytes of a low-latency word once its epoch is `epoch`; false
// if it gave up (the deadline or an abort; `*failed` tells the block's
// other threads to stop waiting too).
__device__ inline bool WaitLowLatency(const IpcLaunch& p, const uint2* word, uint32_t epoch,
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
    if (const int code = GiveUpReason(p, &start); code != 0) {
      Report(p, code, peer);
      *failed = 1;
      return false;
    }
  }
}

// The 8 data bytes `peer` pushed as words 2i and 2i+1 of `slot`.
__device__ __forceinline__ bool TakeLowLatency(const IpcLaunch& p, const char* slot, size_t i,
                                               uint32_t epoch, int peer, volatile int* failed,
                                               uint64_t* data) {
  const uint2* src = reinterpret_cast<const uint2*>(slot) + 2 * i;
  uint32_t lo, hi;
  if (!WaitLowLatency(p, src, epoch, peer, failed, &lo) ||
      !WaitLowLatency(p, src + 1, epoch, peer, failed, &hi)) {
    return false;
  }
  *data = (static_cast<uint64_t>(hi) << 32) | lo;
  return true;
}

// Flag values carry a call's epoch and a step within the call, so that
// every value a later call raises is above every value of an earlier one
// (in wrapping order); a whole-call barrier raises the last step.
inline constexpr int kMaxSteps = 8;
__device__ __forceinline__ uint32_t FlagValue(uint32_t epoch, int step) {
  return epoch * kMaxSteps + static_cast<uint32_t>(step);
}
__device__ __forceinline__ size_t FlagRow(int phase, int block) {
  return (static_cast<size_t>(phase) * kMaxBlocks + block) * kMaxRanks;
}

// Block `block` raises its flag of `phase` to `value` in every peer's arena,
// after every thread's earlier stores. No fence per thread: the CTA barrier
// orders the block's stores before the one system-scope release, and PTX's
// release is cumulative, so a peer that acquires the flag sees them all
// (design note, finding 31; NCCL's LSA barrier does the same).
__device__ inline void Raise(const IpcLaunch& p, int phase, int block, uint32_t value) {
  __syncthreads();
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank) {
    StoreRelease(Flags(p.arenas[t]) + FlagRow(phase, block) + p.rank, value);
  }
}

// Block `block` waits until every peer's flag of `phase` in this rank's
// arena reaches `value`. False (on every thread) if it gave up.
__device__ inline bool Await(const IpcLaunch& p, int phase, int block, uint32_t value) {
  bool ok = true;
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank) {
    ok = WaitAtLeast(p, Flags(p.arenas[p.rank]) + FlagRow(phase, block) + t, value, t);
  }
  return __syncthreads_and(ok) != 0;
}

// Block `block` meets the same block of every peer: Raise, then Await, at
// the call's last step. False (on every thread) if it gave up.
__device__ inline bool Barrier(const IpcLaunch& p, int phase, int block, uint32_t epoch) {
  const uint32_t value = FlagValue(epoch, kMaxSteps - 1);
  Raise(p, phase, block, value);
  return Await(p, phase, block, value);
}

// Windows: the peer whose refusal (QueueRefusal) this rank's arena holds
// for call `epoch`, or -1; for the whole block, once it has every peer's
// first flag of the call (the refusal is stored before that flag, and the
// thread that acquired a peer's flag is the one that reads its word).
__device__ inline int RefusingPeer(const IpcLaunch& p, uint32_t epoch) {
  __shared__ int s_refusing;
  if (threadIdx.x == 0) s_refusing = -1;
  __syncthreads();
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank &&
      *reinterpret_cast<const volatile uint32_t*>(Refusals(p.arenas[p.rank]) + t) == epoch) {
    s_refusing = t;
  }
  __syncthreads();
  return s_refusing;
}

// The k-th peer (k in [1, size)) block `block` of this rank stores to.
// Rotated by rank and block, so that at any moment the ranks' writes
// spread over every peer: in rank order every rank wrote to rank 0 first,
// then to rank 1, and each rank's links took all writers at once in turn
// (0.54x NCCL's all_gather busbw on 4 GPUs).
__device__ __forceinline__ int Peer(const IpcLaunch& p, int block, int k) {
  return (p.rank + 1 + (k - 1 + block) % (p.size - 1)) % p.size;
}

// Who sends what to whom in the collectives other than all_reduce
// (ExchangeKind), offsets in the launch's units (bytes for copies,
// elements for reductions).
template <ExchangeKind kKind>
struct Plan {
  // Whether this rank stores into rank d's slot for it.
  __device__ static bool Pushes(const IpcLaunch& p, int d) {
    if (d == p.rank) return false;
    switch (kKind) {
      case ExchangeKind::kBroadcast:
      case ExchangeKind::kScatter: return p.rank == p.root;
      case ExchangeKind::kGather:
      case ExchangeKind::kReduce: return d == p.root;
      default: return true;
    }
  }
  // Whether this rank's output takes source q's contribution.
  __device__ static bool Takes(const IpcLaunch& p, int q) {
    switch (kKind) {
      case ExchangeKind::kBroadcast:
      case ExchangeKind::kScatter: return q == p.root;
      case ExchangeKind::kGather:
      case ExchangeKind::kReduce: return p.rank == p.root;
      default: return true;
    }
  }
  // Where the chunk for rank d starts in the input.
  __device__ static size_t InputChunk(const IpcLaunch& p, int d) {
    if constexpr (kKind == ExchangeKind::kAllToAll || kKind == ExchangeKind::kScatter ||
                  kKind == ExchangeKind::kReduceScatter) {
      return d * p.stride;
    }
    return 0;
  }
  // Where source q's chunk goes in the output.
  __device__ static size_t OutputChunk(const IpcLaunch& p, int q) {
    if constexpr (kKind == ExchangeKind::kAllGather || kKind == ExchangeKind::kAllToAll ||
                  kKind == ExchangeKind::kGather) {
      return q * p.stride;
    }
    return 0;
  }
};

struct Range {
  size_t begin, end;
  __device__ __forceinline__ Range Scaled(size_t k) const { return {begin * k, end * k}; }
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

// Queues kernel<<<blocks, threads>>>(param) on `stream`: through `via`
// where given, else launched as a programmatic dependent of the kernel
// before it (AfterPredecessors), which a graph captured from the stream
// keeps. Returns a cudaError_t value.
template <typename P>
inline int Queue(void (*kernel)(P), int blocks, int threads, const P& param,
                 cudaStream_t stream, KernelLauncher* via) {
  if (via != nullptr) {
    void* args[] = {const_cast<P*>(&param)};
    return via->Launch(reinterpret_cast<const void*>(kernel), blocks, threads, args, sizeof(P),
                       stream);
  }
  cudaLaunchAttribute early;
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  config.attrs = &early;
  config.numAttrs = 1;
  return static_cast<int>(cudaLaunchKernelEx(&config, kernel, param));
}

// Blocks for `work` units of 16 bytes: a unit per thread up to kMaxBlocks
// blocks (more blocks keep more stores in flight, fewer take part in fewer
// barriers).
inline int BlocksFor(size_t work) {
  const size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<int>(want < 1 ? 1 : (want > kMaxBlocks ? kMaxBlocks : want));
}

// Queues, with `blocks` blocks, the refusal a rank whose window was freed
// sends in place of a call into windows (ipc_exchange.cu).
int QueueRefusal(const IpcLaunch& p, int blocks, cudaStream_t stream, KernelLauncher* via);

// The low-latency kernels (ipc_low_latency.cu), for launches whose
// low_latency is not kFlagBarriers; LaunchAllReduce and LaunchExchange
// hand such calls on.
int LaunchLowLatencyAllReduce(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via);
int LaunchLowLatencyExchange(const IpcLaunch& p, ExchangeKind kind, cudaStream_t stream,
                             KernelLauncher* via);

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_IPC_DEVICE_H_
