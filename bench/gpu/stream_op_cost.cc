// bench/gpu/stream_op_cost: what the stream operations relay's NCCL
// transport adds around each NCCL call cost the GPU and the host, on a real
// multi-GPU communicator. One process, one thread per GPU (ncclCommInitAll),
// 8-byte float32 all_reduce, timed like bench/collectives: CALLS calls
// queued back to back, one synchronize at the end, per-call time = total /
// CALLS; the median of ROUNDS rounds is printed with the host time to queue
// them. Variants add, per call, what relay's Launch does:
//   raw            ncclAllReduce on a non-blocking stream
//   +done          ... then cudaEventRecord(done) on that stream
//   +wait legacy   cudaEventRecord(ready) on the legacy default stream,
//                  cudaStreamWaitEvent(stream, ready), ncclAllReduce, +done
//   +wait other    the same with `ready` recorded on another non-blocking
//                  stream (a caller passing its own stream)
//   +checks        +wait legacy plus two cudaPointerGetAttributes
// Usage (GPU host): stream_op_cost [CALLS] [ROUNDS]   (default 20, 200)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "bench/report.h"
#include "bench/thread_barrier.h"

namespace {

#define CHECK(x)                                                  \
  do {                                                            \
    if (!(x)) {                                                   \
      std::fprintf(stderr, "stream_op_cost: %s failed\n", #x);    \
      std::exit(1);                                               \
    }                                                             \
  } while (0)

enum Variant { kRaw, kDone, kWaitLegacy, kWaitOther, kChecks, kVariants };
const char* const kNames[kVariants] = {"raw", "+done", "+wait legacy",
                                       "+wait other", "+checks"};

struct Sample {
  double call_us = 0, issue_us = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 200;
  CHECK(calls > 0 && rounds > 0);
  int gpus = 0;
  CHECK(cudaGetDeviceCount(&gpus) == cudaSuccess && gpus >= 1);
  std::vector<int> devs(gpus);
  for (int i = 0; i < gpus; ++i) devs[i] = i;
  std::vector<ncclComm_t> comms(gpus);
  CHECK(ncclCommInitAll(comms.data(), gpus, devs.data()) == ncclSuccess);

  relay::bench::ThreadBarrier barrier(gpus);
  // samples[variant][round], measured on GPU 0's thread.
  std::vector<std::vector<Sample>> samples(kVariants);
  std::vector<std::thread> threads;
  for (int g = 0; g < gpus; ++g) {
    threads.emplace_back([&, g] {
      CHECK(cudaSetDevice(g) == cudaSuccess);
      cudaStream_t stream, other;
      CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
      CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
      float* buf = nullptr;
      CHECK(cudaMalloc(&buf, 64) == cudaSuccess);
      CHECK(cudaMemset(buf, 0, 64) == cudaSuccess);
      std::vector<cudaEvent_t> ready(calls), done(calls);
      for (int i = 0; i < calls; ++i) {
        CHECK(cudaEventCreateWithFlags(&ready[i], cudaEventDisableTiming) == cudaSuccess);
        CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming) == cudaSuccess);
      }
      auto one = [&](Variant v, int i) {
        if (v == kChecks) {
          cudaPointerAttributes attr;
          CHECK(cudaPointerGetAttributes(&attr, buf) == cudaSuccess);
          CHECK(cudaPointerGetAttributes(&attr, buf + 4) == cudaSuccess);
        }
        if (v == kWaitLegacy || v == kWaitOther || v == kChecks) {
          CHECK(cudaEventRecord(ready[i], v == kWaitOther ? other : cudaStreamLegacy) ==
                cudaSuccess);
          CHECK(cudaStreamWaitEvent(stream, ready[i], 0) == cudaSuccess);
        }
        CHECK(ncclAllReduce(buf, buf + 8, 2, ncclFloat32, ncclSum, comms[g], stream) ==
              ncclSuccess);
        if (v != kRaw) CHECK(cudaEventRecord(done[i], stream) == cudaSuccess);
      };
      // Rounds alternate the variants, so drift on the machine hits all alike.
      for (int r = -5; r < rounds; ++r) {
        for (int v = 0; v < kVariants; ++v) {
          barrier.Wait();
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < calls; ++i) one(static_cast<Variant>(v), i);
          const auto issued = std::chrono::steady_clock::now();
          CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
          const auto end = std::chrono::steady_clock::now();
          if (g == 0 && r >= 0) {
            Sample s;
            s.call_us = std::chrono::duration<double, std::micro>(end - start).count() / calls;
            s.issue_us = std::chrono::duration<double, std::micro>(issued - start).count() / calls;
            samples[v].push_back(s);
          }
        }
      }
      CHECK(cudaStreamSynchronize(other) == cudaSuccess);
      CHECK(cudaFree(buf) == cudaSuccess);
    });
  }
  for (std::thread& t : threads) t.join();
  for (ncclComm_t c : comms) ncclCommDestroy(c);

  std::printf("# %d GPUs, 8 B float32 all_reduce, %d calls queued per round, "
              "median of %d rounds (GPU 0's thread)\n",
              gpus, calls, rounds);
  std::printf("%-14s %12s %12s %14s\n", "variant", "us/call", "added us", "host us/call");
  std::vector<double> raw;
  for (const Sample& s : samples[kRaw]) raw.push_back(s.call_us);
  const double base = relay::bench::Median(raw);
  for (int v = 0; v < kVariants; ++v) {
    std::vector<double> call, issue;
    for (const Sample& s : samples[v]) {
      call.push_back(s.call_us);
      issue.push_back(s.issue_us);
    }
    const double m = relay::bench::Median(call);
    std::printf("%-14s %12.2f %+12.2f %14.2f\n", kNames[v], m, m - base, relay::bench::Median(issue));
  }
  return 0;
}
