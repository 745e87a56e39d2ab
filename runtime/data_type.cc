#include "runtime/data_type.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace relay {

const std::vector<DataType>& AllDataTypes() {
  static const auto* types = new std::vector<DataType>{
      DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
      DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
      DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
      DataType::kFloat64};
  return *types;
}

const std::vector<ReduceOp>& AllReduceOps() {
  static const auto* ops = new std::vector<ReduceOp>{
      ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
      ReduceOp::kAvg};
  return *ops;
}

bool IsFloatingPoint(DataType type) {
  switch (type) {
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
      return true;
    default:
      return false;
  }
}

absl::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
  }
  return "invalid";
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid";
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (DataType t : AllDataTypes()) {
    if (n == DataTypeName(t)) return t;
  }
  if (n == "float" || n == "fp32") return DataType::kFloat32;
  if (n == "double" || n == "fp64") return DataType::kFloat64;
  if (n == "half" || n == "fp16") return DataType::kFloat16;
  if (n == "bf16") return DataType::kBfloat16;
  if (n == "int") return DataType::kInt32;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown data type '", name,
      "' (expected int8, uint8, int32, uint32, int64, uint64, float16, "
      "bfloat16, float32 or float64)"));
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (ReduceOp op : AllReduceOps()) {
    if (n == ReduceOpName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduce op '", name, "' (expected sum, prod, min, max or avg)"));
}

}  // namespace relay
