// File: runtime/float16.h
//
// Conversions between float32 and the two 16-bit float formats relay carries
// as raw bit patterns: IEEE binary16 (float16) and bfloat16. To float32 is
// exact. From float32 rounds to nearest, ties to even, subnormals included;
// NaN stays NaN (quiet), infinities and signed zeros are kept, and overflow
// gives infinity.
//
// Portable bit manipulation, header-only, independent of the FPU's rounding
// and flush-to-zero modes. No float operation is conditional, so GCC can turn
// the branches into selects and vectorise loops that call these (as
// collectives/reduce.cc does).
//
// Example:
//   uint16_t h = FloatToHalf(1.5f);        // 0x3e00
//   float f = HalfToFloat(h);              // 1.5f
//   uint16_t b = FloatToBfloat16(-2.0f);   // 0xc000
#ifndef RELAY_RUNTIME_FLOAT16_H_
#define RELAY_RUNTIME_FLOAT16_H_

#include <cstdint>
#include <cstring>

namespace relay {
namespace float16_internal {

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline uint32_t ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace float16_internal

inline float HalfToFloat(uint16_t h) {
  using float16_internal::FromBits;
  using float16_internal::ToBits;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // Normal: rebias the exponent from 15 to 127.
  uint32_t bits = ((exp + 112u) << 23) | (mant << 13);
  // Infinity and NaN keep their mantissa (NaN payload) at exponent 255.
  if (exp == 0x1fu) bits = 0x7f800000u | (mant << 13);
  // Zero and subnormals are exactly mant * 2^-24. That is computed always and
  // picked with a mask, not a branch: GCC will not if-convert (so not
  // vectorise) a loop with a conditional float operation.
  const uint32_t sub = ToBits(static_cast<float>(mant) * 0x1p-24f);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(exp == 0);
  bits = (bits & ~is_sub) | (sub & is_sub);
  return FromBits(bits | sign);
}

inline uint16_t FloatToHalf(float value) {
  uint32_t f = float16_internal::ToBits(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  const uint32_t exp = f >> 23;
  uint32_t out;
  if (f >= (143u << 23)) {
    // |value| >= 2^16 overflows; NaN becomes the canonical quiet NaN.
    out = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (exp < 113u) {
    // |value| < 2^-14: a subnormal or zero, i.e. the significand shifted
    // right by 126 - exp in units of 2^-24. Beyond 25 every bit is dropped
    // (and float subnormals, exp 0, land there too).
    const uint32_t mant = (f & 0x7fffffu) | 0x800000u;
    const uint32_t shift = exp < 101u ? 25u : 126u - exp;
    const uint32_t odd = (mant >> shift) & 1u;
    // Round to nearest even: add just under half, plus the kept LSB.
    out = (mant + (1u << (shift - 1)) - 1u + odd) >> shift;
  } else {
    // Normal: rebias and round on the 13 dropped bits the same way. A carry
    // into the exponent is right, up to infinity for [65520, 65536).
    const uint32_t odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
    out = f >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

inline float Bfloat16ToFloat(uint16_t b) {
  return float16_internal::FromBits(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBfloat16(float value) {
  const uint32_t f = float16_internal::ToBits(value);
  // Round to nearest even on the 16 dropped bits, as in FloatToHalf.
  uint32_t bits = f + 0x7fffu + ((f >> 16) & 1u);
  // Rounding could carry a NaN's payload into infinity, so NaNs are truncated
  // with the quiet bit set instead. (Selecting before the shift, and comparing
  // as signed, keeps the vectorised code to one narrowing and no bias.)
  if (static_cast<int32_t>(f & 0x7fffffffu) > 0x7f800000) bits = f | 0x400000u;
  return static_cast<uint16_t>(bits >> 16);
}

// Element types for float16 and bfloat16 buffers, so that
// ConstBuffer::Of(std::vector<Float16>) carries the right DataType: the
// 16-bit pattern, converted to and from float explicitly (round to nearest
// even), with no arithmetic of their own.
//   std::vector<BFloat16> grads(n, BFloat16(0.5f));
//   comm.AllReduce(ConstBuffer::Of(grads), Buffer::Of(grads), ReduceOp::kAvg);
//   float first = static_cast<float>(grads[0]);
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float value) : bits(FloatToHalf(value)) {}
  explicit operator float() const { return HalfToFloat(bits); }
  friend bool operator==(Float16 a, Float16 b) { return a.bits == b.bits; }
  friend bool operator!=(Float16 a, Float16 b) { return a.bits != b.bits; }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value) : bits(FloatToBfloat16(value)) {}
  explicit operator float() const { return Bfloat16ToFloat(bits); }
  friend bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
  friend bool operator!=(BFloat16 a, BFloat16 b) { return a.bits != b.bits; }
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

}  // namespace relay

#endif  // RELAY_RUNTIME_FLOAT16_H_
