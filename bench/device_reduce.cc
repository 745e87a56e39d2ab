// bench/device_reduce: relay's device reduction kernel (two inputs, one
// output) against a device-to-device copy, in one run on one GPU. Both are
// memory-bound: bandwidth counts the bytes each moves (a copy reads and
// writes S; a reduction reads 2S and writes S), and the ratio is what the
// GPU issue targets (>= 85% of the copy at large sizes).
//
//   bench/device_reduce [-b 1M] [-e 1G] [-f 4] [-n 50] [--dtype float32,bfloat16]
//
// Prints a Markdown table: size per buffer, dtype, copy and reduce
// bandwidth (GB/s, 1e9 B), ratio. Exit 1 if no GPU or a CUDA call fails,
// 2 for bad flags.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/report.h"
#include "collectives/device_reduce.h"
#include "runtime/data_type.h"

namespace relay {
namespace {

[[noreturn]] void BadFlag(const std::string& why) {
  std::fprintf(stderr,
               "device_reduce: %s\nflags: -b SIZE -e SIZE -f FACTOR -n ITERS "
               "--dtype T[,T...]\n",
               why.c_str());
  std::exit(2);
}

#define CUDA_OR_DIE(call)                                                  \
  do {                                                                     \
    cudaError_t e = (call);                                                \
    if (e != cudaSuccess) {                                                \
      std::fprintf(stderr, "device_reduce: %s: %s\n", #call,               \
                   cudaGetErrorString(e));                                 \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

// Mean milliseconds per call of `fn` over `iters`, after 3 warm-ups.
template <typename Fn>
double TimeMs(Fn fn, int iters) {
  cudaEvent_t start, stop;
  CUDA_OR_DIE(cudaEventCreate(&start));
  CUDA_OR_DIE(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();
  CUDA_OR_DIE(cudaEventRecord(start));
  for (int i = 0; i < iters; ++i) fn();
  CUDA_OR_DIE(cudaEventRecord(stop));
  CUDA_OR_DIE(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_OR_DIE(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

int Main(int argc, char** argv) {
  size_t min_bytes = 1 << 20, max_bytes = size_t{1} << 30;
  double factor = 4;
  int iters = 50;
  std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kBfloat16};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) BadFlag(absl::StrCat(flag, " wants a value"));
    const std::string v = argv[++i];
    if (flag == "-b" || flag == "-e") {
      absl::StatusOr<size_t> s = bench::ParseSize(v);
      if (!s.ok()) BadFlag(std::string(s.status().message()));
      (flag == "-b" ? min_bytes : max_bytes) = *s;
    } else if (flag == "-f") {
      if (!absl::SimpleAtod(v, &factor)) BadFlag("-f wants a number");
    } else if (flag == "-n") {
      if (!absl::SimpleAtoi(v, &iters) || iters < 1) BadFlag("-n wants >= 1");
    } else if (flag == "--dtype") {
      dtypes.clear();
      for (absl::string_view name : absl::StrSplit(v, ',')) {
        absl::StatusOr<DataType> d = ParseDataType(name);
        if (!d.ok()) BadFlag(std::string(d.status().message()));
        dtypes.push_back(*d);
      }
    } else {
      BadFlag(absl::StrCat("unknown flag ", flag));
    }
  }
  if (absl::Status s = bench::CheckSweep(min_bytes, max_bytes, factor); !s.ok()) {
    BadFlag(std::string(s.message()));
  }
  if (!DeviceReduceAvailable()) {
    std::fprintf(stderr, "device_reduce: no GPU visible (or built without CUDA)\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  std::printf("# device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("| size per buffer (B) | dtype | copy (GB/s) | reduce (GB/s) | reduce/copy |\n");
  std::printf("|---:|---|---:|---:|---:|\n");
  void *a = nullptr, *b = nullptr, *out = nullptr;
  CUDA_OR_DIE(cudaMalloc(&a, max_bytes));
  CUDA_OR_DIE(cudaMalloc(&b, max_bytes));
  CUDA_OR_DIE(cudaMalloc(&out, max_bytes));
  CUDA_OR_DIE(cudaMemset(a, 0, max_bytes));
  CUDA_OR_DIE(cudaMemset(b, 0, max_bytes));
  for (size_t bytes : bench::SizeSweep(min_bytes, max_bytes, factor)) {
    for (DataType dtype : dtypes) {
      const size_t count = bytes / DataTypeSize(dtype);
      const int n = bytes >= (size_t{256} << 20) ? std::max(5, iters / 5) : iters;
      const double copy_ms = TimeMs(
          [&] { cudaMemcpyAsync(out, a, bytes, cudaMemcpyDeviceToDevice); }, n);
      bool failed = false;
      const double reduce_ms = TimeMs(
          [&] {
            if (!DeviceReduce(dtype, ReduceOp::kSum, a, b, out, count, nullptr).ok()) {
              failed = true;
            }
          },
          n);
      CUDA_OR_DIE(cudaGetLastError());
      if (failed) {
        std::fprintf(stderr, "device_reduce: a launch failed\n");
        return 1;
      }
      const double copy_gbps = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
      const double reduce_gbps = 3.0 * bytes / (reduce_ms * 1e-3) / 1e9;
      std::printf("| %zu | %s | %.1f | %.1f | %.3f |\n", bytes,
                  std::string(DataTypeName(dtype)).c_str(), copy_gbps,
                  reduce_gbps, reduce_gbps / copy_gbps);
      std::fflush(stdout);
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
