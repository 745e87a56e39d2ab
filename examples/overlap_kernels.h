// File: examples/overlap_kernels.h
//
// The two kernels of examples/overlap_streams.cc: a stand-in for a layer's
// backward pass and an SGD step. Each enqueues on `stream` (a cudaStream_t)
// and returns a cudaError_t as int (0: queued).
#ifndef RELAY_EXAMPLES_OVERLAP_KERNELS_H_
#define RELAY_EXAMPLES_OVERLAP_KERNELS_H_

#include <cstddef>

namespace relay_examples {

// grads[i] = (rank + 1) * (i % 1000) * scale, after `spin` rounds of busy
// work per element (to make the "backward pass" take a while).
int LaunchFakeBackward(float* grads, size_t n, int rank, float scale, int spin,
                       void* stream);
// params[i] -= lr * grads[i].
int LaunchSgdStep(float* params, const float* grads, size_t n, float lr,
                  void* stream);

}  // namespace relay_examples

#endif  // RELAY_EXAMPLES_OVERLAP_KERNELS_H_
