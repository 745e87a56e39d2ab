// What each CUDA call on relay's eager launch path costs the host on this
// machine: the floor under "host us" in bench/collectives' tables (a
// cuda_ipc call is a kernel launch, plus an event recorded on the caller's
// stream and waited on with StreamOrder::kAfterStream). Each call is timed
// in bursts of kBurst with the GPU drained between bursts, so the launch
// queue never fills; the median burst's time per call is printed. Then the
// GPU's time per call (calls queued behind a busy stream), and the eager
// sequences in loops of 20 to 2000 calls with the GPU running them.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

namespace {

constexpr int kBurst = 32;
constexpr int kBursts = 300;

struct Params {  // About the size of cuda_ipc's IpcLaunch.
  void* pointers[16];
  unsigned long long words[12];
};

__global__ void Empty() {}
// Holds its stream for about `ns` nanoseconds, so calls queue up behind it.
__global__ void Spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
// A kernel that tells the host it is done (cuda_ipc's kernels did, design
// note finding 45): one thread stores into host-mapped memory after the
// block's barrier, with release at system scope, or plainly.
__global__ void CountToHost(unsigned* word, int release) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (release) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(1u) : "memory");
  } else {
    *reinterpret_cast<volatile unsigned*>(word) = 1;
  }
}
// A call as cuda_ipc's kernels make it: waits for the kernel before it
// (griddepcontrol.wait: its end and its memory), lets the next launch,
// then works for about `ns` nanoseconds.
__global__ void Dependent(unsigned long long ns) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
__global__ void WithParams(Params p) {
  if (p.words[0] == 1 && threadIdx.x == 0 && blockIdx.x == 0) p.words[1] = 0;
}
// What cuda_ipc's flag barrier costs a kernel: every thread fences at
// system scope (Raise), or one thread stores with release semantics.
__global__ void FenceEveryThread(unsigned* word) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) *reinterpret_cast<volatile unsigned*>(word) = 1;
}
__global__ void ReleaseOneThread(unsigned* word) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(word), "r"(1u) : "memory");
  }
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

// The GPU's time per call: kCalls calls queued behind a spinning kernel,
// timed from its end to the last call's end by events.
double GpuUs(const std::function<void()>& call, cudaStream_t s) {
  constexpr int kCalls = 500;
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  Spin<<<1, 1, 0, s>>>(20'000'000ull);
  cudaEventRecord(begin, s);
  for (int i = 0; i < kCalls; ++i) call();
  cudaEventRecord(end, s);
  cudaEventSynchronize(end);
  float ms = 0;
  cudaEventElapsedTime(&ms, begin, end);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return ms * 1000.0 / kCalls;
}

// A loop of `n` calls with the GPU running them as they come (nothing
// holds the stream): the host's time per call while queueing them, and the
// time per call until the last has run. Median of 5 loops.
struct Loop {
  double host_us;
  double all_us;
};
Loop LoopUs(const std::function<void()>& call, int n) {
  std::vector<double> host, all;
  for (int k = 0; k < 5; ++k) {
    cudaDeviceSynchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) call();
    const auto queued = std::chrono::steady_clock::now();
    cudaDeviceSynchronize();
    const auto end = std::chrono::steady_clock::now();
    host.push_back(std::chrono::duration<double, std::micro>(queued - start).count() / n);
    all.push_back(std::chrono::duration<double, std::micro>(end - start).count() / n);
  }
  std::sort(host.begin(), host.end());
  std::sort(all.begin(), all.end());
  return {host[2], all[2]};
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
  void* launch_fn = nullptr;
  cudaGetDriverEntryPointByVersion("cuLaunchKernel", &launch_fn, 12000, cudaEnableDefault, &q);
  auto cu_launch = reinterpret_cast<CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
                                                 unsigned, unsigned, unsigned, unsigned,
                                                 CUstream, void**, void**)>(launch_fn);
  cudaFunction_t with_params = nullptr;
  cudaGetFuncBySymbol(&with_params, reinterpret_cast<const void*>(&WithParams));
  Params p{};
  void* args[] = {&p};
  // A graph of one kernel node, launched whole.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal);
  WithParams<<<1, 512, 0, other>>>(p);
  cudaStreamEndCapture(other, &graph);
  cudaGraphInstantiate(&graph_exec, graph, 0);
  cudaGraphNode_t node = nullptr;
  size_t nodes = 1;
  cudaGraphGetNodes(graph, &node, &nodes);
  cudaKernelNodeParams node_params{};
  node_params.func = reinterpret_cast<void*>(&WithParams);
  node_params.gridDim = dim3(1);
  node_params.blockDim = dim3(512);
  node_params.kernelParams = args;
  // Each call's own completion event, as cuda_ipc takes one per call.
  cudaEvent_t ready = nullptr;
  cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  std::vector<cudaEvent_t> done(64);
  for (cudaEvent_t& d : done) cudaEventCreateWithFlags(&d, cudaEventDisableTiming);
  size_t next_done = 0;
  auto next_event = [&] { return done[next_done++ % done.size()]; };
  Empty<<<1, 32, 0, s>>>();
  cudaDeviceSynchronize();
  // A second thread polling an event every 50 us, as relay's watchdog does
  // while calls are in flight: the driver calls share its locks.
  // Or, as relay's watchdog does, the completion events the loop records
  // (the newest and the one 8 before it, every 50 us).
  std::atomic<bool> polling{false}, polling_own{false}, stop{false};
  std::atomic<size_t> recorded{0};
  std::thread poller([&] {
    cudaSetDevice(0);
    while (!stop.load()) {
      if (polling.load()) cudaEventQuery(e);
      if (polling_own.load()) {
        const size_t n = recorded.load(std::memory_order_relaxed);
        if (n > 8) {
          cudaEventQuery(done[(n - 9) % done.size()]);
          cudaEventQuery(done[(n - 1) % done.size()]);
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  struct Row {
    const char* name;
    std::function<void()> call;
  };
  // cuda_ipc's eager call: after the caller's stream (`caller`: an event
  // recorded on it, waited on by the transport's stream), or on it.
  auto after_stream = [&](cudaStream_t caller) {
    cudaEventRecord(ready, caller);
    cudaStreamWaitEvent(s, ready, 0);
    cudaGraphLaunch(graph_exec, s);
    cudaEventRecord(next_event(), s);
    recorded.store(next_done, std::memory_order_relaxed);  // A plain store on x86.
  };
  auto on_stream = [&] {
    cudaGraphLaunch(graph_exec, s);
    cudaEventRecord(next_event(), s);
    recorded.store(next_done, std::memory_order_relaxed);  // A plain store on x86.
  };
  const Row rows[] = {
      {"kernel <<<1, 32>>>, no parameters", [&] { Empty<<<1, 32, 0, s>>>(); }},
      {"kernel <<<1, 512>>>, 224-byte parameter", [&] { WithParams<<<1, 512, 0, s>>>(p); }},
      {"kernel <<<64, 512>>>, 224-byte parameter", [&] { WithParams<<<64, 512, 0, s>>>(p); }},
      {"cudaLaunchKernel <<<1, 512>>>, 224-byte parameter", [&] {
         cudaLaunchKernel(reinterpret_cast<const void*>(&WithParams), dim3(1), dim3(512), args,
                          0, s);
       }},
      {"cuLaunchKernel (driver) <<<1, 512>>>, 224-byte parameter", [&] {
         cu_launch(reinterpret_cast<CUfunction>(with_params), 1, 1, 1, 512, 1, 1, 0,
                   reinterpret_cast<CUstream>(s), args, nullptr);
       }},
      {"cudaGraphLaunch, one kernel node", [&] { cudaGraphLaunch(graph_exec, s); }},
      {"cudaGraphExecKernelNodeSetParams", [&] {
         p.words[0] ^= 2;  // New parameters each call.
         cudaGraphExecKernelNodeSetParams(graph_exec, node, &node_params);
       }},
      {"cudaGraphExecKernelNodeSetParams + cudaGraphLaunch", [&] {
         p.words[0] ^= 2;
         cudaGraphExecKernelNodeSetParams(graph_exec, node, &node_params);
         cudaGraphLaunch(graph_exec, s);
       }},
      {"after the stream: record, wait, cudaGraphLaunch, record (cuda_ipc)",
       [&] { after_stream(other); }},
      {"the same after the legacy default stream (record on it)",
       [&] { after_stream(cudaStreamLegacy); }},
      {"on the stream: cudaGraphLaunch, record (cuda_ipc)", on_stream},
      {"kernel <<<1, 512>>> while a thread polls an event every 50 us", [&] {
         polling.store(true);
         WithParams<<<1, 512, 0, s>>>(p);
       }},
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
  for (const Row& r : rows) {
    std::printf("| %s | %.2f |\n", r.name, MedianUs(r.call, s));
    polling.store(false);
  }
  std::printf("\n| queued behind a busy stream | GPU us per call (500 calls) |\n|---|---:|\n");
  std::printf("| kernel <<<1, 512>>>, 224-byte parameter | %.2f |\n",
              GpuUs([&] { WithParams<<<1, 512, 0, s>>>(p); }, s));
  std::printf("| kernel <<<1, 512>>>, every thread __threadfence_system | %.2f |\n",
              GpuUs([&] { FenceEveryThread<<<1, 512, 0, s>>>(word); }, s));
  std::printf("| kernel <<<1, 512>>>, one thread st.release.sys | %.2f |\n",
              GpuUs([&] { ReleaseOneThread<<<1, 512, 0, s>>>(word); }, s));
  {
    unsigned* host_word = nullptr;
    unsigned* host_word_on_device = nullptr;
    cudaHostAlloc(reinterpret_cast<void**>(&host_word), 4, cudaHostAllocMapped);
    cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_word_on_device), host_word, 0);
    std::printf("| kernel <<<1, 512>>>, one thread st.release.sys to host-mapped memory | %.2f |\n",
                GpuUs([&] { CountToHost<<<1, 512, 0, s>>>(host_word_on_device, 1); }, s));
    std::printf("| kernel <<<1, 512>>>, one thread's plain store to host-mapped memory | %.2f |\n",
                GpuUs([&] { CountToHost<<<1, 512, 0, s>>>(host_word_on_device, 0); }, s));
    cudaDeviceSynchronize();
    cudaFreeHost(host_word);
  }
  std::printf("| kernel <<<64, 512>>>, every thread __threadfence_system | %.2f |\n",
              GpuUs([&] { FenceEveryThread<<<64, 512, 0, s>>>(word); }, s));
  std::printf("| cudaGraphExecKernelNodeSetParams + cudaGraphLaunch | %.2f |\n", GpuUs([&] {
                p.words[0] ^= 2;
                cudaGraphExecKernelNodeSetParams(graph_exec, node, &node_params);
                cudaGraphLaunch(graph_exec, s);
              }, s));
  std::printf("| after the stream: record, wait, cudaGraphLaunch, record | %.2f |\n",
              GpuUs([&] { after_stream(other); }, s));
  // Loops as a benchmark runs them: does the host's share grow with the
  // queue's length?
  const Row loops[] = {
      {"kernel <<<1, 512>>>, 224-byte parameter", [&] { WithParams<<<1, 512, 0, s>>>(p); }},
      {"cudaGraphLaunch, one kernel node", [&] { cudaGraphLaunch(graph_exec, s); }},
      {"on the stream: cudaGraphLaunch, record", on_stream},
      {"after the stream: record, wait, cudaGraphLaunch, record", [&] { after_stream(other); }},
      {"the same, a thread polling an event every 50 us", [&] {
         polling.store(true);
         after_stream(other);
       }},
      {"the same, a thread polling the loop's own events every 50 us", [&] {
         polling_own.store(true);
         after_stream(other);
       }},
      {"on the stream, a thread polling the loop's own events every 50 us", [&] {
         polling_own.store(true);
         on_stream();
       }},
  };
  std::printf("\n| a loop of N calls, the GPU running them | host us a call, N = 20 / 200 / 2000 "
              "| us a call to the last one's end, N = 20 / 200 / 2000 |\n|---|---:|---:|\n");
  for (const Row& r : loops) {
    Loop l[3];
    const int lengths[3] = {20, 200, 2000};
    for (int k = 0; k < 3; ++k) l[k] = LoopUs(r.call, lengths[k]);
    std::printf("| %s | %.2f / %.2f / %.2f | %.2f / %.2f / %.2f |\n", r.name, l[0].host_us,
                l[1].host_us, l[2].host_us, l[0].all_us, l[1].all_us, l[2].all_us);
    polling.store(false);
    polling_own.store(false);
  }
  // Does a launch overlap the end of the kernel before it? Each call is
  // Dependent(2 us), queued behind a busy stream: the GPU's time a call
  // beyond the 2 us is what it spends between two calls. A direct launch
  // may carry the programmatic-serialization attribute (cuda_ipc's launch
  // from RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES); CUDA documents it for
  // launches only, so the graph rows ask whether a graph's kernel node
  // keeps it (captured from such a launch, or set as the node's
  // attribute) across separate cudaGraphLaunch calls.
  {
    constexpr unsigned long long kWorkNs = 2000;
    unsigned long long work = kWorkNs;
    void* dep_args[] = {&work};
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    auto launch_dependent = [&](cudaStream_t on, bool programmatic) {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(1);
      config.blockDim = dim3(512);
      config.stream = on;
      config.attrs = programmatic ? &pdl : nullptr;
      config.numAttrs = programmatic ? 1 : 0;
      return cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(&Dependent), dep_args);
    };
    auto capture_one = [&](bool programmatic) {
      cudaGraph_t g = nullptr;
      cudaGraphExec_t exec = nullptr;
      cudaStreamBeginCapture(other, cudaStreamCaptureModeThreadLocal);
      const cudaError_t launched = launch_dependent(other, programmatic);
      cudaStreamEndCapture(other, &g);
      if (launched != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
        std::printf("| (capture with programmatic=%d failed: %s) | |\n", programmatic,
                    cudaGetErrorString(launched));
        cudaGetLastError();
      }
      cudaGraphDestroy(g);
      return exec;
    };
    // A node added by cudaGraphAddKernelNode (as cuda_ipc's GraphLauncher
    // builds them), then given the attribute.
    cudaKernelNodeParams dep_node{};
    dep_node.func = reinterpret_cast<void*>(&Dependent);
    dep_node.gridDim = dim3(1);
    dep_node.blockDim = dim3(512);
    dep_node.kernelParams = dep_args;
    cudaGraph_t added_g = nullptr;
    cudaGraphNode_t added_n = nullptr;
    cudaGraphCreate(&added_g, 0);
    cudaGraphAddKernelNode(&added_n, added_g, nullptr, 0, &dep_node);
    cudaKernelNodeAttrValue attr_value{};
    attr_value.programmaticStreamSerializationAllowed = 1;
    const cudaError_t set_attr = cudaGraphKernelNodeSetAttribute(
        added_n, cudaLaunchAttributeProgrammaticStreamSerialization, &attr_value);
    cudaGetLastError();
    cudaGraphExec_t attr_exec = nullptr;
    const cudaError_t attr_inst = cudaGraphInstantiate(&attr_exec, added_g, 0);
    cudaGetLastError();
    cudaGraphExec_t plain_exec = capture_one(false);
    cudaGraphExec_t pdl_exec = capture_one(true);
    std::printf("\n| a 2 us kernel queued behind a busy stream | GPU us per call (500 calls) "
                "| host us per call |\n|---|---:|---:|\n");
    std::printf("| (node attribute set: %s; instantiated: %s) | | |\n",
                cudaGetErrorString(set_attr), cudaGetErrorString(attr_inst));
    const Row overlap[] = {
        {"<<<1, 512>>>", [&] { Dependent<<<1, 512, 0, s>>>(work); }},
        {"cudaLaunchKernelEx, programmatic serialization",
         [&] { launch_dependent(s, true); }},
        {"cudaGraphLaunch, captured from a plain launch",
         [&] { cudaGraphLaunch(plain_exec, s); }},
        {"cudaGraphLaunch, captured from a programmatic launch",
         [&] { cudaGraphLaunch(pdl_exec, s); }},
        {"cudaGraphLaunch, added node with the attribute", [&] {
           if (attr_exec != nullptr) cudaGraphLaunch(attr_exec, s);
         }},
    };
    for (const Row& r : overlap) {
      const double gpu = GpuUs(r.call, s);
      std::printf("| %s | %.2f | %.2f |\n", r.name, gpu, MedianUs(r.call, s));
    }
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
      std::printf("| (overlap rows failed: %s) | | |\n", cudaGetErrorString(e));
    }
    for (cudaGraphExec_t g : {plain_exec, pdl_exec, attr_exec}) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    cudaGraphDestroy(added_g);
  }
  // The driver's entry points, called directly: what cudart's wrapper adds.
  {
    void* graph_launch_fn = nullptr;
    cudaGetDriverEntryPointByVersion("cuGraphLaunch", &graph_launch_fn, 12000,
                                     cudaEnableDefault, &q);
    auto cu_graph_launch =
        reinterpret_cast<CUresult (*)(CUgraphExec, CUstream)>(graph_launch_fn);
    void* capturing_fn = nullptr;
    cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &capturing_fn, 12000,
                                     cudaEnableDefault, &q);
    auto cu_is_capturing = reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureStatus*)>(
        capturing_fn);
    void* id_fn = nullptr;
    cudaGetDriverEntryPointByVersion("cuStreamGetId", &id_fn, 12000, cudaEnableDefault, &q);
    auto cu_stream_id = reinterpret_cast<CUresult (*)(CUstream, unsigned long long*)>(id_fn);
    std::printf("\n| runtime call against the driver's | host us per call (runtime / driver) "
                "|\n|---|---:|\n");
    std::printf("| cudaGraphLaunch / cuGraphLaunch | %.2f / %.2f |\n",
                MedianUs([&] { cudaGraphLaunch(graph_exec, s); }, s),
                MedianUs([&] {
                  cu_graph_launch(reinterpret_cast<CUgraphExec>(graph_exec),
                                  reinterpret_cast<CUstream>(s));
                }, s));
    std::printf("| cudaStreamIsCapturing / cuStreamIsCapturing | %.2f / %.2f |\n",
                MedianUs([&] {
                  cudaStreamCaptureStatus c;
                  cudaStreamIsCapturing(s, &c);
                }, s),
                MedianUs([&] {
                  CUstreamCaptureStatus c;
                  cu_is_capturing(reinterpret_cast<CUstream>(s), &c);
                }, s));
    std::printf("| cudaStreamGetId / cuStreamGetId | %.2f / %.2f |\n", MedianUs([&] {
                  unsigned long long id;
                  cudaStreamGetId(s, &id);
                }, s),
                MedianUs([&] {
                  unsigned long long id;
                  cu_stream_id(reinterpret_cast<CUstream>(s), &id);
                }, s));
  }
  // What of relay's process might slow a graph relaunch: its allocations
  // (a 1 GiB arena, host-mapped flags) and its graphs (one per kernel).
  auto relaunch_loop = [&] { return LoopUs([&] { cudaGraphLaunch(graph_exec, s); }, 2000); };
  std::printf("\n| cudaGraphLaunch in a loop of 2000, the process holding | host us a call |\n"
              "|---|---:|\n");
  std::printf("| nothing more | %.2f |\n", relaunch_loop().host_us);
  void* arena = nullptr;
  cudaMalloc(&arena, size_t{1} << 30);
  std::printf("| a 1 GiB device allocation | %.2f |\n", relaunch_loop().host_us);
  int* mapped = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&mapped), 8, cudaHostAllocMapped);
  std::printf("| and 8 bytes of mapped host memory | %.2f |\n", relaunch_loop().host_us);
  std::vector<cudaGraphExec_t> more(32);
  for (cudaGraphExec_t& g : more) cudaGraphInstantiate(&g, graph, 0);
  std::printf("| and 32 more instances of the graph | %.2f |\n", relaunch_loop().host_us);
  for (cudaGraphExec_t& g : more) cudaGraphExecDestroy(g);
  // The same kernel node built by cudaGraphAddKernelNode, as cuda_ipc's
  // GraphLauncher builds its graphs, instead of captured from a stream.
  cudaGraph_t added = nullptr;
  cudaGraphExec_t added_exec = nullptr;
  cudaGraphNode_t added_node = nullptr;
  cudaGraphCreate(&added, 0);
  cudaGraphAddKernelNode(&added_node, added, nullptr, 0, &node_params);
  cudaGraphInstantiate(&added_exec, added, 0);
  std::printf("| a graph built by cudaGraphAddKernelNode instead | %.2f |\n",
              LoopUs([&] { cudaGraphLaunch(added_exec, s); }, 2000).host_us);
  std::printf("| the captured graph again | %.2f |\n", relaunch_loop().host_us);
  cudaGraphExecDestroy(added_exec);
  cudaGraphDestroy(added);
  cudaFreeHost(mapped);
  cudaFree(arena);
  stop.store(true);
  poller.join();
  return 0;
}
