// bench/gpu/issue_cost: what each CUDA and NCCL call on relay's NCCL
// transport's hot path costs the issuing host thread, to explain where the
// transport's added latency goes. One GPU, a one-rank NCCL communicator;
// each call is repeated N times back to back and its mean host time printed
// (the GPU work, where there is any, is only queued).
//
// Usage (GPU host): issue_cost [N]    (default 20000)
#include <cuda.h>  // Types of the driver entry points only.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

#define CHECK(x)                                               \
  do {                                                         \
    if (!(x)) {                                                \
      std::fprintf(stderr, "issue_cost: %s failed\n", #x);     \
      std::exit(1);                                            \
    }                                                          \
  } while (0)

void Time(const char* what, int n, const std::function<void()>& call,
          cudaStream_t sync) {
  for (int i = 0; i < 100; ++i) call();
  cudaStreamSynchronize(sync);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) call();
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  cudaStreamSynchronize(sync);
  std::printf("%-48s %8.3f us\n", what, us / n);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  CHECK(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t blocking, nonblocking;
  CHECK(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking) == cudaSuccess);
  void* buf = nullptr;
  CHECK(cudaMalloc(&buf, 1 << 20) == cudaSuccess);
  std::vector<cudaEvent_t> events(n + 100);
  for (cudaEvent_t& e : events) {
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  }
  ncclComm_t comm;
  int dev = 0;
  CHECK(ncclCommInitAll(&comm, 1, &dev) == ncclSuccess);
  int k = 0;
  cudaPointerAttributes attr;
  Time("cudaPointerGetAttributes", n, [&] { cudaPointerGetAttributes(&attr, buf); }, blocking);
  Time("cudaGetDevice", n, [&] { int d; cudaGetDevice(&d); }, blocking);
  Time("cudaEventRecord (blocking stream)", n,
       [&] { cudaEventRecord(events[k++ % events.size()], blocking); }, blocking);
  Time("cudaEventRecord (legacy stream)", n,
       [&] { cudaEventRecord(events[k++ % events.size()], 0); }, blocking);
  Time("cudaEventQuery (completed event)", n, [&] { cudaEventQuery(events[0]); }, blocking);
  Time("cudaEventRecord + cudaStreamWaitEvent", n, [&] {
    cudaEvent_t e = events[k++ % events.size()];
    cudaEventRecord(e, nonblocking);
    cudaStreamWaitEvent(blocking, e, 0);
  }, blocking);
  Time("ncclAllReduce 8 B (blocking stream)", n, [&] {
    ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, blocking);
  }, blocking);
  Time("ncclAllReduce 8 B (non-blocking stream)", n, [&] {
    ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, nonblocking);
  }, nonblocking);
  Time("ncclAllReduce 8 B + cudaEventRecord", n, [&] {
    ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, blocking);
    cudaEventRecord(events[k++ % events.size()], blocking);
  }, blocking);
  // What relay's stream executor paid per run before its streams and
  // events were pooled (collectives/device_stream_ops.cc), against the
  // query that now decides whether a pooled stream may be reused.
  Time("cudaStreamCreate + cudaStreamDestroy (non-blocking)", n / 10, [&] {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamDestroy(s);
  }, blocking);
  Time("cudaEventCreate + cudaEventDestroy", n, [&] {
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    cudaEventDestroy(e);
  }, blocking);
  ncclResult_t async;
  Time("ncclCommGetAsyncError", n, [&] { ncclCommGetAsyncError(comm, &async); }, blocking);
  // A completion marker without an event: the GPU writes a counter in
  // host-mapped memory after the work (a stream memory operation), so
  // whether work finished is a memory read instead of cudaEventQuery.
  // Through the driver's entry point, so nothing links libcuda.
  using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  using WaitValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  void* write_fn = nullptr;
  void* wait_fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  uint64_t* counter = nullptr;
  void* counter_on_device = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &write_fn, 12000,
                                       cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess &&
      cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &wait_fn, 12000,
                                       cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess &&
      cudaHostAlloc(reinterpret_cast<void**>(&counter), sizeof(uint64_t),
                    cudaHostAllocMapped) == cudaSuccess &&
      cudaHostGetDevicePointer(&counter_on_device, counter, 0) == cudaSuccess) {
    *counter = 0;
    const auto write = reinterpret_cast<WriteValue64>(write_fn);
    const auto wait = reinterpret_cast<WaitValue64>(wait_fn);
    const auto where = reinterpret_cast<CUdeviceptr>(counter_on_device);
    uint64_t value = 0;
    Time("cuStreamWriteValue64 (host-mapped counter)", n, [&] {
      write(reinterpret_cast<CUstream>(blocking), where, ++value, 0);
    }, blocking);
    Time("ncclAllReduce 8 B + cuStreamWriteValue64", n, [&] {
      ncclAllReduce(buf, buf, 2, ncclFloat32, ncclSum, comm, blocking);
      write(reinterpret_cast<CUstream>(blocking), where, ++value, 0);
    }, blocking);
    Time("cuStreamWaitValue64 (reached value)", n, [&] {
      wait(reinterpret_cast<CUstream>(nonblocking), where, 1,
           CU_STREAM_WAIT_VALUE_GEQ);
    }, nonblocking);
    volatile uint64_t seen = 0;
    Time("read of the host-mapped counter", n, [&] {
      seen = *static_cast<volatile uint64_t*>(counter);
    }, blocking);
    std::printf("# counter after the writes: %llu (expected %llu)\n",
                static_cast<unsigned long long>(*counter),
                static_cast<unsigned long long>(value));
  } else {
    std::printf("# stream memory operations: not available (%s)\n",
                cudaGetErrorString(cudaGetLastError()));
  }
  ncclCommDestroy(comm);
  return 0;
}
