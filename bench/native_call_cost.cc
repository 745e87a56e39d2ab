// File: bench/native_call_cost.cc
//
// The host cost of relay's own layers on a native collective call, with no
// GPU: a one-rank communicator over a transport that offers native
// collectives on device memory and completes each call at once (what the
// NCCL transport does around its CUDA calls is not in it). Prints ns per
// call of Communicator::AllReduce on an 8-element "device" buffer, best of
// several rounds, so the communicator's share of the time relay adds to a
// small NCCL call can be measured on any machine.
//
// Usage: bazel run -c opt //bench:native_call_cost -- [CALLS] [ROUNDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "relay.h"
#include "runtime/communicator.h"
#include "runtime/store.h"
#include "runtime/transport.h"

namespace relay {
namespace {

// Native collectives on device memory, each complete when started.
class CompletingTransport final : public Transport {
 public:
  absl::string_view name() const override { return "completing"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = false;
    caps.device_memory = true;
    caps.native_collectives = true;
    caps.stream_ordered = true;
    caps.matches_tags = false;
    return caps;
  }
  absl::StatusOr<Request> Isend(int, Tag, ConstBuffer, absl::Time) override {
    return Request::Completed();
  }
  absl::StatusOr<Request> Irecv(int, Tag, Buffer, absl::Time) override {
    return Request::Completed();
  }
  absl::StatusOr<Request> Collective(const CollectiveArgs&) override {
    return Request::Completed();
  }
  void Abort(absl::Status) override {}
};

class CompletingFactory final : public TransportFactory {
 public:
  absl::string_view name() const override { return "completing"; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig&) override {
    return std::unique_ptr<Transport>(new CompletingTransport());
  }
};

int Run(int calls, int rounds) {
  CompletingFactory factory;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(
      factory, DefaultEngine(), std::make_shared<InMemoryStore>(), 0, 1);
  if (!comm.ok()) {
    std::fprintf(stderr, "native_call_cost: %s\n",
                 comm.status().ToString().c_str());
    return 1;
  }
  std::vector<float> data(8);
  const ConstBuffer send{data.data(), 8, DataType::kFloat32, Device::Cuda(0)};
  const Buffer recv{data.data(), 8, DataType::kFloat32, Device::Cuda(0)};
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      absl::StatusOr<Request> req =
          (*comm)->AllReduce(send, recv, ReduceOp::kSum);
      if (!req.ok()) {
        std::fprintf(stderr, "native_call_cost: %s\n",
                     req.status().ToString().c_str());
        return 1;
      }
    }
    const double ns = std::chrono::duration<double, std::nano>(
                          std::chrono::steady_clock::now() - start)
                          .count() / calls;
    best = std::min(best, ns);
  }
  std::printf("all_reduce, 8 floats, native, 1 rank: %.1f ns per call "
              "(best of %d rounds of %d)\n", best, rounds, calls);
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 200000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (calls <= 0 || rounds <= 0) {
    std::fprintf(stderr, "usage: native_call_cost [CALLS > 0] [ROUNDS > 0]\n");
    return 2;
  }
  return relay::Run(calls, rounds);
}
