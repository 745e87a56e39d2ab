// LoadKernels (ipc_kernels.h): every launch function called once for each
// choice its dispatch makes (dtype, op, protocol, kind, alignment) through
// a launcher that loads the kernel it is handed instead of queueing it.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>

#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {
namespace {

// cudaFuncGetAttributes loads a kernel without launching it.
class Loader final : public KernelLauncher {
 public:
  int Launch(const void* func, int, int, void**, size_t, void*) override {
    if (error_ != 0 || !loaded_.insert(func).second) return 0;
    cudaFuncAttributes attributes;
    error_ = static_cast<int>(cudaFuncGetAttributes(&attributes, func));
    return 0;
  }
  int error() const { return error_; }

 private:
  std::set<const void*> loaded_;
  int error_ = 0;
};

constexpr IpcType kTypes[] = {
    IpcType::kInt8,  IpcType::kUint8,   IpcType::kInt32,    IpcType::kUint32,  IpcType::kInt64,
    IpcType::kUint64, IpcType::kFloat16, IpcType::kBfloat16, IpcType::kFloat32, IpcType::kFloat64,
};
constexpr IpcOp kOps[] = {IpcOp::kSum, IpcOp::kProd, IpcOp::kMin, IpcOp::kMax, IpcOp::kAvg};
constexpr ExchangeKind kKinds[] = {
    ExchangeKind::kAllGather, ExchangeKind::kBroadcast,     ExchangeKind::kAllToAll,
    ExchangeKind::kGather,    ExchangeKind::kScatter,       ExchangeKind::kReduceScatter,
    ExchangeKind::kReduce,
};
// Byte offsets from a 16-byte boundary: every width the kernels pick
// (16, 8, 4, 2 and 1 byte) by the addresses' alignment. Nothing is read or
// written: the launcher only loads.
constexpr uintptr_t kOffsets[] = {0, 8, 4, 2, 1};
constexpr uintptr_t kBase = uintptr_t{1} << 20;

int LoadAll() {
  Loader loader;
  const auto at = [](uintptr_t offset) { return reinterpret_cast<void*>(kBase + offset); };
  for (uintptr_t offset : kOffsets) {
    IpcLaunch p;
    p.size = 2;
    p.count = 4096;
    p.stride = 4096 + offset;
    p.input = at(offset);
    p.output = at(offset);
    for (int r = 0; r < p.size; ++r) p.peer_outputs[r] = at(offset);
    for (IpcType type : kTypes) {
      for (IpcOp op : kOps) {
        p.type = type;
        p.op = op;
        for (int low_latency : {kFlagBarriers, kLowLatencyWords, kLowLatencyLines}) {
          p.low_latency = low_latency;
          for (int two_shot : {0, 1}) {
            p.two_shot = two_shot;
            LaunchAllReduce(p, nullptr, &loader);
          }
          p.two_shot = 0;
          if (low_latency == kLowLatencyLines) continue;
          for (ExchangeKind kind : kKinds) LaunchExchange(p, kind, nullptr, &loader);
        }
      }
    }
    LaunchDirectAllGather(p, nullptr, &loader);
    P2PLaunch l;
    l.base = p;
    l.ops = 1;
    l.op[0].data = at(offset);
    l.op[0].bytes = 4096;
    LaunchP2P(l, nullptr, &loader);
  }
  LaunchRefusedDirectAllGather(IpcLaunch{}, nullptr, &loader);
  if (loader.error() != 0) return loader.error();
  return LoadTeardownKernel();
}

}  // namespace

int LoadKernels() {
  static std::mutex mu;
  static std::set<int> loaded;  // Devices; guarded by mu.
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return static_cast<int>(e);
  std::lock_guard<std::mutex> lock(mu);
  if (loaded.count(device) != 0) return 0;
  const int error = LoadAll();
  if (error == 0) loaded.insert(device);
  return error;
}

}  // namespace cuda_ipc
}  // namespace relay
