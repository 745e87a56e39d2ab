// Throughput of the host reduction kernels against memcpy, per buffer size.
// bytes_per_second counts the traffic of one call: a reduction reads two
// buffers and writes one (3 * size), memcpy reads one and writes one
// (2 * size), so equal rates mean equal memory traffic.
//
//   bazel run //collectives:reduce_benchmark -- --benchmark_min_time=0.2
#include <cstdint>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "collectives/reduce.h"
#include "runtime/data_type.h"

namespace relay {
namespace {

constexpr int64_t kSizes[] = {4 << 10, 1 << 20, 64 << 20};  // Bytes/buffer.

// 0x3c bytes are ordinary finite values in every float type (no subnormals,
// which are slow on some CPUs, and no NaN).
std::vector<uint8_t> Filled(size_t bytes) {
  return std::vector<uint8_t>(bytes, 0x3c);
}

void BM_Reduce(benchmark::State& state, DataType dtype, bool in_place) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / DataTypeSize(dtype);
  const ReduceKernel fn = GetReduceFn(dtype, ReduceOp::kSum);
  std::vector<uint8_t> a = Filled(bytes), b = Filled(bytes);
  std::vector<uint8_t> out = Filled(bytes);
  void* dst = in_place ? a.data() : out.data();
  for (auto _ : state) {
    fn(a.data(), b.data(), dst, count);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> src = Filled(bytes), dst = Filled(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(bytes));
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t size : kSizes) b->Arg(size);
}

BENCHMARK(BM_Memcpy)->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Reduce, float32_sum, DataType::kFloat32, false)
    ->Apply(Sizes);
// out == a, the common case (acc += incoming): must stay vectorised.
BENCHMARK_CAPTURE(BM_Reduce, float32_sum_in_place, DataType::kFloat32, true)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_sum, DataType::kBfloat16, false)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Reduce, float16_sum, DataType::kFloat16, false)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Reduce, int32_sum, DataType::kInt32, false)
    ->Apply(Sizes);

}  // namespace
}  // namespace relay
