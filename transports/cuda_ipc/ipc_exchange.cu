// The cuda_ipc collectives other than all_reduce (ipc_kernels.h's
// ExchangeKind), and the teardown barrier.
//
// One shape serves them all: every rank stores the chunks its peers need
// into their slots for it, every block meets its peers' same block at a
// flag barrier, then every rank copies (or reduces, in rank order) what it
// received from its own arena into its output. Large chunks go in steps,
// each with its own flag value, so the stores of one step travel while the
// previous step is copied or reduced. The barrier is complete
// even where data flows one way (broadcast, gather): a rank may reuse an
// arena half only after every peer finished the call that used it last.
#include <algorithm>

#include "transports/cuda_ipc/ipc_device.h"

namespace relay {
namespace cuda_ipc {
namespace {

// The part of a chunk's whole 16-byte units that step `step` moves: the
// same on every rank (a function of the chunk's size alone).
__device__ __forceinline__ Range StepUnits(size_t units, int step, int steps) {
  return Split(0, units, step, steps);
}

// Copies this block's share of step `step` of the [0, bytes) range of
// `src` to `dst`: its part of the step's whole 16-byte units, in units of
// R, and (block 0, last step) the bytes after them.
template <typename R>
__device__ __forceinline__ void CopyStep(char* dst, const char* src, size_t bytes, int step,
                                         int steps) {
  const size_t units = bytes / 16;
  const Range s = StepUnits(units, step, steps);
  const Range r = Split(s.begin, s.end, blockIdx.x, gridDim.x).Scaled(16 / sizeof(R));
  CopyUnits(reinterpret_cast<R*>(dst), 0, reinterpret_cast<const R*>(src), 0, r);
  if (blockIdx.x == 0 && step == steps - 1) {
    for (size_t i = units * 16 + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// The shape of every exchange, step by step: push step 0; then for each
// step, raise its flag, push the next step (posted stores that drain while
// this block works), wait for the peers' flags of this step, and take
// (copy or reduce) what it brought. `push(step)` and `take(step)` do this
// block's share.
template <typename Push, typename Take>
__device__ __forceinline__ void Exchange(const IpcLaunch& p, uint32_t epoch, Push&& push,
                                         Take&& take) {
  push(0);
  for (int step = 0; step < p.steps; ++step) {
    const uint32_t value = FlagValue(epoch, step);
    Raise(p, 0, blockIdx.x, value);
    if (step + 1 < p.steps) push(step + 1);
    if (!Await(p, 0, blockIdx.x, value)) return;
    take(step);
  }
}

// Copy kinds, in bytes: the launch's count and stride are bytes. R: the
// widest unit dividing this rank's buffer addresses and the stride.
template <typename R, ExchangeKind kKind>
__global__ void __launch_bounds__(kThreads) CopyKernel(IpcLaunch p) {
  using P = Plan<kKind>;
  void* own_arena = p.arenas[p.rank];
  const uint32_t epoch = BeginCall(own_arena, 0);
  const int half = epoch & 1;
  const char* in = static_cast<const char*>(p.input);
  char* out = static_cast<char*>(p.output);
  auto push = [&](int step) {
    for (int k = 1; k < p.size; ++k) {
      const int d = Peer(p, blockIdx.x, k);
      if (P::Pushes(p, d)) {
        CopyStep<R>(Slot(p, p.arenas[d], half, p.rank), in + P::InputChunk(p, d), p.count,
                    step, p.steps);
      }
    }
  };
  auto take = [&](int step) {
    for (int q = 0; q < p.size; ++q) {
      if (!P::Takes(p, q)) continue;
      char* dst = out + P::OutputChunk(p, q);
      const char* src = q == p.rank ? in + P::InputChunk(p, q) : Slot(p, own_arena, half, q);
      if (src != dst) CopyStep<R>(dst, src, p.count, step, p.steps);  // In place: there.
    }
  };
  Exchange(p, epoch, push, take);
  EndCall(p, 0, epoch);
}

// Reducing kinds: count and stride in elements. R is 16 bytes where this
// rank's buffers and stride allow, else one element; each block reduces
// its share of each step's whole 16-byte units, block 0 the elements after
// them at the last step.
template <typename T, typename R, IpcOp kOp, ExchangeKind kKind>
__global__ void __launch_bounds__(kThreads) ReduceKernel(IpcLaunch p) {
  using P = Plan<kKind>;
  using A = typename Acc<T>::type;
  using E = typename RawOf<sizeof(T)>::type;
  constexpr int kLanes = sizeof(R) / sizeof(T);
  constexpr size_t kPer16 = 16 / sizeof(T);
  void* own_arena = p.arenas[p.rank];
  const uint32_t epoch = BeginCall(own_arena, 0);
  const int half = epoch & 1;
  const T* in = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.output);
  const size_t bytes = p.count * sizeof(T);
  auto push = [&](int step) {
    for (int k = 1; k < p.size; ++k) {
      const int d = Peer(p, blockIdx.x, k);
      if (P::Pushes(p, d)) {
        CopyStep<R>(Slot(p, p.arenas[d], half, p.rank),
                    reinterpret_cast<const char*>(in + P::InputChunk(p, d)), bytes, step,
                    p.steps);
      }
    }
  };
  const T* own = in + P::InputChunk(p, p.rank);
  auto source = [&](int q) -> const T* {
    return q == p.rank ? own : reinterpret_cast<const T*>(Slot(p, own_arena, half, q));
  };
  auto take = [&](int step) {
    if (!P::Takes(p, p.rank)) return;
    const size_t units = p.count / kPer16;
    const Range s = StepUnits(units, step, p.steps);
    const Range r = Split(s.begin, s.end, blockIdx.x, gridDim.x).Scaled(16 / sizeof(R));
    union Unit {
      R raw;
      T e[kLanes];
    };
    for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
      A acc[kLanes];
      for (int q = 0; q < p.size; ++q) {
        Unit u;
        u.raw = __ldcg(reinterpret_cast<const R*>(source(q)) + i);
#pragma unroll
        for (int l = 0; l < kLanes; ++l) {
          acc[l] = q == 0 ? Widen(u.e[l]) : Apply<kOp>(acc[l], Widen(u.e[l]));
        }
      }
      Unit o;
#pragma unroll
      for (int l = 0; l < kLanes; ++l) o.e[l] = Narrow<T>(Finish<kOp>(acc[l], p.size));
      reinterpret_cast<R*>(out)[i] = o.raw;
    }
    if (blockIdx.x == 0 && step == p.steps - 1) {
      for (size_t i = units * kPer16 + threadIdx.x; i < p.count; i += blockDim.x) {
        A acc{};
        for (int q = 0; q < p.size; ++q) {
          union { E raw; T e; } u;
          u.raw = __ldcg(reinterpret_cast<const E*>(source(q)) + i);
          acc = q == 0 ? Widen(u.e) : Apply<kOp>(acc, Widen(u.e));
        }
        out[i] = Narrow<T>(Finish<kOp>(acc, p.size));
      }
    }
  };
  Exchange(p, epoch, push, take);
  EndCall(p, 0, epoch);
}

// all_gather into symmetric windows (LaunchDirectAllGather), in bytes. R:
// the widest unit dividing the input, every rank's output and the stride.
template <typename R>
__global__ void __launch_bounds__(kThreads) DirectAllGatherKernel(IpcLaunch p) {
  const uint32_t epoch = BeginCall(p.arenas[p.rank], 0);
  const int b = blockIdx.x;
  const char* in = static_cast<const char*>(p.input);
  const size_t at = static_cast<size_t>(p.rank) * p.stride;
  // Enter: the same block of every peer has started this call, so the
  // peer's stream is done with what its output held before.
  Raise(p, 0, b, FlagValue(epoch, 0));
  if (Await(p, 0, b, FlagValue(epoch, 0))) {
    if (const int refusing = RefusingPeer(p, epoch); refusing >= 0) {
      if (threadIdx.x == 0) Report(p, kErrorWindowFreed, refusing);
    } else {
      for (int k = 1; k < p.size; ++k) {
        const int d = Peer(p, b, k);
        CopyStep<R>(static_cast<char*>(p.peer_outputs[d]) + at, in, p.count, 0, 1);
      }
      char* own = static_cast<char*>(p.output) + at;
      if (own != in) CopyStep<R>(own, in, p.count, 0, 1);  // In place: there.
      // Leave: every peer's stores into this rank's output are done.
      Barrier(p, 0, b, epoch);
    }
  }
  EndCall(p, 0, epoch);
}

// A refusal (QueueRefusal): the call's epoch in every peer's refusal word
// for this rank, then the first flag every peer's same block waits for
// (the highest value of phase 0, so that a wait for any step passes), and
// nothing else (no wait: the communicator is being aborted).
__global__ void __launch_bounds__(kThreads) RefusalKernel(IpcLaunch p) {
  const uint32_t epoch = BeginCall(p.arenas[p.rank], 0);
  const int t = threadIdx.x;
  if (t < p.size && t != p.rank) {
    *reinterpret_cast<volatile uint32_t*>(Refusals(p.arenas[t]) + p.rank) = epoch;
  }
  Raise(p, 0, blockIdx.x, FlagValue(epoch, kMaxSteps - 1));
  EndCall(p, 0, epoch);
}

__global__ void TeardownKernel(IpcLaunch p) {
  const uint32_t epoch = BeginCall(p.arenas[p.rank], 2);
  Barrier(p, kTeardownPhase, 0, epoch);
  EndCall(p, 2, epoch);
}

bool Aligned(const void* ptr, size_t to) {
  return reinterpret_cast<uintptr_t>(ptr) % to == 0;
}

// The grid and the steps depend on the call alone (the same on every rank).
int Blocks(size_t chunk_bytes) { return BlocksFor(chunk_bytes / 16); }
// Calls of 64 MiB and more (a chunk times the ranks) go in 4 steps. On 2
// and 4 H200s steps lost 1-10% at 16-32 MB, where each step's flag round
// trip costs more than the overlap wins, and won 4-14% from 64 MB
// (docs/design/cuda-ipc-transport.md).
constexpr size_t kSteppedBytes = size_t{64} << 20;
constexpr int kExchangeSteps = 4;
static_assert(kExchangeSteps < kMaxSteps);
IpcLaunch WithSteps(IpcLaunch p, size_t chunk_bytes) {
  p.steps = chunk_bytes * static_cast<size_t>(p.size) >= kSteppedBytes ? kExchangeSteps : 1;
  return p;
}

template <typename R, ExchangeKind kKind>
int LaunchCopyAs(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  return Queue(CopyKernel<R, kKind>, Blocks(p.count), kThreads, WithSteps(p, p.count), stream,
               via);
}

template <ExchangeKind kKind>
int LaunchCopy(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  auto fits = [&](size_t w) {
    return Aligned(p.input, w) && Aligned(p.output, w) && p.stride % w == 0;
  };
  if (fits(16)) return LaunchCopyAs<uint4, kKind>(p, stream, via);
  if (fits(8)) return LaunchCopyAs<unsigned long long, kKind>(p, stream, via);
  if (fits(4)) return LaunchCopyAs<unsigned int, kKind>(p, stream, via);
  if (fits(2)) return LaunchCopyAs<unsigned short, kKind>(p, stream, via);
  return LaunchCopyAs<unsigned char, kKind>(p, stream, via);
}

template <typename T, IpcOp kOp, ExchangeKind kKind>
int LaunchReduceAs(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  using E = typename RawOf<sizeof(T)>::type;
  const int blocks = Blocks(p.count * sizeof(T));
  const IpcLaunch stepped = WithSteps(p, p.count * sizeof(T));
  if (Aligned(p.input, 16) && Aligned(p.output, 16) && (p.stride * sizeof(T)) % 16 == 0) {
    return Queue(ReduceKernel<T, uint4, kOp, kKind>, blocks, kThreads, stepped, stream, via);
  }
  return Queue(ReduceKernel<T, E, kOp, kKind>, blocks, kThreads, stepped, stream, via);
}

template <typename T, ExchangeKind kKind>
int LaunchReduceOp(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.op) {
    case IpcOp::kSum: return LaunchReduceAs<T, IpcOp::kSum, kKind>(p, stream, via);
    case IpcOp::kProd: return LaunchReduceAs<T, IpcOp::kProd, kKind>(p, stream, via);
    case IpcOp::kMin: return LaunchReduceAs<T, IpcOp::kMin, kKind>(p, stream, via);
    case IpcOp::kMax: return LaunchReduceAs<T, IpcOp::kMax, kKind>(p, stream, via);
    case IpcOp::kAvg: return LaunchReduceAs<T, IpcOp::kAvg, kKind>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <ExchangeKind kKind>
int LaunchReduce(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.type) {
    case IpcType::kInt8: return LaunchReduceOp<int8_t, kKind>(p, stream, via);
    case IpcType::kUint8: return LaunchReduceOp<uint8_t, kKind>(p, stream, via);
    case IpcType::kInt32: return LaunchReduceOp<int32_t, kKind>(p, stream, via);
    case IpcType::kUint32: return LaunchReduceOp<uint32_t, kKind>(p, stream, via);
    case IpcType::kInt64: return LaunchReduceOp<int64_t, kKind>(p, stream, via);
    case IpcType::kUint64: return LaunchReduceOp<uint64_t, kKind>(p, stream, via);
    case IpcType::kFloat16: return LaunchReduceOp<__half, kKind>(p, stream, via);
    case IpcType::kBfloat16: return LaunchReduceOp<__nv_bfloat16, kKind>(p, stream, via);
    case IpcType::kFloat32: return LaunchReduceOp<float, kKind>(p, stream, via);
    case IpcType::kFloat64: return LaunchReduceOp<double, kKind>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int LaunchExchange(const IpcLaunch& p, ExchangeKind kind, void* stream_ptr,
                   KernelLauncher* via) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.low_latency == kLowLatencyWords) return LaunchLowLatencyExchange(p, kind, stream, via);
  switch (kind) {
    case ExchangeKind::kAllGather: return LaunchCopy<ExchangeKind::kAllGather>(p, stream, via);
    case ExchangeKind::kBroadcast: return LaunchCopy<ExchangeKind::kBroadcast>(p, stream, via);
    case ExchangeKind::kAllToAll: return LaunchCopy<ExchangeKind::kAllToAll>(p, stream, via);
    case ExchangeKind::kGather: return LaunchCopy<ExchangeKind::kGather>(p, stream, via);
    case ExchangeKind::kScatter: return LaunchCopy<ExchangeKind::kScatter>(p, stream, via);
    case ExchangeKind::kReduceScatter:
      return LaunchReduce<ExchangeKind::kReduceScatter>(p, stream, via);
    case ExchangeKind::kReduce: return LaunchReduce<ExchangeKind::kReduce>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int LaunchDirectAllGather(const IpcLaunch& p, void* stream_ptr, KernelLauncher* via) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  uintptr_t bits = reinterpret_cast<uintptr_t>(p.input) | p.stride;
  for (int r = 0; r < p.size; ++r) bits |= reinterpret_cast<uintptr_t>(p.peer_outputs[r]);
  const int blocks = Blocks(p.count);
  if (bits % 16 == 0) return Queue(DirectAllGatherKernel<uint4>, blocks, kThreads, p, stream, via);
  if (bits % 8 == 0) {
    return Queue(DirectAllGatherKernel<unsigned long long>, blocks, kThreads, p, stream, via);
  }
  if (bits % 4 == 0) {
    return Queue(DirectAllGatherKernel<unsigned int>, blocks, kThreads, p, stream, via);
  }
  if (bits % 2 == 0) {
    return Queue(DirectAllGatherKernel<unsigned short>, blocks, kThreads, p, stream, via);
  }
  return Queue(DirectAllGatherKernel<unsigned char>, blocks, kThreads, p, stream, via);
}

int QueueRefusal(const IpcLaunch& p, int blocks, cudaStream_t stream, KernelLauncher* via) {
  return Queue(RefusalKernel, blocks, kThreads, p, stream, via);
}

int LaunchRefusedDirectAllGather(const IpcLaunch& p, void* stream, KernelLauncher* via) {
  return QueueRefusal(p, Blocks(p.count), static_cast<cudaStream_t>(stream), via);
}

int LaunchTeardownBarrier(const IpcLaunch& p, void* stream) {
  TeardownKernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return static_cast<int>(cudaGetLastError());
}

int LoadTeardownKernel() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(&attributes, TeardownKernel));
}

bool KernelsBuilt() { return true; }

}  // namespace cuda_ipc
}  // namespace relay
