// File: transports/cuda_ipc/graph_launcher.h
//
// GraphLauncher: queues cuda_ipc's kernels through one-node CUDA graphs,
// one per kernel function, whose parameters and grid each launch replaces
// (cudaGraphExecKernelNodeSetParams, then cudaGraphLaunch), or only
// relaunches it where they are the same bytes as the last launch's (a
// loop over the same buffers). On an H200 host a relaunch with new
// parameters costs the host 2.8 us, one without 1.9 us, against 4.2-4.4
// us for a kernel launch, and the GPU 0.1 us more a call
// (bench/gpu/launch_cost): an eager small collective is bound by the
// host's share. A launch is ordered behind the
// previous launches of the same graph, as the transport's calls already
// are (one at a time, in posting order). Not for a stream being captured:
// there the kernel is launched, and the captured graph holds it.
//
// One caller at a time (the transport's enqueue lock), on the transport's
// device; the graphs are destroyed with it, after its work has finished.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_GRAPH_LAUNCHER_H_
#define RELAY_TRANSPORTS_CUDA_IPC_GRAPH_LAUNCHER_H_

#include <cuda_runtime.h>

#include <vector>

#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {

class GraphLauncher final : public KernelLauncher {
 public:
  GraphLauncher() = default;
  ~GraphLauncher() override;
  GraphLauncher(const GraphLauncher&) = delete;
  GraphLauncher& operator=(const GraphLauncher&) = delete;

  int Launch(const void* func, int blocks, int threads, void** args, size_t param_bytes,
             void* stream) override;

 private:
  struct Graph {
    const void* func = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaGraphNode_t node = nullptr;
    // What the node holds now: grid, block and the parameter's bytes.
    int blocks = 0;
    int threads = 0;
    std::vector<char> params;
  };
  // Its graph for `func`, made on first use; null if CUDA refused.
  Graph* For(const cudaKernelNodeParams& params);

  std::vector<Graph> graphs_;  // A few kernels a job: a short list.
};

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_GRAPH_LAUNCHER_H_
