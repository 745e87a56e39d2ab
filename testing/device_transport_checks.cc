#include "testing/device_transport_checks.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
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
  return [](int rank) { return UseGpuOfLocalRank(rank).status(); };
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

absl::StatusOr<std::vector<DeviceBytes>> AllocateOnEveryGpu(size_t bytes) {
  std::vector<DeviceBytes> every;
  for (int g = 0; g < VisibleDeviceCount(); ++g) {
    RELAY_RETURN_IF_ERROR(SetCurrentDevice(g));
    RELAY_ASSIGN_OR_RETURN(DeviceBytes b, DeviceBytes::Allocate(bytes));
    every.push_back(std::move(b));
  }
  return every;
}

absl::Status CheckRejectsMemoryItCannotMove(Communicator& comm,
                                            const std::vector<DeviceBytes>& every_gpu) {
  const int rank = comm.rank();
  const Device gpu = Device::Cuda(GpuOfLocalRank(rank));
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
  if (every_gpu.size() >= 2) {
    const DeviceBytes& theirs = every_gpu[(rank + 1) % every_gpu.size()];
    float* p = reinterpret_cast<float*>(theirs.data());
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
  CollectiveOptions bounded;
  bounded.timeout = absl::Seconds(30);
  RELAY_ASSIGN_OR_RETURN(
      Request r, comm.AllReduce(ConstBuffer::Of(d, 16, gpu), Buffer::Of(d, 16, gpu),
                                ReduceOp::kSum, bounded));
  return r.Wait();
}

absl::Status CheckOnDoneRunsWithoutAWaiter(Communicator& comm) {
  RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(4096));
  float* p = reinterpret_cast<float*>(d.data());
  const Device dev = Device::Cuda(GpuOfLocalRank(comm.rank()));
  RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(ConstBuffer::Of(p, 1024, dev),
                                                   Buffer::Of(p, 1024, dev), ReduceOp::kMax));
  std::atomic<bool> called{false};
  r.OnDone([&](absl::Status) { called = true; });
  for (int i = 0; i < 10000 && !called; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return called ? absl::OkStatus() : absl::InternalError("OnDone did not run within 10 s");
}

absl::Status CheckWindowFreedWhileRegistered(Communicator& comm, CollectiveKind kind,
                                             int freeing) {
  if (kind != CollectiveKind::kAllGather && kind != CollectiveKind::kAllReduce) {
    return absl::InvalidArgumentError("CheckWindowFreedWhileRegistered: all_gather or all_reduce");
  }
  const int rank = comm.rank(), n = comm.size();
  RELAY_ASSIGN_OR_RETURN(const int gpu, CurrentDevice());
  const Device dev = Device::Cuda(gpu);
  const size_t count = (size_t{32} << 20) / 4 / n;  // Floats a rank.
  const size_t window_bytes = count * n * 4;
  CollectiveOptions twenty_seconds;
  twenty_seconds.timeout = absl::Seconds(20);
  RELAY_ASSIGN_OR_RETURN(DeviceBytes alloc, DeviceBytes::Allocate(window_bytes));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(window_bytes));
  std::vector<float> values(count * n);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1009 + rank);
  RELAY_RETURN_IF_ERROR(in.CopyFrom(values.data(), window_bytes));
  const std::vector<unsigned char> before(window_bytes, 0x5a);
  RELAY_RETURN_IF_ERROR(alloc.CopyFrom(before.data(), window_bytes));
  float* window = reinterpret_cast<float*>(alloc.data());
  RELAY_RETURN_IF_ERROR(comm.RegisterWindow(Buffer::Of(window, count * n, dev)));
  RELAY_ASSIGN_OR_RETURN(Request b, comm.Barrier(twenty_seconds));
  RELAY_RETURN_IF_ERROR(b.Wait());
  if (rank == freeing) DeviceBytes freed = std::move(alloc);
  const auto start = std::chrono::steady_clock::now();
  const float* input = reinterpret_cast<const float*>(in.data());
  absl::StatusOr<Request> r =
      kind == CollectiveKind::kAllGather
          ? comm.AllGather(ConstBuffer::Of(input, count, dev),
                           Buffer::Of(window, count * n, dev), twenty_seconds)
          : comm.AllReduce(ConstBuffer::Of(input, count * n, dev),
                           Buffer::Of(window, count * n, dev), ReduceOp::kSum,
                           twenty_seconds);
  const absl::Status got = r.ok() ? r->Wait() : r.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const absl::StatusCode want = rank == freeing ? absl::StatusCode::kInvalidArgument
                                                : absl::StatusCode::kFailedPrecondition;
  if (got.code() != want || !absl::StrContains(got.message(), "freed while registered") ||
      seconds > 10) {
    return absl::InternalError(absl::StrCat("rank ", rank, " after ", seconds, " s: ",
                                            got.ToString(), " (want ",
                                            absl::StatusCodeToString(want), ")"));
  }
  if (rank != freeing) {
    std::vector<unsigned char> after(window_bytes);
    RELAY_RETURN_IF_ERROR(alloc.CopyTo(after.data(), after.size()));
    if (after != before) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, "'s window was written after the refusal"));
    }
  }
  absl::StatusOr<Request> later = comm.Barrier(twenty_seconds);
  const absl::Status later_status = later.ok() ? later->Wait() : later.status();
  if (later_status.ok()) return absl::InternalError("a barrier after the abort succeeded");
  return absl::OkStatus();
}

absl::Status CheckCapturedCallsReplay(Communicator& comm, StreamOrder order, int replays) {
  constexpr int kCalls = 100;
  constexpr size_t kCount = 256;  // Floats per call.
  const int rank = comm.rank();
  const int ranks = comm.size();
  RELAY_ASSIGN_OR_RETURN(const int gpu, CurrentDevice());
  const Device dev = Device::Cuda(gpu);
  RELAY_ASSIGN_OR_RETURN(DeviceStream before, DeviceStream::Create());
  RELAY_ASSIGN_OR_RETURN(DeviceStream captured, DeviceStream::Create());
  RELAY_ASSIGN_OR_RETURN(DeviceStream after, DeviceStream::Create());
  RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(kCalls * kCount * 4));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate(kCalls * kCount * 4));
  const float* src = reinterpret_cast<const float*>(in.data());
  float* dst = reinterpret_cast<float*>(out.data());
  // Element i of round `round` (a replay; -1 before, `replays` after) on `r`.
  const auto value = [](size_t i, int round, int r) {
    return static_cast<float>((i * 7 + static_cast<size_t>(round + 1) * 13 + r * 101) % 1000);
  };
  std::vector<float> host(kCalls * kCount), got(kCalls * kCount);
  const auto fill = [&](int round) {
    for (size_t i = 0; i < host.size(); ++i) host[i] = value(i, round, rank);
    return in.CopyFrom(host.data(), host.size() * 4);
  };
  const auto check = [&](int round, size_t elements) -> absl::Status {
    RELAY_RETURN_IF_ERROR(out.CopyTo(got.data(), elements * 4));
    for (size_t i = 0; i < elements; ++i) {
      float want = 0;
      for (int r = 0; r < ranks; ++r) want += value(i, round, r);
      if (got[i] != want) {
        return absl::InternalError(absl::StrCat("round ", round, " (of ", replays,
                                                " replays) element ", i, ": ", got[i],
                                                ", want ", want));
      }
    }
    return absl::OkStatus();
  };
  CollectiveOptions opts;
  opts.stream_order = order;
  opts.timeout = absl::Seconds(60);
  const auto eager = [&](const DeviceStream& stream, int round) -> absl::Status {
    RELAY_RETURN_IF_ERROR(fill(round));
    opts.stream = stream.get();
    RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(ConstBuffer::Of(src, kCount, dev),
                                                     Buffer::Of(dst, kCount, dev),
                                                     ReduceOp::kSum, opts));
    RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
    return check(round, kCount);
  };
  RELAY_RETURN_IF_ERROR(eager(before, -1));
  opts.stream = captured.get();
  RELAY_ASSIGN_OR_RETURN(DeviceGraph graph,
                         DeviceGraph::Capture(captured.get(), [&]() -> absl::Status {
                           for (int k = 0; k < kCalls; ++k) {
                             RELAY_ASSIGN_OR_RETURN(
                                 Request r, comm.AllReduce(
                                                ConstBuffer::Of(src + k * kCount, kCount, dev),
                                                Buffer::Of(dst + k * kCount, kCount, dev),
                                                ReduceOp::kSum, opts));
                             (void)r;
                           }
                           return absl::OkStatus();
                         }));
  for (int replay = 0; replay < replays; ++replay) {
    RELAY_RETURN_IF_ERROR(fill(replay));  // Synchronous: done before the launch.
    RELAY_RETURN_IF_ERROR(graph.Launch(captured.get()));
    RELAY_RETURN_IF_ERROR(SynchronizeStream(captured.get()));
    RELAY_RETURN_IF_ERROR(check(replay, kCalls * kCount));
  }
  return eager(after, replays);
}

absl::Status CheckRelayAlgorithmRefusedInCapture(Communicator& comm) {
  constexpr size_t kCount = 4096;
  const int rank = comm.rank();
  RELAY_ASSIGN_OR_RETURN(const int gpu, CurrentDevice());
  const Device dev = Device::Cuda(gpu);
  RELAY_ASSIGN_OR_RETURN(DeviceStream stream, DeviceStream::Create());
  RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(kCount * 4));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate(kCount * 4));
  const ConstBuffer send = ConstBuffer::Of(reinterpret_cast<const float*>(in.data()), kCount, dev);
  const Buffer recv = Buffer::Of(reinterpret_cast<float*>(out.data()), kCount, dev);
  CollectiveOptions opts;
  opts.stream = stream.get();
  opts.stream_order = StreamOrder::kOnStream;
  // One eager call first: NCCL connects its peers at a communicator's first
  // collective, which a capture forbids ("failed to peer with device").
  RELAY_ASSIGN_OR_RETURN(Request warm, comm.AllReduce(send, recv, ReduceOp::kSum, opts));
  RELAY_RETURN_IF_ERROR(warm.Wait(absl::Seconds(60)));
  absl::Status ring;
  RELAY_ASSIGN_OR_RETURN(DeviceGraph graph,
                         DeviceGraph::Capture(stream.get(), [&]() -> absl::Status {
                           CollectiveOptions ring_opts = opts;
                           ring_opts.algorithm = Algorithm::kRing;
                           ring = comm.AllReduce(send, recv, ReduceOp::kSum, ring_opts).status();
                           return comm.AllReduce(send, recv, ReduceOp::kSum, opts).status();
                         }));
  if (!absl::IsInvalidArgument(ring) || !absl::StrContains(ring.message(), "cannot be captured")) {
    return absl::InternalError(absl::StrCat(
        "relay's ring in a capture: want InvalidArgument saying \"cannot be captured\", got ",
        ring.ToString()));
  }
  std::vector<float> host(kCount), got(kCount);
  const auto value = [](size_t i, int r) { return static_cast<float>((i * 7 + r * 101) % 1000); };
  for (size_t i = 0; i < kCount; ++i) host[i] = value(i, rank);
  RELAY_RETURN_IF_ERROR(in.CopyFrom(host.data(), kCount * 4));
  RELAY_RETURN_IF_ERROR(graph.Launch(stream.get()));
  RELAY_RETURN_IF_ERROR(SynchronizeStream(stream.get()));
  RELAY_RETURN_IF_ERROR(out.CopyTo(got.data(), kCount * 4));
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0;
    for (int r = 0; r < comm.size(); ++r) want += value(i, r);
    if (got[i] != want) {
      return absl::InternalError(absl::StrCat("the all_reduce captured after the refusal: element ",
                                              i, " is ", got[i], ", want ", want));
    }
  }
  return absl::OkStatus();
}

}  // namespace relay
