// File: examples/overlap_kernels.cu
#include <cuda_runtime.h>

#include "examples/overlap_kernels.h"

namespace relay_examples {
namespace {

__global__ void FakeBackward(float* grads, size_t n, int rank, float scale,
                             int spin) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    float v = float(rank + 1) * float(i % 1000) * scale;
    float noise = 0.f;
    for (int k = 0; k < spin; ++k) noise = noise * 0.5f + 1e-30f;  // busy work
    grads[i] = v + noise * 0.f;
  }
}

__global__ void SgdStep(float* params, const float* grads, size_t n, float lr) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    params[i] -= lr * grads[i];
  }
}

}  // namespace

int LaunchFakeBackward(float* grads, size_t n, int rank, float scale, int spin,
                       void* stream) {
  FakeBackward<<<264, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      grads, n, rank, scale, spin);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSgdStep(float* params, const float* grads, size_t n, float lr,
                  void* stream) {
  SgdStep<<<264, 256, 0, static_cast<cudaStream_t>(stream)>>>(params, grads,
                                                              n, lr);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace relay_examples
