#include "testing/device_transport_checks.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "relay.h"
#include "runtime/status_macros.h"
#include "testing/conformance.h"
#include "testing/device_memory.h"

namespace relay {
namespace {

// `what` failed unless `r` is InvalidArgument (whose message holds `says`).
absl::Status ExpectRefused(const absl::StatusOr<Request>& r, const std::string& what,
                           const std::string& says = "") {
  if (r.status().code() == absl::StatusCode::kInvalidArgument &&
      std::string(r.status().message()).find(says) != std::string::npos) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(what, ": want InvalidArgument",
                                          says.empty() ? "" : " saying \"" + says + "\"",
                                          ", got ", r.status().ToString()));
}

}  // namespace

RankSetup OneGpuPerRank() {
  return [](int rank) { return SetCurrentDevice(rank); };
}

int ViableGpus(TransportFactory& factory) {
  return factory.IsViable() ? VisibleDeviceCount() : 0;
}

absl::Status RunDeviceConformance(TransportFactory& factory, int n,
                                  std::vector<std::string>* failures) {
  const std::vector<ConformanceCase> cases = DeviceConformanceCases(n);
  if (cases.empty()) return absl::InternalError("no device conformance cases");
  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(60);
  const absl::Status s = RunConformanceCasesOnOneGroup(cases, n, factory, DefaultEngine(),
                                                       options, OneGpuPerRank(), failures);
  std::printf("%zu cases on %d GPUs\n", cases.size(), n);
  return s;
}

absl::Status CheckRejectsMemoryItCannotMove(Communicator& comm) {
  const int rank = comm.rank();
  const Device gpu = Device::Cuda(rank);
  std::vector<float> host(16, 1.0f);
  RELAY_ASSIGN_OR_RETURN(DeviceBytes dev, DeviceBytes::Allocate(64));
  float* d = reinterpret_cast<float*>(dev.data());
  RELAY_RETURN_IF_ERROR(ExpectRefused(
      comm.AllReduce(ConstBuffer::Of(host.data(), 16, gpu), Buffer::Of(host.data(), 16, gpu),
                     ReduceOp::kSum),
      "host memory declared as the GPU's"));
  RELAY_RETURN_IF_ERROR(ExpectRefused(
      comm.AllReduce(ConstBuffer::Of(d, 16), Buffer::Of(d, 16), ReduceOp::kSum),
      "the GPU's memory declared as host memory"));
  const Device elsewhere = Device::Cuda(rank + 1);
  RELAY_RETURN_IF_ERROR(ExpectRefused(
      comm.AllReduce(ConstBuffer::Of(d, 16, elsewhere), Buffer::Of(d, 16, elsewhere),
                     ReduceOp::kSum),
      "a GPU the communicator does not run on"));
  if (VisibleDeviceCount() >= 2) {
    const int other = rank == 0 ? 1 : 0;
    RELAY_RETURN_IF_ERROR(SetCurrentDevice(other));
    absl::StatusOr<DeviceBytes> theirs = DeviceBytes::Allocate(64);
    RELAY_RETURN_IF_ERROR(SetCurrentDevice(rank));
    RELAY_RETURN_IF_ERROR(theirs.status());
    float* p = reinterpret_cast<float*>(theirs->data());
    RELAY_RETURN_IF_ERROR(ExpectRefused(
        comm.AllReduce(ConstBuffer::Of(p, 16, gpu), Buffer::Of(p, 16, gpu), ReduceOp::kSum),
        "another GPU's memory declared as this one's", "lives on cuda:"));
  }
  // relay's own algorithms run on device buffers through the stream
  // executor: the check must not be the native path's alone.
  CollectiveOptions ring;
  ring.algorithm = Algorithm::kRing;
  RELAY_RETURN_IF_ERROR(ExpectRefused(
      comm.AllReduce(ConstBuffer::Of(host.data(), 16, gpu), Buffer::Of(host.data(), 16, gpu),
                     ReduceOp::kSum, ring),
      "host memory declared as the GPU's, ring"));
  RELAY_ASSIGN_OR_RETURN(
      Request r, comm.AllReduce(ConstBuffer::Of(d, 16, gpu), Buffer::Of(d, 16, gpu),
                                ReduceOp::kSum));
  return r.Wait(absl::Seconds(30));
}

absl::Status CheckOnDoneRunsWithoutAWaiter(Communicator& comm) {
  RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(4096));
  float* p = reinterpret_cast<float*>(d.data());
  const Device dev = Device::Cuda(comm.rank());
  RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(ConstBuffer::Of(p, 1024, dev),
                                                   Buffer::Of(p, 1024, dev), ReduceOp::kMax));
  std::atomic<bool> called{false};
  r.OnDone([&](absl::Status) { called = true; });
  for (int i = 0; i < 10000 && !called; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return called ? absl::OkStatus() : absl::InternalError("OnDone did not run within 10 s");
}

}  // namespace relay
