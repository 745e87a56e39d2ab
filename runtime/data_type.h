// File: runtime/data_type.h
//
// DataType (the element types relay moves and reduces) and ReduceOp (the
// reductions), with their sizes, names and parsers.
//
// float16 and bfloat16 are stored as their 16-bit patterns; reductions on them
// accumulate in float32 and round once per reduction (see collectives/reduce.h).
//
// Example:
//   absl::StatusOr<DataType> t = ParseDataType("bfloat16");
//   size_t bytes = count * DataTypeSize(*t);
#ifndef RELAY_RUNTIME_DATA_TYPE_H_
#define RELAY_RUNTIME_DATA_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/float16.h"

namespace relay {

enum class DataType : uint8_t {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
};

// Integer types wrap around on overflow (two's complement, as unsigned
// arithmetic does), and kAvg divides the sum by the group size truncating
// toward zero (7 and 8 on two ranks average to 7). Floating types follow
// IEEE: float16 and bfloat16 accumulate in float32 and round once.
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };

// Every value of each enum, in declaration order (for sweeps and tests).
const std::vector<DataType>& AllDataTypes();
const std::vector<ReduceOp>& AllReduceOps();

// False for values outside the enum (a cast from a corrupt integer).
inline bool IsValid(DataType type) {
  return static_cast<uint8_t>(type) <= static_cast<uint8_t>(DataType::kFloat64);
}
inline bool IsValid(ReduceOp op) {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kAvg);
}
bool IsFloatingPoint(DataType type);

// Bytes per element; 0 for an invalid type. Inline: every call asks it.
inline size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

// Lower-case names as nccl-tests prints them: "float32" also parses as
// "float", "fp32"; "sum", "prod", "min", "max", "avg".
absl::string_view DataTypeName(DataType type);
absl::string_view ReduceOpName(ReduceOp op);
absl::StatusOr<DataType> ParseDataType(absl::string_view name);
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// Maps a C++ element type to its DataType (for typed buffer helpers).
template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<int8_t> { static constexpr DataType value = DataType::kInt8; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUint8; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<uint32_t> { static constexpr DataType value = DataType::kUint32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<uint64_t> { static constexpr DataType value = DataType::kUint64; };
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct DataTypeOf<Float16> { static constexpr DataType value = DataType::kFloat16; };
template <> struct DataTypeOf<BFloat16> { static constexpr DataType value = DataType::kBfloat16; };

}  // namespace relay

#endif  // RELAY_RUNTIME_DATA_TYPE_H_
