// The device reduction kernels: one grid-stride loop per dtype x op, moving
// 16 bytes per thread per load (uint4), with the tail done element by
// element. Where the three pointers sit at the same offset from a 16-byte
// boundary (a block of an aligned buffer starting mid-vector, the same in
// both inputs and the output), the elements up to that boundary go first,
// element by element, and the rest as vectors. Where their offsets differ,
// the whole call goes element by element (ReduceScalarKernel), several
// times slower: relay's schedules start their blocks on 16-element
// boundaries for that reason (collectives/schedule.h, BlockPartition). Memory-bound by design: the target is the
// device-to-device copy bandwidth (two inputs, one output: 1.5x a copy's
// bytes), so nothing here is compute-heavy. float16 and bfloat16 are widened
// to float32 for the arithmetic and rounded back to nearest even, as the
// host kernels do.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "collectives/device_reduce_kernels.h"
#include "runtime/device_arithmetic.cuh"

namespace relay {
namespace device_kernels {
namespace {

constexpr int kThreads = 512;

using device_arithmetic::Acc;
using device_arithmetic::Apply;
using device_arithmetic::Narrow;
using device_arithmetic::Widen;

template <Op kOp, typename T>
__device__ __forceinline__ T ApplyOne(T a, T b) {
  return Narrow<T>(Apply<kOp>(Widen(a), Widen(b)));
}

// One thread, 16 bytes of each input.
template <Op kOp, typename T>
__device__ __forceinline__ uint4 ApplyVector(uint4 a, uint4 b) {
  constexpr int kLanes = 16 / sizeof(T);
  union U { uint4 v; T e[kLanes]; };
  U x{a}, y{b}, r;
#pragma unroll
  for (int i = 0; i < kLanes; ++i) r.e[i] = ApplyOne<kOp>(x.e[i], y.e[i]);
  return r.v;
}

// Elements [0, head) one by one (head < 16 / sizeof(T): those before the
// first 16-byte boundary), then vectors [0, vectors) of 16 bytes each from
// element `head`, then elements [tail_begin, count).
template <Op kOp, typename T>
__global__ void __launch_bounds__(kThreads)
ReduceKernel(const T* __restrict__ a, const T* __restrict__ b, T* out,
             size_t head, size_t vectors, size_t tail_begin, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (first < head) out[first] = ApplyOne<kOp>(a[first], b[first]);
  const uint4* va = reinterpret_cast<const uint4*>(a + head);
  const uint4* vb = reinterpret_cast<const uint4*>(b + head);
  uint4* vo = reinterpret_cast<uint4*>(out + head);
  // Two vectors in flight per thread before the first use.
  size_t i = first;
  for (; i + stride < vectors; i += 2 * stride) {
    const uint4 a0 = va[i], b0 = vb[i];
    const uint4 a1 = va[i + stride], b1 = vb[i + stride];
    vo[i] = ApplyVector<kOp, T>(a0, b0);
    vo[i + stride] = ApplyVector<kOp, T>(a1, b1);
  }
  if (i < vectors) vo[i] = ApplyVector<kOp, T>(va[i], vb[i]);
  for (size_t j = tail_begin + first; j < count; j += stride) {
    out[j] = ApplyOne<kOp>(a[j], b[j]);
  }
}

// Pointers at different offsets from a 16-byte boundary: element by element.
template <Op kOp, typename T>
__global__ void __launch_bounds__(kThreads)
ReduceScalarKernel(const T* a, const T* b, T* out, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < count; j += stride) {
    out[j] = ApplyOne<kOp>(a[j], b[j]);
  }
}

template <typename T>
__global__ void DivideKernel(T* data, size_t count, double divisor) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       j < count; j += stride) {
    using A = typename Acc<T>::type;
    if constexpr (std::is_integral_v<A>) {
      data[j] = static_cast<T>(static_cast<A>(data[j]) / static_cast<A>(divisor));
    } else {
      data[j] = Narrow<T>(static_cast<A>(Widen(data[j]) / static_cast<A>(divisor)));
    }
  }
}

// Blocks to launch: enough to fill every multiprocessor several times over,
// no more than the work needs, and no more than `cap` where that is > 0.
int Blocks(size_t work_items, int cap = 0) {
  static const int max_blocks = [] {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return (sms > 0 ? sms : 80) * 4;
  }();
  const size_t needed = (work_items + kThreads - 1) / kThreads;
  const int most = cap > 0 && cap < max_blocks ? cap : max_blocks;
  return static_cast<int>(needed < 1 ? 1 : (needed < static_cast<size_t>(most) ? needed : most));
}

template <Op kOp, typename T>
int LaunchTyped(const void* a, const void* b, void* out, size_t count,
                cudaStream_t stream, int cap) {
  if (count == 0) return cudaSuccess;
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(a) & 15;
  const bool same_offset = (reinterpret_cast<uintptr_t>(b) & 15) == offset &&
                           (reinterpret_cast<uintptr_t>(out) & 15) == offset;
  if (!same_offset || offset % sizeof(T) != 0) {
    ReduceScalarKernel<kOp, T><<<Blocks(count, cap), kThreads, 0, stream>>>(pa, pb, po, count);
  } else {
    constexpr size_t kLanes = 16 / sizeof(T);
    const size_t to_boundary = offset == 0 ? 0 : (16 - offset) / sizeof(T);
    const size_t head = to_boundary < count ? to_boundary : count;
    const size_t vectors = (count - head) / kLanes;
    ReduceKernel<kOp, T><<<Blocks(vectors > 0 ? (vectors + 1) / 2 : 1, cap), kThreads, 0, stream>>>(
        pa, pb, po, head, vectors, head + vectors * kLanes, count);
  }
  return cudaGetLastError();
}

template <typename T>
int LaunchOp(Op op, const void* a, const void* b, void* out, size_t count,
             cudaStream_t s, int cap) {
  switch (op) {
    case Op::kSum: return LaunchTyped<Op::kSum, T>(a, b, out, count, s, cap);
    case Op::kProd: return LaunchTyped<Op::kProd, T>(a, b, out, count, s, cap);
    case Op::kMin: return LaunchTyped<Op::kMin, T>(a, b, out, count, s, cap);
    case Op::kMax: return LaunchTyped<Op::kMax, T>(a, b, out, count, s, cap);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
int LaunchDivide(void* data, size_t count, double divisor, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  DivideKernel<T><<<Blocks(count), kThreads, 0, s>>>(static_cast<T*>(data), count, divisor);
  return cudaGetLastError();
}

// cudaFuncGetAttributes loads a kernel (see LoadAll).
template <typename K>
cudaError_t Load(K kernel, cudaError_t so_far) {
  if (so_far != cudaSuccess) return so_far;
  cudaFuncAttributes a;
  return cudaFuncGetAttributes(&a, kernel);
}

template <typename T>
cudaError_t LoadType(cudaError_t e) {
  e = Load(ReduceScalarKernel<Op::kSum, T>, e);
  e = Load(ReduceKernel<Op::kSum, T>, e);
  e = Load(ReduceScalarKernel<Op::kProd, T>, e);
  e = Load(ReduceKernel<Op::kProd, T>, e);
  e = Load(ReduceScalarKernel<Op::kMin, T>, e);
  e = Load(ReduceKernel<Op::kMin, T>, e);
  e = Load(ReduceScalarKernel<Op::kMax, T>, e);
  e = Load(ReduceKernel<Op::kMax, T>, e);
  return Load(DivideKernel<T>, e);
}

constexpr int kMaxDevices = 64;
std::once_flag loaded_once[kMaxDevices];
cudaError_t loaded_error[kMaxDevices];

}  // namespace

int LoadAll() {
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(loaded_once[device], [device] {
    cudaError_t r = cudaSuccess;
    r = LoadType<int8_t>(r);
    r = LoadType<uint8_t>(r);
    r = LoadType<int32_t>(r);
    r = LoadType<uint32_t>(r);
    r = LoadType<int64_t>(r);
    r = LoadType<uint64_t>(r);
    r = LoadType<__half>(r);
    r = LoadType<__nv_bfloat16>(r);
    r = LoadType<float>(r);
    r = LoadType<double>(r);
    loaded_error[device] = r;
  });
  return loaded_error[device];
}

bool Compiled() { return true; }

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // Clear it: no GPU is not an error for the caller.
    return 0;
  }
  return n;
}

int Reduce(Type type, Op op, const void* a, const void* b, void* out,
           size_t count, void* stream, int max_blocks) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case Type::kInt8: return LaunchOp<int8_t>(op, a, b, out, count, s, max_blocks);
    case Type::kUint8: return LaunchOp<uint8_t>(op, a, b, out, count, s, max_blocks);
    case Type::kInt32: return LaunchOp<int32_t>(op, a, b, out, count, s, max_blocks);
    case Type::kUint32: return LaunchOp<uint32_t>(op, a, b, out, count, s, max_blocks);
    case Type::kInt64: return LaunchOp<int64_t>(op, a, b, out, count, s, max_blocks);
    case Type::kUint64: return LaunchOp<uint64_t>(op, a, b, out, count, s, max_blocks);
    case Type::kFloat16: return LaunchOp<__half>(op, a, b, out, count, s, max_blocks);
    case Type::kBFloat16: return LaunchOp<__nv_bfloat16>(op, a, b, out, count, s, max_blocks);
    case Type::kFloat32: return LaunchOp<float>(op, a, b, out, count, s, max_blocks);
    case Type::kFloat64: return LaunchOp<double>(op, a, b, out, count, s, max_blocks);
  }
  return cudaErrorInvalidValue;
}

int Divide(Type type, void* data, size_t count, double divisor, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case Type::kInt8: return LaunchDivide<int8_t>(data, count, divisor, s);
    case Type::kUint8: return LaunchDivide<uint8_t>(data, count, divisor, s);
    case Type::kInt32: return LaunchDivide<int32_t>(data, count, divisor, s);
    case Type::kUint32: return LaunchDivide<uint32_t>(data, count, divisor, s);
    case Type::kInt64: return LaunchDivide<int64_t>(data, count, divisor, s);
    case Type::kUint64: return LaunchDivide<uint64_t>(data, count, divisor, s);
    case Type::kFloat16: return LaunchDivide<__half>(data, count, divisor, s);
    case Type::kBFloat16: return LaunchDivide<__nv_bfloat16>(data, count, divisor, s);
    case Type::kFloat32: return LaunchDivide<float>(data, count, divisor, s);
    case Type::kFloat64: return LaunchDivide<double>(data, count, divisor, s);
  }
  return cudaErrorInvalidValue;
}

const char* ErrorString(int error) {
  return cudaGetErrorString(static_cast<cudaError_t>(error));
}

}  // namespace device_kernels
}  // namespace relay
