#include "collectives/reduce.h"

#include <cassert>
#include <cstdint>
#include <type_traits>

#include "runtime/float16.h"

// Each kernel is a plain loop that GCC auto-vectorises (BUILD.bazel turns on
// the cost model that allows it at -O2). On x86-64 it is compiled twice, for
// x86-64-v3 (AVX2, F16C, FMA) and the baseline, and an ifunc picks one when
// the library loads, so the binary still runs on any x86-64.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && \
    !defined(__clang__)
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

// float32 holds the exact-enough result of one 16-bit add, multiply or divide
// (24 >= 2 * 11 + 2 bits), so rounding it again to 16 bits equals rounding the
// exact result once.
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

template <typename Format>
ReduceKernel ForOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // The caller divides at the end.
      return &Reduce<Format, Sum>;
    case ReduceOp::kProd:
      return &Reduce<Format, Prod>;
    case ReduceOp::kMin:
      return &Reduce<Format, Min>;
    case ReduceOp::kMax:
      return &Reduce<Format, Max>;
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
