#include "collectives/reduce.h"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/float16.h"

// Each kernel is a plain loop that GCC auto-vectorises (BUILD.bazel turns on
// the cost model that allows it at -O2). On x86-64 it is compiled twice, for
// x86-64-v3 (AVX2, F16C, FMA) and the baseline, and an ifunc picks one when
// the library loads, so the binary still runs on any x86-64.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    !defined(__clang__)
#define RELAY_X86_DISPATCH 1
#include <immintrin.h>
#endif
// ThreadSanitizer instruments the ifunc resolvers, which run while the
// program loads, before TSAN is initialised, and crash: TSAN builds get the
// baseline loops only.
#if defined(RELAY_X86_DISPATCH) && !defined(__SANITIZE_THREAD__)
#define RELAY_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define RELAY_MULTIVERSION
#endif

namespace relay {
namespace {

// How elements are stored and in which type they are computed.
template <typename T>
struct Native {
  using Storage = T;
  static T Load(T v) { return v; }
  static T Store(T v) { return v; }
};

// float16 and bfloat16 compute in float32. Its 24-bit significand is more than
// twice theirs plus two (11 and 8 bits), so rounding an add, multiply or divide
// to float32 and then to 16 bits gives the same as rounding the exact result
// once.
struct Half {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return HalfToFloat(v); }
  static uint16_t Store(float v) { return FloatToHalf(v); }
};

struct Bfloat16 {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return Bfloat16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToBfloat16(v); }
};

// Integer sum and product run in unsigned arithmetic, where overflow wraps
// rather than being undefined, and at least as wide as unsigned int, so that
// narrow types do not promote to (signed) int.
template <typename T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <typename T>
struct WideOf<T, true> {
  using type = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
};
template <typename T>
using Wide = typename WideOf<T>::type;

struct Sum {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
  }
};

struct Prod {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
  }
};

// As std::min(a, b) and std::max(a, b): `a` wins ties.
struct Min {
  template <typename T>
  static T Apply(T a, T b) { return b < a ? b : a; }
};

struct Max {
  template <typename T>
  static T Apply(T a, T b) { return a < b ? b : a; }
};

// No __restrict: `out` may equal `a` or `b`. Every iteration reads a[i] and
// b[i] before writing out[i], so exact aliasing is safe, and GCC's runtime
// overlap check (which it adds without __restrict) still takes the vector path
// when out == a or out == b; only partial overlap falls back to scalar code.
template <typename Format, typename Op>
RELAY_MULTIVERSION void Reduce(const void* a, const void* b, void* out,
                               size_t count) {
  using S = typename Format::Storage;
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  S* z = static_cast<S*>(out);
  for (size_t i = 0; i < count; ++i) {
    z[i] = Format::Store(Op::Apply(Format::Load(x[i]), Format::Load(y[i])));
  }
}

#ifdef RELAY_X86_DISPATCH
// GCC does not turn float16 conversions into F16C instructions (GCC 12 calls
// libgcc even for _Float16), and the portable bit manipulation is several
// times slower than memory, so float16 gets an F16C kernel when the CPU has
// it. The float arrays are only staging: GCC keeps them in ymm registers.
template <typename Op>
__attribute__((target("avx2,f16c"), always_inline)) inline void HalfStep8(
    const uint16_t* x, const uint16_t* y, uint16_t* z) {
  alignas(32) float u[8], v[8];
  _mm256_store_ps(u, _mm256_cvtph_ps(_mm_loadu_si128(
                         reinterpret_cast<const __m128i*>(x))));
  _mm256_store_ps(v, _mm256_cvtph_ps(_mm_loadu_si128(
                         reinterpret_cast<const __m128i*>(y))));
  for (int j = 0; j < 8; ++j) u[j] = Op::Apply(u[j], v[j]);
  // Stored after both loads, so z may be x or y.
  const __m256 w = _mm256_load_ps(u);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(z),
                   _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT));
}

template <typename Op>
__attribute__((target("avx2,f16c"))) void ReduceHalfF16c(
    const void* a, const void* b, void* out, size_t count) {
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  uint16_t* z = static_cast<uint16_t*>(out);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) HalfStep8<Op>(x + i, y + i, z + i);
  if (i < count) {  // The last partial vector, padded.
    const size_t bytes = (count - i) * sizeof(uint16_t);
    uint16_t xs[8] = {}, ys[8] = {}, zs[8];
    std::memcpy(xs, x + i, bytes);
    std::memcpy(ys, y + i, bytes);
    HalfStep8<Op>(xs, ys, zs);
    std::memcpy(z + i, zs, bytes);
  }
}

bool HasF16c() {
  // cpu_init makes this safe to call from static initialisers too.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return has;
}
#endif

template <typename Format, typename Op>
ReduceKernel Kernel() {
#ifdef RELAY_X86_DISPATCH
  if constexpr (std::is_same_v<Format, Half>) {
    if (HasF16c()) return &ReduceHalfF16c<Op>;
  }
#endif
  return &Reduce<Format, Op>;
}

template <typename Format>
ReduceKernel ForOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // The caller divides at the end.
      return Kernel<Format, Sum>();
    case ReduceOp::kProd:
      return Kernel<Format, Prod>();
    case ReduceOp::kMin:
      return Kernel<Format, Min>();
    case ReduceOp::kMax:
      return Kernel<Format, Max>();
  }
  return nullptr;
}

// Divides in the computation type promoted with int: integers as C++ does
// (truncating toward zero; unsigned stays unsigned), floats in their own
// precision, float16/bfloat16 in float32.
template <typename Format>
RELAY_MULTIVERSION void Divide(void* data, size_t count, int divisor) {
  using S = typename Format::Storage;
  using D = std::common_type_t<decltype(Format::Load(S{})), int>;
  const D d = static_cast<D>(divisor);
  S* x = static_cast<S*>(data);
  for (size_t i = 0; i < count; ++i) {
    x[i] = Format::Store(static_cast<D>(Format::Load(x[i])) / d);
  }
}

}  // namespace

ReduceKernel GetReduceFn(DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kInt8: return ForOp<Native<int8_t>>(op);
    case DataType::kUint8: return ForOp<Native<uint8_t>>(op);
    case DataType::kInt32: return ForOp<Native<int32_t>>(op);
    case DataType::kUint32: return ForOp<Native<uint32_t>>(op);
    case DataType::kInt64: return ForOp<Native<int64_t>>(op);
    case DataType::kUint64: return ForOp<Native<uint64_t>>(op);
    case DataType::kFloat16: return ForOp<Half>(op);
    case DataType::kBfloat16: return ForOp<Bfloat16>(op);
    case DataType::kFloat32: return ForOp<Native<float>>(op);
    case DataType::kFloat64: return ForOp<Native<double>>(op);
  }
  return nullptr;
}

void DivideInPlace(DataType dtype, void* data, size_t count, int divisor) {
  assert(divisor > 0);
  switch (dtype) {
    case DataType::kInt8:
      return Divide<Native<int8_t>>(data, count, divisor);
    case DataType::kUint8:
      return Divide<Native<uint8_t>>(data, count, divisor);
    case DataType::kInt32:
      return Divide<Native<int32_t>>(data, count, divisor);
    case DataType::kUint32:
      return Divide<Native<uint32_t>>(data, count, divisor);
    case DataType::kInt64:
      return Divide<Native<int64_t>>(data, count, divisor);
    case DataType::kUint64:
      return Divide<Native<uint64_t>>(data, count, divisor);
    case DataType::kFloat16:
      return Divide<Half>(data, count, divisor);
    case DataType::kBfloat16:
      return Divide<Bfloat16>(data, count, divisor);
    case DataType::kFloat32:
      return Divide<Native<float>>(data, count, divisor);
    case DataType::kFloat64:
      return Divide<Native<double>>(data, count, divisor);
  }
}

}  // namespace relay
