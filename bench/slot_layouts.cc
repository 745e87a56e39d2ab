// bench/slot_layouts: the floor under the shm algorithm's small exchanges,
// and how a slot's layout and its reader change it. Two threads pinned to
// two cores exchange B bytes per round through double-buffered slots, as
// runtime/slot_exchange.h does, spinning, with nothing else in the loop.
// The modes (rows):
//   header       one stamp in the slot's first line, the data after it
//                (relay's layout: a 24-byte header, so up to 40 B share the
//                stamp's line); the reader sees the stamp, then copies the
//                peer's data out;
//   lines        a stamp at the end of every line, 56 B of data in each
//                (the idea of NCCL's LL protocols): the reader polls every
//                line's stamp at once, so the lines travel together;
//   reduce-slot  header, and the reader sums the two slots into its output
//                with relay's float32 kernel (collectives/reduce.h), its
//                own contribution read back from its own slot;
//   reduce-send  the same, its own contribution read from the buffer it
//                copied into its slot (as SlotExchange hands a finish
//                its own contribution, runtime/slot_exchange.h);
//   reduce-claim reduce-send, and once the peer's stamp is seen the rank
//                asks for its next slot's first line back, writable
//                (PREFETCHW, as SlotExchange::ClaimSlot): the peer read it
//                last, so the next write would wait for it.
// WORK stands in for a call path: that many dependent steps of local
// arithmetic (about a nanosecond each) after each exchange, before the
// next slot is written (0, the default: the bare floor).
// Prints ns per exchange for each mode and size, alternating the modes
// round by round (the build VMs change speed between minutes).
//
//   bazel run -c opt //bench:slot_layouts -- [ROUNDS] [EXCHANGES] [WORK]
//
// On the 2-core build VM (2026-11-27, bench/results/2026-11-27-small-call-
// copies.md) the stamp-per-line layout lost at every size past one line
// (the reader's polls of every line pull them back from the writer while
// it fills them), and reduce-slot cost more than reduce-send from 64 B on
// (a rank's own slot lines are still on their way back from the peer that
// read them, and reading them waits for the copy's stores). reduce-claim
// tied at 8 B and lost from 40 B on with WORK 150
// (bench/results/2026-11-27-session8-small-experiments.md).
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "collectives/reduce.h"
#include "runtime/data_type.h"

namespace {

constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 24;  // As SlotExchange's SlotHeader.
constexpr size_t kLineData = kLine - sizeof(uint64_t);
constexpr size_t kMaxBytes = 1024;
constexpr size_t kSlotBytes = 2 * kMaxBytes;  // Room for either layout.

enum class Mode { kHeader, kLines, kReduceSlot, kReduceSend, kReduceClaim };
constexpr Mode kModes[] = {Mode::kHeader, Mode::kLines, Mode::kReduceSlot,
                           Mode::kReduceSend, Mode::kReduceClaim};
constexpr int kModeCount = sizeof(kModes) / sizeof(kModes[0]);
constexpr const char* kModeNames[] = {"header", "lines", "reduce-slot",
                                      "reduce-send", "reduce-claim"};

struct alignas(kLine) Slot {
  unsigned char bytes[kSlotBytes];
};
Slot slots[2][2];  // [rank][parity]

std::atomic<uint64_t>& StampAt(Slot& slot, size_t offset) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(slot.bytes + offset);
}

void Pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Rank `rank`'s side of `exchanges` exchanges of `bytes` bytes; ns each.
double Exchanges(int rank, Mode mode, size_t bytes, uint64_t first,
                 int exchanges, int work) {
  Pin(rank);
  const relay::ReduceKernel sum =
      relay::GetReduceFn(relay::DataType::kFloat32, relay::ReduceOp::kSum);
  alignas(kLine) unsigned char src[kMaxBytes];
  alignas(kLine) unsigned char dst[kMaxBytes];
  for (size_t i = 0; i < kMaxBytes; i += sizeof(float)) {
    const float v = static_cast<float>(i + rank);
    std::memcpy(src + i, &v, sizeof(v));
  }
  const size_t lines = (bytes + kLineData - 1) / kLineData;
  unsigned seen = 0;
  uint64_t chain = static_cast<uint64_t>(rank) + 1;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t k = first; k < first + static_cast<uint64_t>(exchanges); ++k) {
    Slot& mine = slots[rank][k & 1];
    Slot& peer = slots[1 - rank][k & 1];
    if (mode != Mode::kLines) {
      std::memcpy(mine.bytes + kHeaderBytes, src, bytes);
      StampAt(mine, 0).store(k, std::memory_order_release);
      while (StampAt(peer, 0).load(std::memory_order_acquire) != k) {
      }
      if (mode == Mode::kReduceClaim) {
        const Slot& next = slots[rank][(k + 1) & 1];
#if defined(__x86_64__)
        // PREFETCHW itself: without -mprfchw GCC makes
        // __builtin_prefetch(p, 1) a read prefetch.
        asm volatile("prefetchw %0" : : "m"(next.bytes[0]));
#else
        __builtin_prefetch(next.bytes, 1);
#endif
      }
      const unsigned char* theirs = peer.bytes + kHeaderBytes;
      const unsigned char* own =
          mode == Mode::kReduceSlot ? mine.bytes + kHeaderBytes : src;
      if (mode == Mode::kHeader) {
        std::memcpy(dst, theirs, bytes);
      } else if (rank == 0) {  // In rank order, as relay reduces.
        sum(own, theirs, dst, bytes / sizeof(float));
      } else {
        sum(theirs, own, dst, bytes / sizeof(float));
      }
    } else {
      for (size_t l = 0; l < lines; ++l) {
        const size_t n = std::min(kLineData, bytes - l * kLineData);
        std::memcpy(mine.bytes + l * kLine, src + l * kLineData, n);
        StampAt(mine, l * kLine + kLineData).store(k,
                                                    std::memory_order_release);
      }
      for (bool all = false; !all;) {
        all = true;
        for (size_t l = 0; l < lines; ++l) {
          all &= StampAt(peer, l * kLine + kLineData)
                     .load(std::memory_order_acquire) == k;
        }
      }
      for (size_t l = 0; l < lines; ++l) {
        const size_t n = std::min(kLineData, bytes - l * kLineData);
        std::memcpy(dst + l * kLineData, peer.bytes + l * kLine, n);
      }
    }
    seen += dst[bytes - 1];
    for (int w = 0; w < work; ++w) {
      chain = chain * 6364136223846793005u + 1442695040888963407u;
      asm volatile("" : "+r"(chain));
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  if (seen == 1 || chain == 1) std::printf(" ");  // Keeps the reads.
  return ns / exchanges;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  const int exchanges = argc > 2 ? std::atoi(argv[2]) : 500000;
  const int work = argc > 3 ? std::atoi(argv[3]) : 0;
  if (rounds < 1 || rounds > 64 || exchanges < 1 || work < 0) {
    std::fprintf(stderr,
                 "usage: slot_layouts [ROUNDS (1-64)] [EXCHANGES (>= 1)] "
                 "[WORK (>= 0)]\n");
    return 2;
  }
  const size_t sizes[] = {8, 40, 48, 64, 256, 1024};
  std::printf("# ns per exchange between two pinned threads (round by "
              "round), %d steps of work between exchanges\n", work);
  std::printf("# %6s %11s", "bytes", "mode");
  for (int r = 0; r < rounds; ++r) std::printf(" %8s%d", "round", r + 1);
  std::printf("\n");
  // Stamps only grow: each run starts past every earlier one, on slots
  // cleared of the other layout's stamps.
  uint64_t next = 1;
  for (size_t bytes : sizes) {
    double ns[kModeCount][64] = {};
    for (int r = 0; r < rounds; ++r) {
      for (Mode mode : kModes) {
        std::memset(slots, 0, sizeof(slots));
        double other = 0;
        std::thread peer([&] {
          other = Exchanges(1, mode, bytes, next, exchanges, work);
        });
        const double here = Exchanges(0, mode, bytes, next, exchanges, work);
        peer.join();
        next += static_cast<uint64_t>(exchanges);
        ns[static_cast<int>(mode)][r] = std::max(here, other);
      }
    }
    for (int l = 0; l < kModeCount; ++l) {
      std::printf("  %6zu %11s", bytes, kModeNames[l]);
      for (int r = 0; r < rounds; ++r) std::printf(" %9.1f", ns[l][r]);
      std::printf("\n");
    }
  }
  return 0;
}
