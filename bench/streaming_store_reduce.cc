// bench/streaming_store_reduce: what the way a large float32 sum writes its
// output costs in memory bandwidth, on one thread, for a reduction whose
// output is not read again soon (the case of a 64 MB all_reduce's steps).
//
//   relay          relay's float32 sum kernel (collectives/reduce.cc,
//                  GetReduceFn): ordinary stores, so every output line is
//                  read for ownership before it is written
//   block+stream   that kernel into a 4 KB buffer in L1, then
//                  streaming (non-temporal) stores of that buffer to out
//   stream         streaming stores straight from the sum's registers
//
// Prints the best of 15 runs of each, interleaved, with the bandwidth of the
// three arrays counted once each. Usage: streaming_store_reduce [BYTES]
// (default 64 MiB per array). Needs AVX.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "collectives/reduce.h"

namespace relay {
namespace {

constexpr size_t kBlock = 1024;  // Floats: 4 KB.

const ReduceKernel kSum = GetReduceFn(DataType::kFloat32, ReduceOp::kSum);

void Relay(const float* a, const float* b, float* out, size_t n) {
  kSum(a, b, out, n);
}

__attribute__((noinline, target("avx"))) void BlockThenStream(
    const float* a, const float* b, float* out, size_t n) {
  alignas(64) float tmp[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = n - i < kBlock ? n - i : kBlock;
    Relay(a + i, b + i, tmp, m);
    for (size_t j = 0; j < m; j += 8) {
      _mm256_stream_ps(out + i + j, _mm256_load_ps(tmp + j));
    }
  }
  _mm_sfence();  // Streaming stores are weakly ordered: fence before publishing.
}

__attribute__((noinline, target("avx"))) void Stream(const float* a,
                                                     const float* b,
                                                     float* out, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    _mm256_stream_ps(out + i, _mm256_add_ps(_mm256_load_ps(a + i),
                                            _mm256_load_ps(b + i)));
  }
  _mm_sfence();
}

int Main(int argc, char** argv) {
  const long bytes = argc > 1 ? std::atol(argv[1]) : 64L << 20;
  if (bytes < 4096 || bytes % 4096 != 0) {
    std::fprintf(stderr, "streaming_store_reduce: BYTES must be a positive multiple of 4096\n");
    return 2;
  }
  if (!__builtin_cpu_supports("avx")) {
    std::fprintf(stderr, "streaming_store_reduce: this CPU has no AVX\n");
    return 2;
  }
  const size_t n = static_cast<size_t>(bytes) / sizeof(float);
  auto* a = static_cast<float*>(std::aligned_alloc(64, bytes));
  auto* b = static_cast<float*>(std::aligned_alloc(64, bytes));
  auto* out = static_cast<float*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < n; ++i) a[i] = i % 7, b[i] = i % 5, out[i] = -1;
  using Kernel = void (*)(const float*, const float*, float*, size_t);
  const Kernel kernels[] = {Relay, BlockThenStream, Stream};
  const char* names[] = {"relay", "block+stream", "stream"};
  double best[3] = {1e30, 1e30, 1e30};
  for (int round = 0; round < 15; ++round) {
    for (int k = 0; k < 3; ++k) {
      const auto start = std::chrono::steady_clock::now();
      kernels[k](a, b, out, n);
      const double s = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start).count();
      if (s < best[k]) best[k] = s;
      for (size_t i = 0; i < n; i += 4099) {  // Every kernel wrote the sum.
        if (out[i] != static_cast<float>(i % 7 + i % 5)) {
          std::fprintf(stderr, "streaming_store_reduce: %s wrote a wrong sum\n", names[k]);
          return 1;
        }
      }
    }
  }
  std::printf("# %ld bytes per array, best of 15\n", bytes);
  for (int k = 0; k < 3; ++k) {
    std::printf("%-13s %8.3f ms %6.1f GB/s  %.2fx relay\n", names[k], best[k] * 1e3,
                3.0 * bytes / best[k] / 1e9, best[0] / best[k]);
  }
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
