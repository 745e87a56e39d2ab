// File: collectives/reduce.h
//
// Host reduction kernels: out[i] = a[i] (op) b[i] for every DataType and
// ReduceOp, DivideInPlace to finish an average, and CopyIfDistinct, which
// moves a block that needs no reduction (a lone contribution, a gathered
// block) unless it is in place already. The kernels are SIMD,
// using AVX2 and F16C on x86-64 CPUs that have them (chosen at run time, so
// binaries still run on any x86-64), and single-threaded.
//
// Semantics.
//   Integers wrap on overflow. float16 and bfloat16 are computed in float32 and
//   rounded (to nearest even) once per element per call. min/max behave like
//   std::min/std::max (NaN handling is unspecified). kAvg reduces as kSum; the
//   caller divides the final result by the rank count with DivideInPlace.
//   `out` may be `a` or `b` exactly; partial overlap is not supported.
//
// Example (in-place ring step: acc = acc + incoming):
//   ReduceKernel fn = GetReduceFn(DataType::kBfloat16, ReduceOp::kAvg);
//   fn(acc, incoming, acc, count);
//   ...                                      // after the last step:
//   DivideInPlace(DataType::kBfloat16, acc, count, world_size);
#ifndef RELAY_COLLECTIVES_REDUCE_H_
#define RELAY_COLLECTIVES_REDUCE_H_

#include <cstddef>
#include <cstring>

#include "runtime/data_type.h"

namespace relay {

// Same signature as relay::ReduceFn in runtime/transport.h, declared here so
// that this library needs only //runtime:data_type.
using ReduceKernel = void (*)(const void* a, const void* b, void* out,
                              size_t count);

// The kernel for `dtype` and `op`; nullptr if either is not a valid enum value.
ReduceKernel GetReduceFn(DataType dtype, ReduceOp op);

// data[i] /= divisor, with divisor > 0 (the rank count). Floats divide in their
// own precision (float16/bfloat16 through float32, rounding once); integers
// use integer division, truncating toward zero. No-op for an invalid dtype.
void DivideInPlace(DataType dtype, void* data, size_t count, int divisor);

// memcpy, unless `dst` is `src` (an in-place call: validation lets a call's
// buffers be the very same memory or disjoint, never partly overlapping)
// or there is nothing to copy.
inline void CopyIfDistinct(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace relay

#endif  // RELAY_COLLECTIVES_REDUCE_H_
