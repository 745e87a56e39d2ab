// bench/pingpong: point-to-point latency and bandwidth between two ranks
// through the Communicator's Send/Recv (the Transport underneath), in the
// style of osu_latency / ucx_perftest tag_lat: half the round-trip time of a
// ping-pong, and the one-way bandwidth of a window of back-to-back sends.
//
//   bazel run //bench:pingpong -- -b 8 -e 4M -f 4 -n 10000
//
// Under a launcher (tools/relayrun -n 2, mpirun -np 2, ...) each of the two
// processes is one rank and the transport defaults to the job's or ucx:
//   UCX_TLS=shm,self tools/relayrun -n 2 -- bazel-bin/bench/pingpong
//
// Exit status: 0 on success, 1 if an operation failed, 2 for bad flags.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/flags.h"
#include "bench/report.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: pingpong [flags]
  -b SIZE            smallest message in bytes (default 8)
  -e SIZE            largest message in bytes (default 4M)
  -f FACTOR          size multiplication factor (default 4)
  -n ITERS           round trips per size (default 10000; fewer for large)
  -w ITERS           warm-up round trips per size (default 100)
  --window N         messages in flight for the bandwidth test (default 16)
  --transport NAME   registered transport (default loopback; under a
                     launcher RELAY_TRANSPORT, else ucx)
  -h, --help         this text
)";

struct Flags {
  size_t min_bytes = 8, max_bytes = 4 << 20;
  double factor = 4;
  int iters = 10000, warmup = 100, window = 16;
  std::string transport = "loopback";
  bool transport_given = false;
};

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "pingpong: %s (see --help)\n", message.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("pingpong", kUsage, argc, argv);
  while (p.Next()) {
    if (bench::SweepFlag(p, f)) {
      continue;
    } else if (p.name() == "--window") {
      f.window = p.Int(1);
    } else if (p.name() == "--transport") {
      f.transport = p.value();
      f.transport_given = true;
    } else {
      p.Unknown();
    }
  }
  if (absl::Status s = bench::CheckSweep(f.min_bytes, f.max_bytes, f.factor);
      !s.ok()) {
    p.Fail(std::string(s.message()));
  }
  return f;
}

absl::Status Wait(absl::StatusOr<Request> r) {
  if (!r.ok()) return r.status();
  return r->Wait(absl::Seconds(60));
}

absl::Status RunRank(Communicator& comm, const Flags& f) {
  const int me = comm.rank(), peer = 1 - me;
  for (size_t bytes : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor)) {
    std::vector<char> out(bytes, static_cast<char>(me)), in(bytes);
    const ConstBuffer send{out.data(), bytes, DataType::kUint8, Device::Host()};
    const Buffer recv{in.data(), bytes, DataType::kUint8, Device::Host()};
    // Fewer round trips for large messages: about 1 GB moved per size.
    const int iters = static_cast<int>(std::max<size_t>(
        10, std::min<size_t>(f.iters, (size_t{1} << 30) / (bytes + 1))));
    auto round_trip = [&]() -> absl::Status {
      if (me == 0) {
        RELAY_RETURN_IF_ERROR(Wait(comm.Send(send, peer)));
        return Wait(comm.Recv(recv, peer));
      }
      RELAY_RETURN_IF_ERROR(Wait(comm.Recv(recv, peer)));
      return Wait(comm.Send(send, peer));
    };
    for (int i = 0; i < f.warmup; ++i) RELAY_RETURN_IF_ERROR(round_trip());
    absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) RELAY_RETURN_IF_ERROR(round_trip());
    const double latency_us =
        absl::ToDoubleMicroseconds(absl::Now() - start) / iters / 2;

    // Bandwidth: rank 0 streams windows of sends, rank 1 acknowledges each.
    // Every receive of a window lands in the same buffer, as in osu_bw and
    // ucx_perftest tag_bw, so the figure is the transport's, not the cache's.
    std::vector<P2POp> ops;
    std::vector<char> sink(bytes);
    for (int w = 0; w < f.window; ++w) {
      ops.push_back(me == 0 ? P2POp::Send(send, peer, 1)
                            : P2POp::Recv(Buffer{sink.data(), bytes,
                                                 DataType::kUint8,
                                                 Device::Host()},
                                          peer, 1));
    }
    const int windows = std::max(1, iters / f.window / 4);
    char ack = 0;
    const Buffer ack_buf{&ack, 1, DataType::kUint8, Device::Host()};
    start = absl::Now();
    for (int i = 0; i < windows; ++i) {
      RELAY_RETURN_IF_ERROR(Wait(comm.BatchSendRecv(ops)));
      RELAY_RETURN_IF_ERROR(Wait(me == 0 ? comm.Recv(ack_buf, peer, 2)
                                         : comm.Send(ack_buf, peer, 2)));
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const double gbps = static_cast<double>(bytes) * f.window * windows /
                        seconds / 1e9;
    if (me == 0) {
      std::printf("%12zu  %12.2f  %12.2f\n", bytes, latency_us, gbps);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

// This process is one of the two ranks of a launched job.
int RunLaunchedRank(Flags f) {
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) BadFlag(std::string(env.status().message()));
  if (env->size != 2) BadFlag(absl::StrCat("needs 2 ranks, the job has ", env->size));
  if (!f.transport_given) f.transport = env->transport.empty() ? "ucx" : env->transport;
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicatorFromEnvironment({}, absl::Minutes(2), f.transport);
  if (!comm.ok()) {
    std::fprintf(stderr, "pingpong: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  if ((*comm)->rank() == 0) {
    std::printf("# relay pingpong: 2 processes, transport %s\n",
                f.transport.c_str());
    std::printf("# %10s  %12s  %12s\n", "size (B)", "latency (us)", "bw (GB/s)");
  }
  absl::Status s = RunRank(**comm, f);
  if (!s.ok()) {
    std::fprintf(stderr, "pingpong: rank %d: %s\n", (*comm)->rank(),
                 s.ToString().c_str());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  if (HasLaunchEnvironment()) return RunLaunchedRank(f);
  if (!Transports().Get(f.transport).ok()) {
    BadFlag(absl::StrCat("unknown transport ", f.transport));
  }
  std::printf("# relay pingpong: 2 ranks, transport %s\n", f.transport.c_str());
  std::printf("# %10s  %12s  %12s\n", "size (B)", "latency (us)", "bw (GB/s)");
  auto store = std::make_shared<InMemoryStore>();
  absl::Status results[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommunicatorConfig config;
      config.rank = r;
      config.size = 2;
      config.store = store;
      config.transport = f.transport;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          CreateCommunicator(config);
      results[r] = comm.ok() ? RunRank(**comm, f) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "pingpong: rank %d: %s\n", r,
                   results[r].ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
