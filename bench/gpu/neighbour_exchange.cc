// bench/gpu/neighbour_exchange: how fast one ring step moves over raw NCCL
// on one communicator against one communicator per neighbour pair. Each
// GPU sends M bytes to the next and receives M from the previous, which is
// what every step of a ring all_reduce does with M = S / GPUs (per lane).
//
// Why: NCCL gives one send at most (point-to-point channels) / (ranks)
// channels, so on 4 GPUs a communicator of 64 channels sends on 16 and
// relay's ring reached 0.65-0.76 of native all_reduce (2 GPUs, where a
// send gets 32: 0.90-0.96; bench/results/2026-11-26-nccl-p2p-channels-h100).
// A communicator per ring edge has 2 ranks, so its send gets all of its
// channels; but the step's send and receive then sit on two communicators,
// and run at once only on two streams.
//
// One process, one thread per GPU (ncclCommInitAll). Variants:
//   world      send+recv in one group on the world communicator (NCCL's
//              channels)
//   p2p64      the same on a split with minCTAs = maxCTAs = 64 (what
//              relay's NCCL transport uses for point-to-point)
//   pairs      send on the communicator of edge (r, r+1) on one stream,
//              receive on that of edge (r-1, r) on another; the streams
//              join after every step, as a ring's reduction would make them
//   native     ncclAllReduce of S = M x GPUs on the world communicator, as
//              busbw (= a ring step's rate where the ring runs at native
//              speed)
// Columns: M, then GB/s per variant (M / time per step; native: busbw).
//
// A second table runs the steps as relay's stream executor queues a ring
// (collectives/stream_executor.h), to tell the ring's own costs from the
// communicators': 2 lanes, each on its own stream; per step and lane, an
// event from the lane's stream orders the exchange on a transport stream
// (p2p64 on it; pairs forked from it onto their two streams and joined
// back), an event from there orders the lane after it, and then the lane
// reduces what came in into what it sends next (relay's device reduction,
// float32 sum, 16 blocks: RELAY_STREAM_REDUCE_BLOCKS' default), or not
// (variants "-chain": the events alone). GB/s = M / (time / (steps x 2)).
// "both-ways" is relay's ring going both ways round (collectives/ring.h):
// each step sends M/2 to each neighbour and receives M/2 from each, in one
// group on p2p64, and reduces M. "both-lanes" is the same with a
// communicator (a second p2p64 split) and a transport stream per lane, so
// one lane's exchange can run beside the other's instead of after it: two
// kernels of at most 64 channels each fit an H100's 132 multiprocessors.
// Even GPU counts only (the edges of an even ring take two colours).
// A third table gives the host's time to queue each ring-like step.
// A fourth emulates an all-pairs all_reduce of S = M x GPUs, queued as the
// stream executor would: 2 lanes of S/2; per lane, one group sends block p
// of the lane's segment to every peer p and receives theirs (reduce-
// scatter in one step), the lane stream reduces the GPUs - 1 incoming
// blocks into its own, and a second group sends that block to every peer
// and receives theirs (all-gather in one step). Two steps instead of the
// ring's 2 (GPUs - 1), and messages of S / (2 x GPUs) to each peer at
// once. Columns: its busbw (2 (GPUs-1)/GPUs x S / time), the native
// all_reduce's at the same S (from the first table), and their ratio.
// NEIGHBOUR_EXCHANGE_ONE_GROUP=1 puts the pairs variants' send and
// receive in one NCCL group across their two communicators.
// Usage (GPU host): neighbour_exchange [ITERS] [MIN_MB] [MAX_MB]
//   [REDUCE_BLOCKS] (default 20, 8, 256, 16)
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/thread_barrier.h"
#include "collectives/device_reduce.h"

namespace {

#define CHECK(x)                                                      \
  do {                                                                \
    if (!(x)) {                                                       \
      std::fprintf(stderr, "neighbour_exchange: %s failed (line %d)\n", \
                   #x, __LINE__);                                     \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

enum Variant { kWorld, kP2p64, kPairs, kNative, kVariants };
const char* const kNames[kVariants] = {"world", "p2p64", "pairs", "native"};

// The ring-like table's variants.
enum RingVariant {
  kP2p64Chain,
  kPairsChain,
  kP2p64Ring,
  kPairsRing,
  kBothWays,
  kBothWaysLanes,
  kRingVariants
};
const char* const kRingNames[kRingVariants] = {"p2p64-chain", "pairs-chain", "p2p64-ring",
                                               "pairs-ring",  "both-ways",   "both-lanes"};
constexpr int kLanes = 2;

ncclConfig_t Channels64(const char* name) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 64;
  config.maxCTAs = 64;
  config.commName = name;
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20;
  const size_t min_mb = argc > 2 ? std::atol(argv[2]) : 8;
  const size_t max_mb = argc > 3 ? std::atol(argv[3]) : 256;
  const int reduce_blocks = argc > 4 ? std::atoi(argv[4]) : 16;
  CHECK(iters > 0 && min_mb > 0 && max_mb >= min_mb && reduce_blocks >= 0);
  int gpus = 0;
  CHECK(cudaGetDeviceCount(&gpus) == cudaSuccess);
  if (gpus < 2 || gpus % 2 != 0) {
    std::fprintf(stderr, "neighbour_exchange: needs an even number of GPUs, "
                         "found %d\n", gpus);
    return 2;
  }
  std::vector<int> devs(gpus);
  for (int i = 0; i < gpus; ++i) devs[i] = i;
  std::vector<ncclComm_t> world(gpus);
  CHECK(ncclCommInitAll(world.data(), gpus, devs.data()) == ncclSuccess);

  relay::bench::ThreadBarrier barrier(gpus);
  std::vector<size_t> sizes;
  for (size_t mb = min_mb; mb <= max_mb; mb *= 2) sizes.push_back(mb << 20);
  // rate[variant][size], measured on GPU 0's thread.
  std::vector<std::vector<double>> rate(kVariants, std::vector<double>(sizes.size()));
  std::vector<std::vector<double>> ring_rate(kRingVariants,
                                             std::vector<double>(sizes.size()));
  // The all-pairs emulation's busbw per size (GPU 0's thread).
  std::vector<double> allpairs_rate(sizes.size());
  // Host microseconds to queue one step of one lane, per ring variant.
  std::vector<std::vector<double>> ring_issue(kRingVariants,
                                              std::vector<double>(sizes.size()));
  // NEIGHBOUR_EXCHANGE_ONE_GROUP=1: the pairs variants put their send and
  // receive, on two communicators and two streams, in one NCCL group
  // instead of two calls (one ncclGroupEnd a step, not two). Whether NCCL
  // then still runs the two kernels at once is the question: if it
  // serialises them, every rank's send waits for a receive queued behind
  // it and the run hangs (run it under `timeout`).
  const char* group_env = std::getenv("NEIGHBOUR_EXCHANGE_ONE_GROUP");
  const bool one_group = group_env != nullptr && group_env[0] == '1';
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      CHECK(cudaSetDevice(r) == cudaSuccess);
      const int next = (r + 1) % gpus, prev = (r + gpus - 1) % gpus;
      ncclComm_t p2p64 = nullptr, p2p64b = nullptr;
      ncclConfig_t config = Channels64("p2p64");
      CHECK(ncclCommSplit(world[r], 0, r, &p2p64, &config) == ncclSuccess);
      ncclConfig_t config_b = Channels64("p2p64b");
      CHECK(ncclCommSplit(world[r], 0, r, &p2p64b, &config_b) == ncclSuccess);
      // Edge e joins e and e+1 and has colour e % 2. In split c, this rank
      // is the lower end of edge r (if r % 2 == c) or the upper end of edge
      // r-1; key 0 for the lower end, so the peer is rank 1 - key.
      ncclComm_t pair[2];
      int key_in[2];
      for (int c = 0; c < 2; ++c) {
        const bool lower = r % 2 == c;
        const int edge = lower ? r : prev;
        key_in[c] = lower ? 0 : 1;
        ncclConfig_t pc = Channels64("edge");
        CHECK(ncclCommSplit(world[r], edge, key_in[c], &pair[c], &pc) == ncclSuccess);
      }
      // Send on the edge where this rank is the lower end, receive on the
      // other.
      const int send_c = r % 2, recv_c = 1 - send_c;
      cudaStream_t s1, s2;
      CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
      CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
      // NCCL connects a peer's channels in the call that first uses them,
      // and that waits for the peer to connect too. A first ring step of
      // sends alone would wait around the ring: rank r's send on edge r
      // for rank r+1, which is connecting its own send on edge r+1. So
      // every edge is connected first, both ways, colour by colour.
      char* token = nullptr;
      CHECK(cudaMalloc(&token, 2) == cudaSuccess);
      for (int c = 0; c < 2; ++c) {
        CHECK(ncclGroupStart() == ncclSuccess);
        CHECK(ncclSend(token, 1, ncclChar, 1 - key_in[c], pair[c], s1) == ncclSuccess);
        CHECK(ncclRecv(token + 1, 1, ncclChar, 1 - key_in[c], pair[c], s1) == ncclSuccess);
        CHECK(ncclGroupEnd() == ncclSuccess);
      }
      CHECK(cudaStreamSynchronize(s1) == cudaSuccess);
      if (r == 0) std::fprintf(stderr, "communicators made and connected\n");
      cudaEvent_t e1, e2;
      CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming) == cudaSuccess);
      CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming) == cudaSuccess);
      const size_t max_bytes = sizes.back() * gpus;
      char *sendbuf = nullptr, *recvbuf = nullptr;
      CHECK(cudaMalloc(&sendbuf, max_bytes) == cudaSuccess);
      CHECK(cudaMalloc(&recvbuf, max_bytes) == cudaSuccess);
      CHECK(cudaMemset(sendbuf, 1, max_bytes) == cudaSuccess);
      CHECK(cudaDeviceSynchronize() == cudaSuccess);

      auto step = [&](Variant v, size_t m) {
        switch (v) {
          case kWorld:
          case kP2p64: {
            ncclComm_t c = v == kWorld ? world[r] : p2p64;
            CHECK(ncclGroupStart() == ncclSuccess);
            CHECK(ncclSend(sendbuf, m, ncclChar, next, c, s1) == ncclSuccess);
            CHECK(ncclRecv(recvbuf, m, ncclChar, prev, c, s1) == ncclSuccess);
            CHECK(ncclGroupEnd() == ncclSuccess);
            break;
          }
          case kPairs:
            if (one_group) CHECK(ncclGroupStart() == ncclSuccess);
            CHECK(ncclSend(sendbuf, m, ncclChar, 1 - key_in[send_c], pair[send_c], s1) ==
                  ncclSuccess);
            CHECK(ncclRecv(recvbuf, m, ncclChar, 1 - key_in[recv_c], pair[recv_c], s2) ==
                  ncclSuccess);
            if (one_group) CHECK(ncclGroupEnd() == ncclSuccess);
            CHECK(cudaEventRecord(e1, s1) == cudaSuccess);
            CHECK(cudaEventRecord(e2, s2) == cudaSuccess);
            CHECK(cudaStreamWaitEvent(s1, e2, 0) == cudaSuccess);
            CHECK(cudaStreamWaitEvent(s2, e1, 0) == cudaSuccess);
            break;
          case kNative:
            CHECK(ncclAllReduce(sendbuf, recvbuf, m * gpus / 4, ncclFloat32, ncclSum,
                                world[r], s1) == ncclSuccess);
            break;
          case kVariants:
            break;
        }
      };
      // The ring-like table: a transport stream, lane streams, and the
      // events that order them (re-recorded freely: a wait captures the
      // record it was given).
      cudaStream_t transport, transport_b, lane[kLanes];
      CHECK(cudaStreamCreateWithFlags(&transport, cudaStreamNonBlocking) == cudaSuccess);
      CHECK(cudaStreamCreateWithFlags(&transport_b, cudaStreamNonBlocking) == cudaSuccess);
      cudaEvent_t forked, ready[kLanes], done[kLanes];
      CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming) == cudaSuccess);
      for (int l = 0; l < kLanes; ++l) {
        CHECK(cudaStreamCreateWithFlags(&lane[l], cudaStreamNonBlocking) == cudaSuccess);
        CHECK(cudaEventCreateWithFlags(&ready[l], cudaEventDisableTiming) == cudaSuccess);
        CHECK(cudaEventCreateWithFlags(&done[l], cudaEventDisableTiming) == cudaSuccess);
      }
      // One step of lane l with messages of m bytes at lane offset l x m.
      auto ring_step = [&](RingVariant v, int l, size_t m) {
        char* send = sendbuf + l * m;
        char* recv = recvbuf + l * m;
        const bool own_lane = v == kBothWaysLanes && l == 1;
        cudaStream_t ts = own_lane ? transport_b : transport;
        CHECK(cudaEventRecord(ready[l], lane[l]) == cudaSuccess);
        CHECK(cudaStreamWaitEvent(ts, ready[l], 0) == cudaSuccess);
        if (v == kBothWays || v == kBothWaysLanes) {
          ncclComm_t c = own_lane ? p2p64b : p2p64;
          const size_t half = m / 2;
          CHECK(ncclGroupStart() == ncclSuccess);
          CHECK(ncclSend(send, half, ncclChar, next, c, ts) == ncclSuccess);
          CHECK(ncclSend(send + half, half, ncclChar, prev, c, ts) == ncclSuccess);
          CHECK(ncclRecv(recv, half, ncclChar, prev, c, ts) == ncclSuccess);
          CHECK(ncclRecv(recv + half, half, ncclChar, next, c, ts) == ncclSuccess);
          CHECK(ncclGroupEnd() == ncclSuccess);
        } else if (v == kP2p64Chain || v == kP2p64Ring) {
          CHECK(ncclGroupStart() == ncclSuccess);
          CHECK(ncclSend(send, m, ncclChar, next, p2p64, transport) == ncclSuccess);
          CHECK(ncclRecv(recv, m, ncclChar, prev, p2p64, transport) == ncclSuccess);
          CHECK(ncclGroupEnd() == ncclSuccess);
        } else {
          CHECK(cudaEventRecord(forked, transport) == cudaSuccess);
          CHECK(cudaStreamWaitEvent(s1, forked, 0) == cudaSuccess);
          CHECK(cudaStreamWaitEvent(s2, forked, 0) == cudaSuccess);
          if (one_group) CHECK(ncclGroupStart() == ncclSuccess);
          CHECK(ncclSend(send, m, ncclChar, 1 - key_in[send_c], pair[send_c], s1) ==
                ncclSuccess);
          CHECK(ncclRecv(recv, m, ncclChar, 1 - key_in[recv_c], pair[recv_c], s2) ==
                ncclSuccess);
          if (one_group) CHECK(ncclGroupEnd() == ncclSuccess);
          CHECK(cudaEventRecord(e1, s1) == cudaSuccess);
          CHECK(cudaEventRecord(e2, s2) == cudaSuccess);
          CHECK(cudaStreamWaitEvent(transport, e1, 0) == cudaSuccess);
          CHECK(cudaStreamWaitEvent(transport, e2, 0) == cudaSuccess);
        }
        CHECK(cudaEventRecord(done[l], ts) == cudaSuccess);
        CHECK(cudaStreamWaitEvent(lane[l], done[l], 0) == cudaSuccess);
        if (v == kP2p64Ring || v == kPairsRing || v == kBothWays || v == kBothWaysLanes) {
          CHECK(relay::DeviceReduce(relay::DataType::kFloat32, relay::ReduceOp::kSum, send,
                                    recv, send, m / 4, lane[l], reduce_blocks)
                    .ok());
        }
      };
      for (size_t si = 0; si < sizes.size(); ++si) {
        const size_t m = sizes[si];
        for (int v = 0; v < kRingVariants; ++v) {
          const auto rv = static_cast<RingVariant>(v);
          if (r == 0) std::fprintf(stderr, "%s %zu MB\n", kRingNames[v], m >> 20);
          for (int l = 0; l < kLanes; ++l) ring_step(rv, l, m);
          CHECK(cudaDeviceSynchronize() == cudaSuccess);
          barrier.Wait();
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) {
            for (int l = 0; l < kLanes; ++l) ring_step(rv, l, m);
          }
          const double issue_us = std::chrono::duration<double, std::micro>(
                                      std::chrono::steady_clock::now() - start)
                                      .count() /
                                  (iters * kLanes);
          CHECK(cudaDeviceSynchronize() == cudaSuccess);
          const double sec =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
              (iters * kLanes);
          barrier.Wait();
          if (r == 0) {
            ring_rate[v][si] = static_cast<double>(m) / sec / 1e9;
            ring_issue[v][si] = issue_us;
          }
        }
      }
      // One all-pairs all_reduce of S = m x gpus (see the top).
      auto all_pairs = [&](size_t m) {
        const size_t total = m * gpus;
        const size_t seg = total / kLanes;
        const size_t block = seg / gpus;
        for (int l = 0; l < kLanes; ++l) {
          char* data = sendbuf + l * seg;
          char* stage = recvbuf + l * seg;  // Block p's slot for peer p.
          for (int phase = 0; phase < 2; ++phase) {
            CHECK(cudaEventRecord(ready[l], lane[l]) == cudaSuccess);
            CHECK(cudaStreamWaitEvent(transport, ready[l], 0) == cudaSuccess);
            CHECK(ncclGroupStart() == ncclSuccess);
            for (int p = 0; p < gpus; ++p) {
              if (p == r) continue;
              // Reduce-scatter: block p to p, theirs of ours into stage.
              // All-gather: ours to everyone, theirs into block p.
              char* out = phase == 0 ? data + p * block : data + r * block;
              char* in = phase == 0 ? stage + p * block : data + p * block;
              CHECK(ncclSend(out, block, ncclChar, p, p2p64, transport) == ncclSuccess);
              CHECK(ncclRecv(in, block, ncclChar, p, p2p64, transport) == ncclSuccess);
            }
            CHECK(ncclGroupEnd() == ncclSuccess);
            CHECK(cudaEventRecord(done[l], transport) == cudaSuccess);
            CHECK(cudaStreamWaitEvent(lane[l], done[l], 0) == cudaSuccess);
            if (phase == 1) break;
            char* own = data + r * block;
            for (int p = 0; p < gpus; ++p) {
              if (p == r) continue;
              CHECK(relay::DeviceReduce(relay::DataType::kFloat32, relay::ReduceOp::kSum, own,
                                        stage + p * block, own, block / 4, lane[l],
                                        reduce_blocks)
                        .ok());
            }
          }
        }
      };
      for (size_t si = 0; si < sizes.size(); ++si) {
        const size_t m = sizes[si];
        if (r == 0) std::fprintf(stderr, "all-pairs %zu MB\n", m >> 20);
        all_pairs(m);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        barrier.Wait();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) all_pairs(m);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
            iters;
        barrier.Wait();
        if (r == 0) {
          allpairs_rate[si] =
              2.0 * (gpus - 1) / gpus * static_cast<double>(m) * gpus / sec / 1e9;
        }
      }
      for (size_t si = 0; si < sizes.size(); ++si) {
        const size_t m = sizes[si];
        for (int v = 0; v < kVariants; ++v) {
          if (r == 0) {  // Progress, so a hang shows where it is.
            std::fprintf(stderr, "%s %zu MB\n", kNames[v], m >> 20);
          }
          for (int w = 0; w < 3; ++w) step(static_cast<Variant>(v), m);
          CHECK(cudaDeviceSynchronize() == cudaSuccess);
          barrier.Wait();
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) step(static_cast<Variant>(v), m);
          CHECK(cudaStreamSynchronize(s1) == cudaSuccess);
          CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
          const double sec =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
              iters;
          barrier.Wait();
          if (r == 0) {
            const double bytes = v == kNative
                                     ? 2.0 * (gpus - 1) / gpus * static_cast<double>(m) * gpus
                                     : static_cast<double>(m);
            rate[v][si] = bytes / sec / 1e9;
          }
        }
      }
      CHECK(cudaFree(sendbuf) == cudaSuccess);
      CHECK(cudaFree(recvbuf) == cudaSuccess);
      CHECK(cudaFree(token) == cudaSuccess);
      ncclCommDestroy(pair[0]);
      ncclCommDestroy(pair[1]);
      ncclCommDestroy(p2p64);
      ncclCommDestroy(p2p64b);
    });
  }
  for (std::thread& t : threads) t.join();
  for (ncclComm_t c : world) ncclCommDestroy(c);

  std::printf("# %d GPUs, ring step: send M to the next GPU, receive M from the "
              "previous; GB/s = M / time per step (native: all_reduce busbw "
              "at S = M x GPUs); mean of %d steps after 3 warm-up\n",
              gpus, iters);
  std::printf("%10s", "M (MB)");
  for (int v = 0; v < kVariants; ++v) std::printf(" %9s", kNames[v]);
  std::printf("\n");
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::printf("%10zu", sizes[si] >> 20);
    for (int v = 0; v < kVariants; ++v) std::printf(" %9.1f", rate[v][si]);
    std::printf("\n");
  }
  std::printf("\n# ring-like: %d lanes; per step and lane an exchange ordered "
              "after the lane's stream and the lane after it (events), then "
              "(-ring) a float32 sum of M into what is sent next, %d blocks "
              "(0: a full grid); GB/s = M / time per step and lane\n",
              kLanes, reduce_blocks);
  std::printf("%10s", "M (MB)");
  for (int v = 0; v < kRingVariants; ++v) std::printf(" %12s", kRingNames[v]);
  std::printf("\n");
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::printf("%10zu", sizes[si] >> 20);
    for (int v = 0; v < kRingVariants; ++v) std::printf(" %12.1f", ring_rate[v][si]);
    std::printf("\n");
  }
  std::printf("\n# ring-like: host us to queue one step of one lane%s\n",
              one_group ? " (pairs: one NCCL group)" : "");
  std::printf("%10s", "M (MB)");
  for (int v = 0; v < kRingVariants; ++v) std::printf(" %12s", kRingNames[v]);
  std::printf("\n");
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::printf("%10zu", sizes[si] >> 20);
    for (int v = 0; v < kRingVariants; ++v) std::printf(" %12.1f", ring_issue[v][si]);
    std::printf("\n");
  }
  std::printf("\n# all-pairs all_reduce of S = M x GPUs, %d lanes (see the top); "
              "busbw GB/s, and native all_reduce's at the same S\n",
              kLanes);
  std::printf("%10s %10s %10s %10s\n", "S (MB)", "all-pairs", "native", "ratio");
  for (size_t si = 0; si < sizes.size(); ++si) {
    std::printf("%10zu %10.1f %10.1f %10.3f\n", (sizes[si] >> 20) * gpus,
                allpairs_rate[si], rate[kNative][si],
                allpairs_rate[si] / rate[kNative][si]);
  }
  return 0;
}
