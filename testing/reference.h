// File: testing/reference.h
//
// Test data and the reference results that relay's collectives are checked
// against. Inputs differ by rank and by index (uniform data hides bugs), and
// are small integers chosen per reduce op so that every result is exact in
// every DataType, whatever the order of reduction: sums stay within +-160,
// products within +-16. So results compare exactly, except averages of
// floating-point types, which compare within one rounding.
//
// Example:
//   std::vector<double> in = InputValues(DataType::kInt8, ReduceOp::kSum,
//                                        /*rank=*/2, /*count=*/100);
//   std::vector<char> bytes = Encode(DataType::kInt8, in);
#ifndef RELAY_TESTING_REFERENCE_H_
#define RELAY_TESTING_REFERENCE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/collective.h"
#include "runtime/data_type.h"

namespace relay {

// Element `i` of rank `rank`'s input, as an exact double.
double InputValue(DataType dtype, ReduceOp op, int rank, size_t i);
// Rank `rank`'s input: `count` values.
std::vector<double> InputValues(DataType dtype, ReduceOp op, int rank,
                                size_t count);

// One element of `dtype` at index `i` of `data`, written or read.
void EncodeAt(DataType dtype, double value, void* data, size_t i);
double DecodeAt(DataType dtype, const void* data, size_t i);

// Packs values into the bytes of `dtype`.
std::vector<char> Encode(DataType dtype, const std::vector<double>& values);
// Rank `rank`'s input as the bytes of `dtype`: Encode(InputValues(...))
// without the vector of doubles.
std::vector<char> InputBytes(DataType dtype, ReduceOp op, int rank,
                             size_t count);

// The value `op` makes of `values` (one element across ranks), in `dtype`'s
// arithmetic: integer averages truncate toward zero.
double ReduceValues(DataType dtype, ReduceOp op,
                    const std::vector<double>& values);

// Element `i` of the expected recv buffer of `rank` in a group of `size`
// whose every rank sent InputValues(dtype, op, r, ...), laid out as that
// rank passes it; `count` follows runtime/collective.h's per-rank
// convention. Computed on the fly, so large buffers are checked without
// materialising every rank's input. Only for elements where the recv buffer
// is defined (not reduce or gather off the root, nor barrier).
double ExpectedValue(CollectiveKind kind, DataType dtype, ReduceOp op,
                     int root, int rank, int size, size_t count, size_t i);

// Whether `got` is acceptable for `want` (exact, but for the one rounding
// of floating-point averages).
bool Matches(DataType dtype, ReduceOp op, double want, double got);

// Compares the `got_count` elements of `dtype` at `got` with ExpectedValue;
// returns how many differ, and appends a description of the first few to
// `detail` (when not null).
size_t CountWrong(CollectiveKind kind, DataType dtype, ReduceOp op, int root,
                  int rank, int size, size_t count, const void* got,
                  size_t got_count, std::string* detail);

}  // namespace relay

#endif  // RELAY_TESTING_REFERENCE_H_
