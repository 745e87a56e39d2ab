// File: bench/gpu/peer_copy.cc
//
// The GPU-to-GPU copy ceiling: what the links between a host's GPUs carry
// when every GPU copies a buffer into the next one's memory at once (GPU g
// to g + 1 mod n; on 2 GPUs both directions together), by the copy engines
// (cudaMemcpyPeerAsync, as CUDA's p2pBandwidthLatencyTest does). The rows
// are nccl-tests' sendrecv rows (//bench:report: S bytes a GPU, busbw =
// algbw), so bench/gpu/compare_nccl.sh sets this beside each collective's
// busbw as "copy": the fraction of the links a collective uses.
//
// Per size: WARMUP copies, then ITERS timed ones on the host clock between
// stream synchronisations. With -c 1 each size's copies are read back and
// compared with the source, which differs by GPU and byte.
//
// Example (on a GPU host with 2 or more GPUs; built by bench/gpu/build.sh):
//   gpu_bin/peer_copy -b 8 -e 1G -f 2 --json copy.json
//
// Exit status: 0 if every checked copy was right, 1 if one was wrong or a
// CUDA call failed, 2 for bad flags or fewer than 2 GPUs.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/report.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: peer_copy [flags]
  -b SIZE -e SIZE -f FACTOR   size sweep (default 8 .. 64M, x2)
  -n ITERS -w WARMUP          timed and warm-up copies per size (20, 5)
  -c 0|1                      read back and check every size (default 1)
  -g GPUS                     GPUs to use, 2 or more (default: every visible one)
  --json FILE                 also write the rows as JSON
Every GPU copies SIZE bytes into the next GPU's memory, all at once.
)";

#define CHECK_CUDA(call)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "peer_copy: %s: %s\n", #call, cudaGetErrorString(e_));        \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Flags {
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, gpus = 0;
  bool check = true;
  std::string json;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("peer_copy", kUsage, argc, argv);
  while (p.Next()) {
    if (bench::SweepFlag(p, f)) continue;
    if (p.name() == "-c") {
      f.check = p.Int(0) != 0;
    } else if (p.name() == "-g") {
      f.gpus = p.Int(2);
    } else if (p.name() == "--json") {
      f.json = p.value();
    } else {
      p.Unknown();
    }
  }
  if (absl::Status s = bench::CheckSweep(f.min_bytes, f.max_bytes, f.factor); !s.ok()) {
    p.Fail(std::string(s.message()));
  }
  return f;
}

// GPU g's source byte i: differs by GPU and position, so a copy from the
// wrong GPU or offset shows.
unsigned char SourceByte(int g, size_t i) {
  return static_cast<unsigned char>((i * 131 + (i >> 9) * 7 + static_cast<size_t>(g) * 61) & 0xff);
}

struct Gpu {
  int device = 0;
  cudaStream_t stream = nullptr;
  char* src = nullptr;
  char* dst = nullptr;  // Written by the previous GPU's copies.
};

void CopyAll(std::vector<Gpu>& gpus, size_t bytes) {
  const int n = static_cast<int>(gpus.size());
  for (int g = 0; g < n; ++g) {
    const Gpu& to = gpus[(g + 1) % n];
    CHECK_CUDA(cudaMemcpyPeerAsync(to.dst, to.device, gpus[g].src, gpus[g].device, bytes,
                                   gpus[g].stream));
  }
}

void SyncAll(std::vector<Gpu>& gpus) {
  for (Gpu& g : gpus) CHECK_CUDA(cudaStreamSynchronize(g.stream));
}

// Wrong bytes over every GPU's destination after a copy of `bytes`.
int64_t CountWrong(const std::vector<Gpu>& gpus, size_t bytes) {
  const int n = static_cast<int>(gpus.size());
  std::vector<unsigned char> got(bytes);
  int64_t wrong = 0;
  for (int g = 0; g < n; ++g) {
    const int from = (g + n - 1) % n;
    CHECK_CUDA(cudaMemcpy(got.data(), gpus[g].dst, bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < bytes; ++i) wrong += got[i] != SourceByte(from, i);
  }
  return wrong;
}

int Run(const Flags& f) {
  int visible = 0;
  CHECK_CUDA(cudaGetDeviceCount(&visible));
  const int n = f.gpus > 0 ? f.gpus : visible;
  if (n < 2 || n > visible) {
    std::fprintf(stderr, "peer_copy: needs 2 or more GPUs, %d asked, %d visible\n", n,
                 visible);
    return 2;
  }
  std::vector<Gpu> gpus(n);
  std::vector<unsigned char> pattern(f.max_bytes);
  for (int g = 0; g < n; ++g) {
    Gpu& gpu = gpus[g];
    gpu.device = g;
    CHECK_CUDA(cudaSetDevice(g));
    const int next = (g + 1) % n;
    int can = 0;
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can, g, next));
    if (!can) {
      std::fprintf(stderr, "peer_copy: GPU %d cannot access GPU %d's memory\n", g, next);
      return 1;
    }
    const cudaError_t e = cudaDeviceEnablePeerAccess(next, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK_CUDA(e);
    cudaGetLastError();  // Clears "already enabled" (2 GPUs: each is the other's next).
    CHECK_CUDA(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&gpu.src, f.max_bytes));
    CHECK_CUDA(cudaMalloc(&gpu.dst, f.max_bytes));
    for (size_t i = 0; i < f.max_bytes; ++i) pattern[i] = SourceByte(g, i);
    CHECK_CUDA(cudaMemcpy(gpu.src, pattern.data(), f.max_bytes, cudaMemcpyHostToDevice));
  }
  bench::Reporter::Options options;
  options.collective = "sendrecv";
  options.nranks = n;
  options.peer = "cuda-memcpy-peer";
  options.comments = {"every GPU copies S bytes into the next GPU's memory at once "
                      "(cudaMemcpyPeerAsync, copy engines)"};
  bench::Reporter reporter(options);
  reporter.PrintHeader(stdout);
  int64_t total_wrong = 0;
  for (size_t bytes : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor)) {
    for (int i = 0; i < f.warmup; ++i) CopyAll(gpus, bytes);
    SyncAll(gpus);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < f.iters; ++i) CopyAll(gpus, bytes);
    const double issue_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        f.iters;
    SyncAll(gpus);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        f.iters;
    bench::Row row;
    row.bytes = bytes;
    row.count = bytes;
    row.type = "uint8";
    row.redop = "none";
    row.oop_time_us = us;
    row.oop_issue_us = issue_us;
    row.oop_wrong = f.check ? CountWrong(gpus, bytes) : -1;
    row.has_inplace = false;
    if (row.oop_wrong > 0) total_wrong += row.oop_wrong;
    reporter.PrintRow(stdout, row);
    std::fflush(stdout);
  }
  reporter.PrintFooter(stdout);
  if (!f.json.empty()) {
    FILE* out = std::fopen(f.json.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "peer_copy: cannot write %s\n", f.json.c_str());
      return 1;
    }
    std::fprintf(out, "{\"runs\": [%s]}\n", reporter.ToJson().c_str());
    std::fclose(out);
  }
  for (Gpu& g : gpus) {
    cudaSetDevice(g.device);
    cudaFree(g.src);
    cudaFree(g.dst);
    cudaStreamDestroy(g.stream);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Run(relay::ParseFlags(argc, argv)); }
