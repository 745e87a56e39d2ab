#include "collectives/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/data_type.h"
#include "runtime/float16.h"

namespace relay {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64: varied, reproducible test data.
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

// Per-dtype element helpers: a varied input for element i of operand `which`,
// and the reference result computed independently of the kernels.
template <typename T>
struct IntElem {
  using Storage = T;
  // Full-range values, so sums and products overflow (and must wrap).
  static T Input(size_t i, int which) {
    return static_cast<T>(Mix(2 * i + which));
  }
  // Wrapping arithmetic in uint64_t, truncated to T.
  static T Reduce(ReduceOp op, T a, T b) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return static_cast<T>(static_cast<uint64_t>(a) +
                              static_cast<uint64_t>(b));
      case ReduceOp::kProd:
        return static_cast<T>(static_cast<uint64_t>(a) *
                              static_cast<uint64_t>(b));
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
    }
    return 0;
  }
  static T Divide(T v, int d) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(v) / d);
    }
    return static_cast<T>(static_cast<uint64_t>(v) / static_cast<uint64_t>(d));
  }
  static std::string Show(T v) { return std::to_string(v); }
};

// Floats go through double. Inputs are halves in [-8, 8], so every sum and
// product is exact in every float type (bfloat16's 8 significant bits
// included): the rounded reference is the exact result.
template <typename Codec>
struct FloatElem {
  using Storage = typename Codec::Storage;
  static Storage Input(size_t i, int which) {
    const double v = (static_cast<int>(Mix(2 * i + which) % 33) - 16) * 0.5;
    return Codec::FromDouble(v);
  }
  static Storage Reduce(ReduceOp op, Storage a, Storage b) {
    const double x = Codec::ToDouble(a), y = Codec::ToDouble(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return Codec::FromDouble(x + y);
      case ReduceOp::kProd:
        return Codec::FromDouble(x * y);
      case ReduceOp::kMin:
        return Codec::FromDouble(std::min(x, y));
      case ReduceOp::kMax:
        return Codec::FromDouble(std::max(x, y));
    }
    return Storage{};
  }
  // Rounding the quotient to double, then float32, then the storage type is
  // the same as rounding it once (each format has over twice the next one's
  // precision), as the kernel's float32 division must be.
  static Storage Divide(Storage v, int d) {
    return Codec::FromDouble(Codec::ToDouble(v) / d);
  }
  static std::string Show(Storage v) {
    return std::to_string(Codec::ToDouble(v));
  }
};

template <typename T>
struct NativeCodec {
  using Storage = T;
  static T FromDouble(double d) { return static_cast<T>(d); }
  static double ToDouble(T v) { return v; }
};

struct HalfCodec {
  using Storage = uint16_t;
  static uint16_t FromDouble(double d) {
    return FloatToHalf(static_cast<float>(d));
  }
  static double ToDouble(uint16_t v) { return HalfToFloat(v); }
};

struct Bfloat16Codec {
  using Storage = uint16_t;
  static uint16_t FromDouble(double d) {
    return FloatToBfloat16(static_cast<float>(d));
  }
  static double ToDouble(uint16_t v) { return Bfloat16ToFloat(v); }
};

template <typename F>
void VisitElem(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kInt8: return f(IntElem<int8_t>{});
    case DataType::kUint8: return f(IntElem<uint8_t>{});
    case DataType::kInt32: return f(IntElem<int32_t>{});
    case DataType::kUint32: return f(IntElem<uint32_t>{});
    case DataType::kInt64: return f(IntElem<int64_t>{});
    case DataType::kUint64: return f(IntElem<uint64_t>{});
    case DataType::kFloat16: return f(FloatElem<HalfCodec>{});
    case DataType::kBfloat16: return f(FloatElem<Bfloat16Codec>{});
    case DataType::kFloat32: return f(FloatElem<NativeCodec<float>>{});
    case DataType::kFloat64: return f(FloatElem<NativeCodec<double>>{});
  }
  FAIL() << "invalid dtype";
}

// Bitwise equality (so -0 and +0 differ, as min/max ties must match too);
// reports the first mismatch only.
template <typename Elem, typename S>
void ExpectSameBits(const std::vector<S>& got, const std::vector<S>& want,
                    size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(S)) != 0) {
      ADD_FAILURE() << "element " << i << ": got " << Elem::Show(got[i])
                    << ", want " << Elem::Show(want[i]);
      return;
    }
  }
}

enum class Placement { kOutOfPlace, kOutIsA, kOutIsB };

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kOutOfPlace: return "out-of-place";
    case Placement::kOutIsA: return "out==a";
    case Placement::kOutIsB: return "out==b";
  }
  return "?";
}

class ReduceTest
    : public testing::TestWithParam<std::tuple<DataType, ReduceOp>> {};

TEST_P(ReduceTest, MatchesScalarReference) {
  const DataType dtype = std::get<0>(GetParam());
  const ReduceOp op = std::get<1>(GetParam());
  const ReduceKernel fn = GetReduceFn(dtype, op);
  ASSERT_NE(fn, nullptr);
  VisitElem(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using S = typename Elem::Storage;
    for (size_t count : {0, 1, 7, 1000, 1027}) {
      for (Placement placement : {Placement::kOutOfPlace, Placement::kOutIsA,
                                  Placement::kOutIsB}) {
        SCOPED_TRACE(testing::Message() << "count " << count << ", "
                                        << PlacementName(placement));
        std::vector<S> a(count), b(count), want(count);
        for (size_t i = 0; i < count; ++i) {
          a[i] = Elem::Input(i, 0);
          b[i] = Elem::Input(i, 1);
          want[i] = Elem::Reduce(op, a[i], b[i]);
        }
        // One spare element past the end checks that nothing is overrun.
        std::vector<S> out(count + 1, Elem::Input(count, 2));
        const S canary = out[count];
        switch (placement) {
          case Placement::kOutOfPlace:
            fn(a.data(), b.data(), out.data(), count);
            break;
          case Placement::kOutIsA:
            out.assign(a.begin(), a.end());
            out.push_back(canary);
            fn(out.data(), b.data(), out.data(), count);
            break;
          case Placement::kOutIsB:
            out.assign(b.begin(), b.end());
            out.push_back(canary);
            fn(a.data(), out.data(), out.data(), count);
            break;
        }
        ExpectSameBits<Elem>(out, want, count);
        EXPECT_EQ(std::memcmp(&out[count], &canary, sizeof(S)), 0);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAndOps, ReduceTest,
    testing::Combine(testing::ValuesIn(AllDataTypes()),
                     testing::ValuesIn(AllReduceOps())),
    [](const testing::TestParamInfo<ReduceTest::ParamType>& info) {
      return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
             std::string(ReduceOpName(std::get<1>(info.param)));
    });

class DivideTest : public testing::TestWithParam<DataType> {};

TEST_P(DivideTest, MatchesScalarReference) {
  const DataType dtype = GetParam();
  VisitElem(dtype, [&](auto elem) {
    using Elem = decltype(elem);
    using S = typename Elem::Storage;
    for (int divisor : {1, 3, 4}) {
      for (size_t count : {0, 1, 7, 1027}) {
        SCOPED_TRACE(testing::Message()
                     << "count " << count << ", divisor " << divisor);
        std::vector<S> data(count), want(count);
        for (size_t i = 0; i < count; ++i) {
          data[i] = Elem::Input(i, 0);
          want[i] = Elem::Divide(data[i], divisor);
        }
        DivideInPlace(dtype, data.data(), count, divisor);
        ExpectSameBits<Elem>(data, want, count);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, DivideTest, testing::ValuesIn(AllDataTypes()),
    [](const testing::TestParamInfo<DataType>& info) {
      return std::string(DataTypeName(info.param));
    });

TEST(GetReduceFnTest, InvalidValuesGiveNull) {
  EXPECT_EQ(GetReduceFn(static_cast<DataType>(200), ReduceOp::kSum), nullptr);
  EXPECT_EQ(GetReduceFn(DataType::kFloat32, static_cast<ReduceOp>(200)),
            nullptr);
}

TEST(GetReduceFnTest, AvgReducesAsSum) {
  for (DataType dtype : AllDataTypes()) {
    EXPECT_EQ(GetReduceFn(dtype, ReduceOp::kAvg),
              GetReduceFn(dtype, ReduceOp::kSum));
  }
}

// 16-bit float results where float32 must round: random finite halves (all
// exponents, subnormals included, sums and products overflowing to infinity)
// against the exact double result rounded to float16 (float32 in between is
// harmless: 24 >= 2 * 11 + 2).
TEST(ReduceRoundingTest, Float16RoundsOnceToNearestEven) {
  constexpr size_t kCount = 4099;
  std::vector<uint16_t> a(kCount), b(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<uint16_t>(Mix(i) % 0x7c00) | (i % 2 ? 0x8000 : 0);
    b[i] = static_cast<uint16_t>(Mix(i + kCount) % 0x7c00);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
    GetReduceFn(DataType::kFloat16, op)(a.data(), b.data(), out.data(),
                                        kCount);
    for (size_t i = 0; i < kCount; ++i) {
      const double x = HalfToFloat(a[i]), y = HalfToFloat(b[i]);
      const double exact = op == ReduceOp::kSum ? x + y : x * y;
      ASSERT_EQ(out[i], FloatToHalf(static_cast<float>(exact)))
          << ReduceOpName(op) << " " << x << ", " << y;
    }
  }
}

TEST(ReduceRoundingTest, Bfloat16RoundsOnceToNearestEven) {
  constexpr size_t kCount = 4099;
  std::vector<uint16_t> a(kCount), b(kCount), out(kCount);
  // Exponents within 2^-16..2^16 keep the double sum exact.
  for (size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<uint16_t>(((127 - 16 + Mix(i) % 32) << 7) |
                                 (Mix(~i) & 0x7f) | (i % 2 ? 0x8000 : 0));
    b[i] = static_cast<uint16_t>(((127 - 16 + Mix(i + kCount) % 32) << 7) |
                                 (Mix(~i - kCount) & 0x7f));
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
    GetReduceFn(DataType::kBfloat16, op)(a.data(), b.data(), out.data(),
                                         kCount);
    for (size_t i = 0; i < kCount; ++i) {
      const double x = Bfloat16ToFloat(a[i]), y = Bfloat16ToFloat(b[i]);
      const double exact = op == ReduceOp::kSum ? x + y : x * y;
      ASSERT_EQ(out[i], FloatToBfloat16(static_cast<float>(exact)))
          << ReduceOpName(op) << " " << x << ", " << y;
    }
  }
}

TEST(DivideInPlaceTest, IntegersTruncateTowardZero) {
  std::vector<int32_t> i32 = {-7, 7, -8, 9, 0, -1};
  DivideInPlace(DataType::kInt32, i32.data(), i32.size(), 2);
  EXPECT_EQ(i32, (std::vector<int32_t>{-3, 3, -4, 4, 0, 0}));

  std::vector<int8_t> i8 = {-128, 127, -5};
  DivideInPlace(DataType::kInt8, i8.data(), i8.size(), 200);
  EXPECT_EQ(i8, (std::vector<int8_t>{0, 0, 0}));
  i8 = {-128, 127, -5};
  DivideInPlace(DataType::kInt8, i8.data(), i8.size(), 3);
  EXPECT_EQ(i8, (std::vector<int8_t>{-42, 42, -1}));

  std::vector<uint8_t> u8 = {255, 7};
  DivideInPlace(DataType::kUint8, u8.data(), u8.size(), 2);
  EXPECT_EQ(u8, (std::vector<uint8_t>{127, 3}));

  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), -9};
  DivideInPlace(DataType::kInt64, i64.data(), i64.size(), 4);
  EXPECT_EQ(i64, (std::vector<int64_t>{-(int64_t{1} << 61), -2}));

  std::vector<uint64_t> u64 = {~uint64_t{0}};
  DivideInPlace(DataType::kUint64, u64.data(), u64.size(), 2);
  EXPECT_EQ(u64[0], ~uint64_t{0} >> 1);
}

TEST(DivideInPlaceTest, Floats) {
  std::vector<float> f32 = {1, -3, 0.5f, 10};
  DivideInPlace(DataType::kFloat32, f32.data(), f32.size(), 4);
  EXPECT_EQ(f32, (std::vector<float>{0.25f, -0.75f, 0.125f, 2.5f}));

  std::vector<double> f64 = {1, 2};
  DivideInPlace(DataType::kFloat64, f64.data(), f64.size(), 3);
  EXPECT_EQ(f64, (std::vector<double>{1.0 / 3, 2.0 / 3}));

  // 1/3 rounds once, from float32, to float16 0x3555 and bfloat16 0x3eab.
  std::vector<uint16_t> h = {0x3c00};  // 1.0
  DivideInPlace(DataType::kFloat16, h.data(), h.size(), 3);
  EXPECT_EQ(h[0], 0x3555);
  std::vector<uint16_t> bf = {0x3f80};  // 1.0
  DivideInPlace(DataType::kBfloat16, bf.data(), bf.size(), 3);
  EXPECT_EQ(bf[0], 0x3eab);
}

TEST(Float16Test, HalfToFloatEdgeCases) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(HalfToFloat(0x0000)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));   // Smallest normal.
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));   // Subnormals.
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // Signalling-NaN pattern.
}

TEST(Float16Test, FloatToHalfEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);  // Just below the midpoint.
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // Tie rounds to even: infinity.
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  const uint16_t nan = FloatToHalf(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // Ties to even among normals: 1 + 2^-11 is halfway between 0x3c00 and
  // 0x3c01, 1 + 3 * 2^-11 halfway between 0x3c01 and 0x3c02.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
  // Subnormals, their ties, and underflow.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // Tie to even.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // Tie to even.
  EXPECT_EQ(FloatToHalf(std::ldexp(2047.0f, -25)), 0x0400);  // Into normals.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(1e-40f), 0x0000);  // A float32 subnormal.
}

TEST(Float16Test, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const bool is_nan = (half & 0x7c00) == 0x7c00 && (half & 0x03ff) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(HalfToFloat(half))) << h;
    } else {
      ASSERT_EQ(FloatToHalf(HalfToFloat(half)), half) << h;
    }
  }
}

TEST(Bfloat16Test, EdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Bfloat16ToFloat(0x3f80), 1.0f);
  EXPECT_TRUE(std::signbit(Bfloat16ToFloat(0x8000)));
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBfloat16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBfloat16(inf), 0x7f80);
  EXPECT_EQ(FloatToBfloat16(-inf), 0xff80);
  // Ties to even: 1 + 2^-8 is halfway between 0x3f80 and 0x3f81.
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBfloat16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(
      FloatToBfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
      0x3f81);
  EXPECT_EQ(FloatToBfloat16(std::numeric_limits<float>::max()), 0x7f80);
  // NaN stays NaN, even one whose payload is only in the dropped bits.
  float nan_low_payload;
  const uint32_t bits = 0x7f800001u;
  std::memcpy(&nan_low_payload, &bits, sizeof(bits));
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(nan_low_payload))));
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(-std::nanf("")))));
}

TEST(Bfloat16Test, EveryBfloat16RoundTrips) {
  for (uint32_t v = 0; v <= 0xffff; ++v) {
    const uint16_t b = static_cast<uint16_t>(v);
    const float f = Bfloat16ToFloat(b);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(f)))) << v;
    } else {
      ASSERT_EQ(FloatToBfloat16(f), b) << v;
    }
  }
}

}  // namespace
}  // namespace relay
