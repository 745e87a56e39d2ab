#include "testing/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/float16.h"

namespace relay {
namespace {

bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kUint32 ||
         t == DataType::kUint64;
}

template <typename T>
T Get(const void* data, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double InputValue(DataType dtype, ReduceOp op, int rank, size_t i) {
  const bool u = IsUnsigned(dtype);
  const long r = rank, k = static_cast<long>(i % 1000003);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      // [-5, 5] (or [0, 10]): 16 ranks sum within +-80 (160).
      return static_cast<double>((r * 7 + k * 3) % 11 - (u ? 0 : 5));
    case ReduceOp::kProd: {
      // Mostly +-1, a 2 where (rank + i) % 5 == 0: |product| <= 2^4 for
      // 16 ranks.
      const bool two = (r + k) % 5 == 0;
      const bool negative = !u && (r * 3 + k) % 2 == 1;
      return two ? 2.0 : (negative ? -1.0 : 1.0);
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<double>((r * 13 + k * 7) % 23 - (u ? 0 : 11));
  }
  return 0;
}

std::vector<double> InputValues(DataType dtype, ReduceOp op, int rank,
                                size_t count) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = InputValue(dtype, op, rank, i);
  return v;
}

void EncodeAt(DataType dtype, double x, void* data, size_t i) {
  char* p = static_cast<char*>(data);
  auto put = [&](auto v) { std::memcpy(p + i * sizeof(v), &v, sizeof(v)); };
  switch (dtype) {
    case DataType::kInt8: put(static_cast<int8_t>(x)); break;
    case DataType::kUint8: put(static_cast<uint8_t>(x)); break;
    case DataType::kInt32: put(static_cast<int32_t>(x)); break;
    case DataType::kUint32: put(static_cast<uint32_t>(x)); break;
    case DataType::kInt64: put(static_cast<int64_t>(x)); break;
    case DataType::kUint64: put(static_cast<uint64_t>(x)); break;
    case DataType::kFloat16: put(FloatToHalf(static_cast<float>(x))); break;
    case DataType::kBfloat16: put(FloatToBfloat16(static_cast<float>(x))); break;
    case DataType::kFloat32: put(static_cast<float>(x)); break;
    case DataType::kFloat64: put(x); break;
  }
}

double DecodeAt(DataType dtype, const void* data, size_t i) {
  switch (dtype) {
    case DataType::kInt8: return Get<int8_t>(data, i);
    case DataType::kUint8: return Get<uint8_t>(data, i);
    case DataType::kInt32: return Get<int32_t>(data, i);
    case DataType::kUint32: return Get<uint32_t>(data, i);
    case DataType::kInt64: return static_cast<double>(Get<int64_t>(data, i));
    case DataType::kUint64: return static_cast<double>(Get<uint64_t>(data, i));
    case DataType::kFloat16: return HalfToFloat(Get<uint16_t>(data, i));
    case DataType::kBfloat16: return Bfloat16ToFloat(Get<uint16_t>(data, i));
    case DataType::kFloat32: return Get<float>(data, i);
    case DataType::kFloat64: return Get<double>(data, i);
  }
  return 0;
}

std::vector<char> Encode(DataType dtype, const std::vector<double>& values) {
  std::vector<char> out(values.size() * DataTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    EncodeAt(dtype, values[i], out.data(), i);
  }
  return out;
}

std::vector<char> InputBytes(DataType dtype, ReduceOp op, int rank,
                             size_t count) {
  std::vector<char> out(count * DataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    EncodeAt(dtype, InputValue(dtype, op, rank, i), out.data(), i);
  }
  return out;
}

double ReduceValues(DataType dtype, ReduceOp op,
                    const std::vector<double>& values) {
  double acc = values.front();
  for (size_t i = 1; i < values.size(); ++i) {
    const double x = values[i];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += x; break;
      case ReduceOp::kProd: acc *= x; break;
      case ReduceOp::kMin: acc = std::min(acc, x); break;
      case ReduceOp::kMax: acc = std::max(acc, x); break;
    }
  }
  if (op == ReduceOp::kAvg) {
    acc /= static_cast<double>(values.size());
    if (!IsFloatingPoint(dtype)) acc = std::trunc(acc);
  }
  return acc;
}

double ExpectedValue(CollectiveKind kind, DataType dtype, ReduceOp op,
                     int root, int rank, int size, size_t count, size_t i) {
  const size_t me = static_cast<size_t>(rank);
  auto reduced = [&](size_t index) {
    // Reused: this runs once per element checked, and an allocation per
    // element made checking a 1 GB row take a minute (bench/collectives).
    thread_local std::vector<double> column;
    column.resize(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) column[r] = InputValue(dtype, op, r, index);
    return ReduceValues(dtype, op, column);
  };
  switch (kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kReduce:
      return reduced(i);
    case CollectiveKind::kReduceScatter:
      return reduced(me * count + i);
    case CollectiveKind::kBroadcast:
      return InputValue(dtype, op, root, i);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      return InputValue(dtype, op, static_cast<int>(i / count), i % count);
    case CollectiveKind::kScatter:
      return InputValue(dtype, op, root, me * count + i);
    case CollectiveKind::kAllToAll:
      return InputValue(dtype, op, static_cast<int>(i / count),
                        me * count + i % count);
    case CollectiveKind::kBarrier:
      break;
  }
  return 0;
}

namespace {

// Averages of floats divide an exact sum once, in float32 for the 16-bit
// types: allow that one rounding.
double Tolerance(DataType dtype, ReduceOp op) {
  if (op != ReduceOp::kAvg || !IsFloatingPoint(dtype)) return 0;
  return dtype == DataType::kFloat16    ? 1e-3
         : dtype == DataType::kBfloat16 ? 8e-3
         : dtype == DataType::kFloat32  ? 1e-6
                                        : 1e-12;
}

}  // namespace

bool Matches(DataType dtype, ReduceOp op, double want, double got) {
  return std::fabs(want - got) <=
         Tolerance(dtype, op) * std::max(1.0, std::fabs(want));
}

size_t CountWrong(CollectiveKind kind, DataType dtype, ReduceOp op, int root,
                  int rank, int size, size_t count, const void* got,
                  size_t got_count, std::string* detail) {
  size_t wrong = 0;
  for (size_t i = 0; i < got_count; ++i) {
    const double want =
        ExpectedValue(kind, dtype, op, root, rank, size, count, i);
    const double value = DecodeAt(dtype, got, i);
    if (Matches(dtype, op, want, value)) continue;
    if (detail != nullptr && wrong < 5) {
      absl::StrAppend(detail, " [", i, "] want ", want, " got ", value, ";");
    }
    ++wrong;
  }
  return wrong;
}

}  // namespace relay
