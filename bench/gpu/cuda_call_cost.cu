// File: bench/gpu/cuda_call_cost.cu
//
// What the CUDA calls on relay's NCCL path cost, each timed in a loop on a
// one-rank NCCL communicator: host time per call, then time per operation
// with the GPU included (N operations, then a synchronize). Built by hand on
// a build host and run on a GPU host (results in
// bench/results/2026-11-23-nccl-transport-1gpu-h100/cuda_call_cost.txt):
//   nvcc -std=c++17 -O2 bench/gpu/cuda_call_cost.cu -lnccl -cudart static
#include <cuda_runtime.h>
#include <nccl.h>
#include <chrono>
#include <cstdio>
template <typename F> double Time(const char* name, int n, F f) {
  auto a = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f(i);
  auto b = std::chrono::steady_clock::now();
  double us = std::chrono::duration<double, std::micro>(b - a).count() / n;
  std::printf("%-40s %8.3f us\n", name, us);
  return us;
}
int main() {
  cudaSetDevice(0);
  cudaStream_t s, caller;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
  cudaEvent_t ev[64];
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  ncclComm_t comm; ncclUniqueId id; ncclGetUniqueId(&id); ncclCommInitRank(&comm, 1, id, 0);
  float* d; cudaMalloc(&d, 1 << 20);
  const int n = 20000;
  int dev;
  Time("cudaGetDevice", n, [&](int) { cudaGetDevice(&dev); });
  cudaStreamCaptureStatus cs;
  Time("cudaStreamIsCapturing(legacy)", n, [&](int) { cudaStreamIsCapturing(cudaStreamLegacy, &cs); });
  Time("cudaStreamQuery(legacy, idle)", n, [&](int) { cudaStreamQuery(cudaStreamLegacy); });
  Time("cudaEventRecord(legacy)", n, [&](int i) { cudaEventRecord(ev[i % 64], cudaStreamLegacy); });
  cudaDeviceSynchronize();
  Time("cudaStreamWaitEvent", n, [&](int i) { cudaStreamWaitEvent(s, ev[i % 64], 0); });
  cudaDeviceSynchronize();
  Time("cudaEventRecord(own stream)", n, [&](int i) { cudaEventRecord(ev[i % 64], s); });
  Time("cudaEventQuery", n, [&](int i) { cudaEventQuery(ev[i % 64]); });
  cudaDeviceSynchronize();
  Time("ncclAllReduce 8 B alone", n, [&](int) { ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, s); });
  cudaDeviceSynchronize();
  Time("ncclAllReduce + eventRecord", n, [&](int i) { ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, s); cudaEventRecord(ev[i % 64], s); });
  cudaDeviceSynchronize();
  Time("query+record+wait+allreduce+record", n, [&](int i) {
    cudaStreamIsCapturing(cudaStreamLegacy, &cs); cudaStreamQuery(cudaStreamLegacy);
    cudaEventRecord(ev[(2*i) % 64], cudaStreamLegacy); cudaStreamWaitEvent(s, ev[(2*i) % 64], 0);
    ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, s); cudaEventRecord(ev[(2*i+1) % 64], s); });
  cudaDeviceSynchronize();
  Time("capt+query+allreduce+record", n, [&](int i) {
    cudaStreamIsCapturing(cudaStreamLegacy, &cs); cudaStreamQuery(cudaStreamLegacy);
    ncclAllReduce(d, d, 2, ncclFloat, ncclSum, comm, s); cudaEventRecord(ev[i % 64], s); });
  cudaDeviceSynchronize();
  cudaPointerAttributes attr;
  Time("cudaPointerGetAttributes", n, [&](int) { cudaPointerGetAttributes(&attr, d); });
  float* e; cudaMalloc(&e, 1 << 20);
  auto synced = [&](const char* name, auto body) {
    for (int i = 0; i < 500; ++i) body(i);
    cudaStreamSynchronize(s);
    Time(name, n, [&](int i) { body(i); if (i == n - 1) cudaStreamSynchronize(s); });
  };
  synced("GPU-incl: allreduce oop", [&](int) { ncclAllReduce(d, e, 2, ncclFloat, ncclSum, comm, s); });
  synced("GPU-incl: allreduce oop + record", [&](int i) { ncclAllReduce(d, e, 2, ncclFloat, ncclSum, comm, s); cudaEventRecord(ev[i % 64], s); });
  synced("GPU-incl: wait(legacy ev) + oop + record", [&](int i) { cudaEventRecord(ev[(2*i) % 64], cudaStreamLegacy); cudaStreamWaitEvent(s, ev[(2*i) % 64], 0); ncclAllReduce(d, e, 2, ncclFloat, ncclSum, comm, s); cudaEventRecord(ev[(2*i+1) % 64], s); });
  return 0;
}
