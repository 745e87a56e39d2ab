#include "collectives/device_reduce.h"

#include "absl/strings/str_cat.h"
#include "collectives/device_reduce_kernels.h"

namespace relay {
namespace {

namespace dk = device_kernels;

dk::Type KernelType(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return dk::Type::kInt8;
    case DataType::kUint8: return dk::Type::kUint8;
    case DataType::kInt32: return dk::Type::kInt32;
    case DataType::kUint32: return dk::Type::kUint32;
    case DataType::kInt64: return dk::Type::kInt64;
    case DataType::kUint64: return dk::Type::kUint64;
    case DataType::kFloat16: return dk::Type::kFloat16;
    case DataType::kBfloat16: return dk::Type::kBFloat16;
    case DataType::kFloat32: return dk::Type::kFloat32;
    case DataType::kFloat64: return dk::Type::kFloat64;
  }
  return dk::Type::kFloat32;  // Unreached: callers validate dtype.
}

absl::Status Launched(int error, absl::string_view what) {
  if (error == 0) return absl::OkStatus();
  if (!dk::Compiled()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", dk::ErrorString(error)));
  }
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", error, ": ", dk::ErrorString(error)));
}

absl::Status CheckDtype(DataType dtype) {
  for (DataType d : AllDataTypes()) {
    if (d == dtype) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DeviceReduce: unknown dtype ", static_cast<int>(dtype)));
}

}  // namespace

bool DeviceReduceAvailable() {
  return dk::Compiled() && dk::DeviceCount() > 0;
}

absl::Status DeviceReduce(DataType dtype, ReduceOp op, const void* a,
                          const void* b, void* out, size_t count,
                          void* stream, int max_blocks) {
  if (absl::Status s = CheckDtype(dtype); !s.ok()) return s;
  if (max_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceReduce: max_blocks ", max_blocks, " < 0"));
  }
  if (count > 0 && (a == nullptr || b == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError(
        "DeviceReduce: null buffer with count > 0");
  }
  dk::Op kernel_op;
  switch (op) {
    case ReduceOp::kSum: kernel_op = dk::Op::kSum; break;
    case ReduceOp::kProd: kernel_op = dk::Op::kProd; break;
    case ReduceOp::kMin: kernel_op = dk::Op::kMin; break;
    case ReduceOp::kMax: kernel_op = dk::Op::kMax; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "DeviceReduce: op ", ReduceOpName(op),
          " is not element-wise; use kSum and then DeviceDivide for kAvg"));
  }
  return Launched(dk::Reduce(KernelType(dtype), kernel_op, a, b, out, count,
                             stream, max_blocks),
                  "DeviceReduce");
}

absl::Status DeviceDivide(DataType dtype, void* data, size_t count,
                          double divisor, void* stream) {
  if (absl::Status s = CheckDtype(dtype); !s.ok()) return s;
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError("DeviceDivide: null buffer with count > 0");
  }
  if (divisor == 0) return absl::InvalidArgumentError("DeviceDivide: divisor 0");
  return Launched(dk::Divide(KernelType(dtype), data, count, divisor, stream),
                  "DeviceDivide");
}

}  // namespace relay
