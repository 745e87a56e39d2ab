// examples/overlap_streams: overlapping compute with communication on two
// CUDA streams, without blocking the host (Request::StreamWait).
//
// One thread per visible GPU (one rank each, nccl transport). Each step:
//   compute stream:    backward of layer k  -> grads_k
//                      all_reduce(grads_k, avg), ordered after it
//                      backward of layer k-1 (runs while grads_k are reduced)
//   optimizer stream:  StreamWait(all_reduce), then params_k -= lr * grads_k
// The host only queues work; it waits once, at the end of the step. The
// same step is then run serialized (host Wait on the all_reduce before the
// next backward) for comparison, and params_k is checked element by element
// after every step.
//
//   examples/overlap_streams [--steps 20] [--elements 16777216]
// Exits 0 when every check passed; 2 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "examples/overlap_kernels.h"
#include "relay.h"

namespace {

using relay::Buffer;
using relay::CollectiveOptions;
using relay::Communicator;
using relay::Device;
using relay::ReduceOp;
using relay::Request;

constexpr float kLr = 0.5f, kScale = 1e-3f;

absl::Status Cuda(int err, const char* what) {
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(
      what, ": ", cudaGetErrorString(static_cast<cudaError_t>(err))));
}

// One rank: `steps` overlapped steps then `steps` serialized ones, each
// phase after one untimed warm-up step; prints the median step time of each
// on rank 0.
absl::Status RunRank(Communicator& comm, int steps, size_t n) {
  const int rank = comm.rank(), size = comm.size();
  RELAY_RETURN_IF_ERROR(Cuda(cudaSetDevice(rank), "cudaSetDevice"));
  cudaStream_t compute, optimizer;
  RELAY_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), "stream"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&optimizer, cudaStreamNonBlocking), "stream"));
  float *params, *grads_k, *grads_prev;
  RELAY_RETURN_IF_ERROR(Cuda(cudaMalloc(&params, n * 4), "cudaMalloc"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaMalloc(&grads_k, n * 4), "cudaMalloc"));
  RELAY_RETURN_IF_ERROR(Cuda(cudaMalloc(&grads_prev, n * 4), "cudaMalloc"));
  std::vector<float> host(n, 0.0f);
  RELAY_RETURN_IF_ERROR(Cuda(cudaMemcpy(params, host.data(), n * 4, cudaMemcpyHostToDevice), "upload"));
  CollectiveOptions on_compute;
  on_compute.stream = compute;
  const Buffer g = Buffer::Of(grads_k, n, Device::Cuda(rank));
  std::vector<double> seconds[2];  // Per timed step.
  int done = 0;  // Steps run, warm-up ones included.
  for (int serialized = 0; serialized < 2; ++serialized) {
    // Step -1 warms up and is not timed: the first all_reduce connects
    // NCCL's peers and loads its kernels (about 30 ms on 2 H100s, which
    // made a mean over 20 overlapped steps 3x the serialized one).
    for (int step = -1; step < steps; ++step) {
      const absl::Time start = absl::Now();
      RELAY_RETURN_IF_ERROR(Cuda(relay_examples::LaunchFakeBackward(grads_k, n, rank, kScale, 8, compute), "backward k"));
      RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(g, g, ReduceOp::kAvg, on_compute));
      if (serialized) RELAY_RETURN_IF_ERROR(r.Wait());  // the host blocks here
      RELAY_RETURN_IF_ERROR(Cuda(relay_examples::LaunchFakeBackward(grads_prev, n, rank, kScale, 400, compute), "backward k-1"));
      RELAY_RETURN_IF_ERROR(r.StreamWait(optimizer));  // no host block
      RELAY_RETURN_IF_ERROR(Cuda(relay_examples::LaunchSgdStep(params, grads_k, n, kLr, optimizer), "sgd"));
      RELAY_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(optimizer), "sync optimizer"));
      RELAY_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(compute), "sync compute"));
      if (step >= 0) seconds[serialized].push_back(absl::ToDoubleSeconds(absl::Now() - start));
      RELAY_RETURN_IF_ERROR(r.Wait());
      // After s steps in all: params[i] = -s * lr * mean_r((r+1) * (i%1000) * scale).
      RELAY_RETURN_IF_ERROR(Cuda(cudaMemcpy(host.data(), params, n * 4, cudaMemcpyDeviceToHost), "download"));
      ++done;
      for (size_t i = 0; i < n; i += 997) {
        const float avg = float(size + 1) / 2 * float(i % 1000) * kScale;
        const float want = -float(done) * kLr * avg;
        if (std::abs(host[i] - want) > 1e-4f * std::max(1.0f, std::abs(want))) {
          return absl::InternalError(absl::StrCat("rank ", rank, " step ", done, ": params[", i,
                                                  "] is ", host[i], ", want ", want));
        }
      }
    }
  }
  if (rank == 0) {
    // Medians: one slow step (the host descheduled) moved a mean of 20 by
    // a third on a shared GPU host.
    auto median_ms = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return 1e3 * (v.size() % 2 ? v[v.size() / 2]
                                 : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
    };
    std::printf("%d rank(s), %zu floats: median step %.3f ms overlapped (StreamWait), "
                "%.3f ms serialized (host Wait); params checked after every step\n",
                size, n, median_ms(seconds[0]), median_ms(seconds[1]));
  }
  cudaFree(params);
  cudaFree(grads_k);
  cudaFree(grads_prev);
  cudaStreamDestroy(compute);
  cudaStreamDestroy(optimizer);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  int64_t n = 1 << 24;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    int64_t v = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &v) || v <= 0 || (flag != "--steps" && flag != "--elements")) {
      std::fprintf(stderr, "usage: overlap_streams [--steps N] [--elements N]\n");
      return 2;
    }
    if (flag == "--steps") steps = static_cast<int>(v);
    if (flag == "--elements") n = v;
  }
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::fprintf(stderr, "overlap_streams: no GPU visible\n");
    return 2;
  }
  auto store = std::make_shared<relay::InMemoryStore>();
  std::vector<absl::Status> results(gpus);
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      if (cudaSetDevice(r) != cudaSuccess) {
        results[r] = absl::InternalError("cudaSetDevice");
        return;
      }
      auto comm = relay::CreateCommunicator(
          {.rank = r, .size = gpus, .store = store, .transport = "nccl"});
      results[r] = comm.ok() ? RunRank(**comm, steps, static_cast<size_t>(n)) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  int failed = 0;
  for (int r = 0; r < gpus; ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, results[r].ToString().c_str());
      ++failed;
    }
  }
  return failed ? 1 : 0;
}
