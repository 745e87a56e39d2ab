// What each CUDA call on relay's eager launch path costs the host on this
// machine: the floor under "host us" in bench/collectives' tables (a
// cuda_ipc call is a kernel launch, plus an event recorded on the caller's
// stream and waited on with StreamOrder::kAfterStream). Each call is timed
// in bursts of kBurst with the GPU drained between bursts, so the launch
// queue never fills; the median burst's time per call is printed.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

constexpr int kBurst = 32;
constexpr int kBursts = 300;

struct Params {  // About the size of cuda_ipc's IpcLaunch.
  void* pointers[16];
  unsigned long long words[12];
};

__global__ void Empty() {}
__global__ void WithParams(Params p) {
  if (p.words[0] == 1 && threadIdx.x == 0 && blockIdx.x == 0) p.words[1] = 0;
}

double MedianUs(const std::function<void()>& call, cudaStream_t drain) {
  std::vector<double> per_call;
  for (int b = 0; b < kBursts; ++b) {
    cudaStreamSynchronize(drain);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kBurst; ++i) call();
    const auto end = std::chrono::steady_clock::now();
    per_call.push_back(std::chrono::duration<double, std::micro>(end - start).count() / kBurst);
  }
  cudaDeviceSynchronize();
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace

int LaunchCostMain() {
  cudaSetDevice(0);
  cudaStream_t s = nullptr, other = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  unsigned* word = nullptr;
  cudaMalloc(&word, 4);
  cudaMemset(word, 0, 4);
  void* wait_fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait_fn, 12000, cudaEnableDefault,
                                   &q);
  auto wait_value = reinterpret_cast<CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned)>(
      wait_fn);
  Params p{};
  Empty<<<1, 32, 0, s>>>();
  cudaDeviceSynchronize();
  struct Row {
    const char* name;
    std::function<void()> call;
  };
  const Row rows[] = {
      {"kernel <<<1, 32>>>, no parameters", [&] { Empty<<<1, 32, 0, s>>>(); }},
      {"kernel <<<1, 512>>>, 224-byte parameter", [&] { WithParams<<<1, 512, 0, s>>>(p); }},
      {"kernel <<<64, 512>>>, 224-byte parameter", [&] { WithParams<<<64, 512, 0, s>>>(p); }},
      {"cudaGetLastError", [&] { cudaGetLastError(); }},
      {"cudaGetDevice", [&] { int d; cudaGetDevice(&d); }},
      {"cudaStreamIsCapturing", [&] {
         cudaStreamCaptureStatus c;
         cudaStreamIsCapturing(s, &c);
       }},
      {"cudaEventRecord", [&] { cudaEventRecord(e, other); }},
      {"cudaStreamWaitEvent", [&] { cudaStreamWaitEvent(s, e, 0); }},
      {"cuStreamWaitValue32 (met)", [&] {
         wait_value(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word), 0,
                    CU_STREAM_WAIT_VALUE_GEQ);
       }},
      {"cudaEventQuery", [&] { cudaEventQuery(e); }},
  };
  std::printf("| host call | us per call (median of %d bursts of %d) |\n|---|---:|\n", kBursts,
              kBurst);
  for (const Row& r : rows) std::printf("| %s | %.2f |\n", r.name, MedianUs(r.call, s));
  return 0;
}
