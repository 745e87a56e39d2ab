// The cuda_ipc all_reduce (ipc_kernels.h): one-shot and two-shot, over
// arenas that every rank maps (the low-latency path is in
// ipc_low_latency.cu).
//
// Each block owns the same share of the data on every rank, so ranks
// synchronise block by block through per-block flags and no grid-wide
// barrier is needed. Every rank adds the contributions in rank order, so
// every rank gets the same bits.
#include "transports/cuda_ipc/ipc_device.h"

namespace relay {
namespace cuda_ipc {
namespace {

// R: the unit a thread moves (16 bytes where this rank's buffers allow,
// else one element). Blocks split the data in 16-byte units on every rank
// whatever R is; the elements after the last whole 16-byte unit go through
// block 0, one-shot, in each contribution slot's tail.
template <typename T, typename R, IpcOp kOp>
__global__ void __launch_bounds__(kThreads) AllReduceKernel(IpcLaunch p) {
  using A = typename Acc<T>::type;
  using E = typename RawOf<sizeof(T)>::type;
  constexpr int kLanes = sizeof(R) / sizeof(T);
  constexpr size_t kScale = 16 / sizeof(R);  // R units per 16-byte unit.
  constexpr size_t kPer16 = 16 / sizeof(T);  // Elements per 16-byte unit.
  const int b = blockIdx.x;
  const int blocks = gridDim.x;
  void* own_arena = p.arenas[p.rank];
  const uint32_t epoch = BeginCall(own_arena, 0);
  const int half = epoch & 1;
  const int n = p.size;
  const size_t units = p.count / kPer16;  // 16-byte units in the body.
  const size_t tail_begin = units * kPer16;
  const size_t tail = p.count - tail_begin;
  const R* in = static_cast<const R*>(p.input);
  R* out = static_cast<R*>(p.output);
  const size_t tail_offset = p.slot_bytes - ArenaLayout::kTailBytes;
  // Two-shot into symmetric windows: reduced slices go straight into every
  // rank's output, with no result slots and no copy out of them.
  const bool into_windows = p.two_shot && p.peer_outputs[0] != nullptr;

  // The tail, one-shot: pushed by block 0 with the body, reduced after the
  // first barrier.
  auto push_tail = [&] {
    const E* src = static_cast<const E*>(p.input) + tail_begin;
    for (int k = 1; k < n; ++k) {
      const int s = Peer(p, b, k);
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
  // Ranges and bases in R units.
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
            if (s == p.rank) continue;
            if (into_windows) {
              static_cast<R*>(p.peer_outputs[s])[dst_base + i] = o.raw;
            } else {
              reinterpret_cast<R*>(Slot(p, p.arenas[s], half, n + p.rank))[i] = o.raw;
            }
          }
        }
      }
    }
  };

  bool ok = true;
  if (!p.two_shot) {
    // Every rank pushes its whole contribution to every peer and reduces
    // locally.
    const Range r = Split(0, units, b, blocks).Scaled(kScale);
    for (int k = 1; k < n; ++k) {
      const int s = Peer(p, b, k);
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
    // copies the other slices' results out of its own arena. Into windows,
    // rank s stores the result straight into every peer's output: the
    // first barrier tells it each peer has started the call (its stream is
    // done with the output), the second tells each peer its output is
    // whole.
    auto part_of = [&](const Range& slice) {
      return Split(0, slice.end - slice.begin, b, blocks).Scaled(kScale);
    };
    for (int k = 1; k < n; ++k) {
      const int s = Peer(p, b, k);
      const Range slice = Split(0, units, s, n);
      CopyUnits(reinterpret_cast<R*>(Slot(p, p.arenas[s], half, p.rank)), 0, in,
                slice.begin * kScale, part_of(slice));
    }
    if (b == 0) push_tail();
    ok = Barrier(p, 0, b, epoch);
    if (ok && into_windows) {
      if (const int refusing = RefusingPeer(p, epoch); refusing >= 0) {
        if (threadIdx.x == 0) Report(p, kErrorWindowFreed, refusing);
        ok = false;
      }
    }
    if (ok) {
      const Range slice = Split(0, units, p.rank, n);
      reduce(part_of(slice), in, slice.begin * kScale, out, slice.begin * kScale, true);
      if (b == 0) reduce_tail();
      ok = Barrier(p, 1, b, epoch);
    }
    if (ok && !into_windows) {
      for (int s = 0; s < n; ++s) {
        if (s == p.rank) continue;
        const Range slice = Split(0, units, s, n);
        CopyUnits(out, slice.begin * kScale,
                  reinterpret_cast<const R*>(Slot(p, own_arena, half, n + s)), 0,
                  part_of(slice));
      }
    }
  }
  EndCall(p, 0, epoch);
}

// The grid depends on the call alone (the same on every rank).
int Blocks(const IpcLaunch& p, size_t esize) {
  const size_t units = p.count * esize / 16;
  return BlocksFor(p.two_shot ? units / p.size : units);
}

template <typename T, IpcOp kOp>
int Launch(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  using E = typename RawOf<sizeof(T)>::type;
  uintptr_t bits = reinterpret_cast<uintptr_t>(p.input) | reinterpret_cast<uintptr_t>(p.output);
  for (int r = 0; r < p.size; ++r) bits |= reinterpret_cast<uintptr_t>(p.peer_outputs[r]);
  const bool aligned = bits % 16 == 0;
  const int blocks = Blocks(p, sizeof(T));
  return aligned ? Queue(AllReduceKernel<T, uint4, kOp>, blocks, kThreads, p, stream, via)
                 : Queue(AllReduceKernel<T, E, kOp>, blocks, kThreads, p, stream, via);
}

template <typename T>
int LaunchOp(const IpcLaunch& p, cudaStream_t stream, KernelLauncher* via) {
  switch (p.op) {
    case IpcOp::kSum: return Launch<T, IpcOp::kSum>(p, stream, via);
    case IpcOp::kProd: return Launch<T, IpcOp::kProd>(p, stream, via);
    case IpcOp::kMin: return Launch<T, IpcOp::kMin>(p, stream, via);
    case IpcOp::kMax: return Launch<T, IpcOp::kMax>(p, stream, via);
    case IpcOp::kAvg: return Launch<T, IpcOp::kAvg>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int LaunchRefusedAllReduce(const IpcLaunch& p, void* stream, KernelLauncher* via) {
  return QueueRefusal(p, Blocks(p, IpcTypeBytes(p.type)), static_cast<cudaStream_t>(stream), via);
}

int LaunchAllReduce(const IpcLaunch& p, void* stream_ptr, KernelLauncher* via) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (p.low_latency != kFlagBarriers) return LaunchLowLatencyAllReduce(p, stream, via);
  switch (p.type) {
    case IpcType::kInt8: return LaunchOp<int8_t>(p, stream, via);
    case IpcType::kUint8: return LaunchOp<uint8_t>(p, stream, via);
    case IpcType::kInt32: return LaunchOp<int32_t>(p, stream, via);
    case IpcType::kUint32: return LaunchOp<uint32_t>(p, stream, via);
    case IpcType::kInt64: return LaunchOp<int64_t>(p, stream, via);
    case IpcType::kUint64: return LaunchOp<uint64_t>(p, stream, via);
    case IpcType::kFloat16: return LaunchOp<__half>(p, stream, via);
    case IpcType::kBfloat16: return LaunchOp<__nv_bfloat16>(p, stream, via);
    case IpcType::kFloat32: return LaunchOp<float>(p, stream, via);
    case IpcType::kFloat64: return LaunchOp<double>(p, stream, via);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace cuda_ipc
}  // namespace relay
