// Built instead of ipc_kernels.cu where CUDA was not found at configure time.
#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {

int LaunchAllReduce(const IpcLaunch&, void*, KernelLauncher*) { return -1; }
int LaunchExchange(const IpcLaunch&, ExchangeKind, void*, KernelLauncher*) { return -1; }
int LaunchDirectAllGather(const IpcLaunch&, void*, KernelLauncher*) { return -1; }
int LaunchRefusedDirectAllGather(const IpcLaunch&, void*, KernelLauncher*) { return -1; }
int LaunchRefusedAllReduce(const IpcLaunch&, void*, KernelLauncher*) { return -1; }
int LaunchP2P(const P2PLaunch&, void*, KernelLauncher*) { return -1; }
int LaunchTeardownBarrier(const IpcLaunch&, void*) { return -1; }
int LoadTeardownKernel() { return -1; }
int LoadKernels() { return -1; }
bool KernelsBuilt() { return false; }

}  // namespace cuda_ipc
}  // namespace relay
