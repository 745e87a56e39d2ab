// File: runtime/device_arithmetic.cuh
//
// The element arithmetic every relay reduction kernel shares (the device
// reductions of collectives/ and cuda_ipc's kernels), so that the GPU
// paths round exactly as the host kernels do: float16 and bfloat16 widen
// to float32, combine there and round once to nearest even; integer sums
// and products wrap (computed unsigned). Device code only: included by .cu
// files, through cuda_library's device_hdrs.
#ifndef RELAY_RUNTIME_DEVICE_ARITHMETIC_CUH_
#define RELAY_RUNTIME_DEVICE_ARITHMETIC_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace relay {
namespace device_arithmetic {

// The type each storage type is combined in.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type Widen(T v) { return v; }
template <> __device__ __forceinline__ float Widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float Widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T Narrow(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> __device__ __forceinline__ __half Narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 Narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// x op y in the combining type. kOp is a value of any enum with kProd,
// kMin and kMax; every other value sums (an average sums, then divides).
template <auto kOp, typename A>
__device__ __forceinline__ A Apply(A x, A y) {
  using Op = decltype(kOp);
  if constexpr (kOp == Op::kMin) {
    return y < x ? y : x;
  } else if constexpr (kOp == Op::kMax) {
    return x < y ? y : x;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::common_type_t<std::make_unsigned_t<A>, unsigned>;
    return static_cast<A>(kOp == Op::kProd ? static_cast<U>(x) * static_cast<U>(y)
                                           : static_cast<U>(x) + static_cast<U>(y));
  } else {
    return kOp == Op::kProd ? x * y : x + y;
  }
}

}  // namespace device_arithmetic
}  // namespace relay

#endif  // RELAY_RUNTIME_DEVICE_ARITHMETIC_CUH_
