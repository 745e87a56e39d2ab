// The cuda_ipc point-to-point kernel (ipc_kernels.h's P2PLaunch): a batch
// of sends and receives, kP2PParts blocks per op.
//
// Chunks of a (source, destination) pair are numbered from the start of
// the transport, in the order both sides post them; the counters live in
// each side's own arena, so a CUDA graph replays a batch correctly. Chunk
// n uses the channel's slot n % 2: the sender waits until the receiver
// freed chunk n - 2 there, stores its part and the message size, and
// raises the part's ready flag to n; the receiver waits for it, copies the
// part out and raises freed to n in the sender's arena.
#include "transports/cuda_ipc/ipc_device.h"

namespace relay {
namespace cuda_ipc {
namespace {

__device__ __forceinline__ uint32_t* P2PWords(void* arena) {
  return reinterpret_cast<uint32_t*>(static_cast<char*>(arena) + ArenaLayout::kP2POffset);
}
__device__ __forceinline__ size_t FlagIndex(int rank, int slot, int part) {
  return (static_cast<size_t>(rank) * 2 + slot) * kP2PParts + part;
}
__device__ __forceinline__ char* Channel(void* arena, int source, int slot) {
  return static_cast<char*>(arena) + ArenaLayout::kP2PChannelOffset +
         (static_cast<size_t>(source) * 2 + slot) * kP2PChunkBytes;
}
__device__ __forceinline__ size_t Chunks(size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kP2PChunkBytes - 1) / kP2PChunkBytes;
}

// Copies part `part` of [0, bytes) from src to dst: the part's share of
// the whole 16-byte units, in R units, and (part 0) the bytes after them.
template <typename R>
__device__ __forceinline__ void CopyPart(char* dst, const char* src, size_t bytes, int part) {
  const size_t units = bytes / 16;
  const Range r = Split(0, units, part, kP2PParts).Scaled(16 / sizeof(R));
  CopyUnits(reinterpret_cast<R*>(dst), 0, reinterpret_cast<const R*>(src), 0, r);
  if (part == 0) {
    for (size_t i = units * 16 + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// R: the widest unit that divides every op's buffer address (chunks are
// whole 16-byte units, so chunk offsets keep the alignment).
template <typename R>
__global__ void __launch_bounds__(kThreads) P2PKernel(P2PLaunch l) {
  AfterPredecessors();
  const IpcLaunch& p = l.base;
  const int o = blockIdx.x / kP2PParts;
  const int part = blockIdx.x % kP2PParts;
  const P2POpLaunch& op = l.op[o];
  void* own = p.arenas[p.rank];
  void* peer_arena = p.arenas[op.peer];
  uint32_t* words = P2PWords(own);
  uint32_t* peer_words = P2PWords(peer_arena);
  // This op's first chunk: the pair's count so far, plus the chunks of the
  // batch's earlier ops between the same pair in the same direction.
  const volatile uint32_t* counters = words;
  uint32_t counter = op.send ? counters[ArenaLayout::kP2PSentWord + op.peer]
                             : counters[ArenaLayout::kP2PReceivedWord + op.peer];
  for (int j = 0; j < o; ++j) {
    if (l.op[j].peer == op.peer && l.op[j].send == op.send) {
      counter += static_cast<uint32_t>(Chunks(l.op[j].bytes));
    }
  }
  __shared__ int s_ok;
  if (threadIdx.x == 0) s_ok = 1;
  __syncthreads();
  const size_t chunks = Chunks(op.bytes);
  // s_ok is read only right after a __syncthreads that follows its last
  // write, so every thread of the block leaves the loop at the same chunk.
  for (size_t c = 0; c < chunks; ++c) {
    const uint32_t n = counter + static_cast<uint32_t>(c) + 1;
    const int slot = n & 1;
    const size_t offset = c * kP2PChunkBytes;
    const size_t bytes = op.bytes == 0 ? 0 : min(kP2PChunkBytes, op.bytes - offset);
    if (op.send) {
      const size_t f = FlagIndex(op.peer, slot, part);
      if (threadIdx.x == 0 &&
          !WaitAtLeast(p, words + ArenaLayout::kP2PFreedWord + f, n - 2, op.peer)) {
        s_ok = 0;
      }
      __syncthreads();
      if (!s_ok) break;
      CopyPart<R>(Channel(peer_arena, p.rank, slot),
                  static_cast<const char*>(op.data) + offset, bytes, part);
      const size_t g = FlagIndex(p.rank, slot, part);
      if (threadIdx.x == 0) {
        reinterpret_cast<volatile unsigned long long*>(
            peer_words + ArenaLayout::kP2PSizeWord)[g] = op.bytes;
      }
      __syncthreads();  // Then one release covers the block's stores (Raise).
      if (threadIdx.x == 0) StoreRelease(peer_words + ArenaLayout::kP2PReadyWord + g, n);
    } else {
      const size_t f = FlagIndex(op.peer, slot, part);
      if (threadIdx.x == 0) {
        if (!WaitAtLeast(p, words + ArenaLayout::kP2PReadyWord + f, n, op.peer)) {
          s_ok = 0;
        } else if (reinterpret_cast<volatile unsigned long long*>(
                       words + ArenaLayout::kP2PSizeWord)[f] != op.bytes) {
          Report(p, kErrorSizeMismatch, op.peer);
          s_ok = 0;
        }
      }
      __syncthreads();
      if (!s_ok) break;
      CopyPart<R>(static_cast<char*>(op.data) + offset, Channel(own, op.peer, slot), bytes,
                  part);
      // Every thread's reads of the slot are done before the sender may
      // overwrite it.
      __syncthreads();
      if (threadIdx.x == 0) {
        StoreRelease(peer_words + ArenaLayout::kP2PFreedWord + FlagIndex(p.rank, slot, part),
                     n);
      }
    }
  }
  // The last block of the batch to finish advances the pair counters (every
  // block read them when it started).
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(words + ArenaLayout::kP2PDoneWord, 1u) == gridDim.x - 1) {
      for (int j = 0; j < l.ops; ++j) {
        const size_t w = (l.op[j].send ? ArenaLayout::kP2PSentWord
                                       : ArenaLayout::kP2PReceivedWord) +
                         l.op[j].peer;
        words[w] += static_cast<uint32_t>(Chunks(l.op[j].bytes));
      }
      words[ArenaLayout::kP2PDoneWord] = 0;
      __threadfence();
    }
  }
}

template <typename R>
int LaunchAs(const P2PLaunch& l, cudaStream_t stream, KernelLauncher* via) {
  return Queue(P2PKernel<R>, l.ops * kP2PParts, kThreads, l, stream, via);
}

}  // namespace

int LaunchP2P(const P2PLaunch& l, void* stream_ptr, KernelLauncher* via) {
  if (l.ops <= 0 || l.ops > kMaxP2POps) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  uintptr_t bits = 0;
  for (int j = 0; j < l.ops; ++j) bits |= reinterpret_cast<uintptr_t>(l.op[j].data);
  if (bits % 16 == 0) return LaunchAs<uint4>(l, stream, via);
  if (bits % 8 == 0) return LaunchAs<unsigned long long>(l, stream, via);
  if (bits % 4 == 0) return LaunchAs<unsigned int>(l, stream, via);
  return LaunchAs<unsigned char>(l, stream, via);
}

}  // namespace cuda_ipc
}  // namespace relay
