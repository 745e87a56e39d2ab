// bench/collectives: relay's collectives benchmark, in the nccl-tests format.
//
// Runs each collective on --ranks ranks (threads of this process for the
// loopback transport) over a -b/-e/-f size sweep, out of place then in
// place, timing -n iterations after -w warm-ups, and (with -c 1) checks the
// result of each row element by element against a reference. Time is the
// mean over iterations, averaged over ranks, as nccl-tests reports it.
//
//   bazel run //bench:collectives                     # every collective
//   bazel run //bench:collectives -- --collective all_reduce -b 8 -e 64M -f 2
//
// Device-memory transports (nccl) run on device copies of the same data, one
// GPU per rank (rank r, or local rank r, on GPU r % visible GPUs), and their
// timed calls are queued back to back and waited for at the end, as
// nccl-tests (and bench/peers/nccl_collectives) times NCCL:
//   bazel-bin/bench/collectives --transport nccl --ranks 2 -b 8 -e 1G
//
// Under a launcher (tools/relayrun, mpirun, srun, torchrun: see
// runtime/bootstrap/environment.h) each process is one rank instead, the
// group is the job, and the transport defaults to the job's (RELAY_TRANSPORT)
// or ucx; rank 0 prints the table:
//   tools/relayrun -n 4 -- bazel-bin/bench/collectives --collective all_reduce
//
// Exit status: 0 if every checked row was right, 1 if any was wrong or a
// call failed, 2 for bad flags.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <functional>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/flags.h"
#include "bench/report.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"
#include "testing/device_memory.h"
#include "testing/reference.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: collectives [flags]
  -b SIZE            smallest size in bytes (K, M, G suffixes; default 8)
  -e SIZE            largest size in bytes (default 64M)
  -f FACTOR          size multiplication factor (default 2)
  -n ITERS           timed iterations per size (default 20)
  -w ITERS           warm-up iterations per size (default 5)
  -c 0|1             check every row's result (default 1)
  --ranks N          ranks, as threads for loopback (default 4); under a
                     launcher the job's size, which --ranks may only repeat
  --transport NAME   registered transport (default loopback; under a
                     launcher RELAY_TRANSPORT, else ucx)
  --collective NAME  all_reduce, all_gather, reduce_scatter, broadcast,
                     reduce, gather, scatter, all_to_all, barrier, or all
                     (default all)
  --dtype TYPE       int8 uint8 int32 uint32 int64 uint64 float16 bfloat16
                     float32 float64 (default float32)
  --op OP            sum prod min max avg (default sum)
  --algorithm NAME   auto, ring, recursive_doubling, rabenseifner, binomial,
                     linear, pairwise, dissemination, native (default auto)
  --root R           root of rooted collectives (default 0)
  --timeout SECONDS  per-operation timeout (default 120)
  --bind auto|core|none
                     pin rank r's thread (under a launcher: process, by local
                     rank) to core r % cores; auto (default) pins when the
                     ranks on this host <= cores, as mpirun binds by default,
                     except over nccl (NCCL's threads would inherit the pin)
  --memory host|device
                     where the buffers live (default host); device runs a
                     transport that moves both (loopback built with CUDA,
                     one GPU per rank, round robin) on device copies.
                     Transports that move device memory only (nccl) always
                     run on device copies
  --cuda-stream default|own
                     device transports: pass no stream (the legacy default
                     stream; default) or a stream of each rank's own, which
                     the transport orders itself after with an event
  --stream-order after|on
                     device buffers: CollectiveOptions::stream_order. after
                     (default): the call starts after the stream's work and
                     later work there does not wait for it; on: queued on
                     the stream itself, as NCCL's calls (no event and wait
                     of the transport's own)
  --api async|blocking|graph
                     what each timed call is: async (default) starts it
                     (Communicator::Collective) and waits for its request;
                     blocking calls Communicator::RunCollective, which
                     returns when it is done (MPI_Allreduce's form; every
                     call blocks, on device memory too); graph (device,
                     stream-ordered transports) captures the -n timed calls
                     into one CUDA graph on a stream of each rank's own and
                     times a replay (-c 1 checks a graph of one call,
                     replayed after new data is copied in)
  --held 0|1         device buffers, stream-ordered transports: 1 queues
                     each timed loop while a host function holds the
                     caller's stream, then releases it, so the time a call
                     is the GPU's alone (what a loop costs where the host is
                     not the bound: one GPU standing in for several); host
                     us is still the queueing's (default 0)
  --window 0|1       device buffers, all_gather and all_reduce: 1 registers
                     each row's receive buffer as a symmetric window
                     (Communicator::RegisterWindow; cuda_ipc) before timing
                     it, and deregisters it after (default 0)
  --json FILE        also write every row as JSON
  -h, --help         this text
Size S is nccl-tests': the whole array for all_gather, reduce_scatter,
gather, scatter and all_to_all; one rank's buffer otherwise.
)";

struct Flags {
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, ranks = 4, root = 0;
  bool ranks_given = false, transport_given = false;
  bool launched = false;  // This process is one rank of a launched job.
  int local_rank = 0, local_size = 0;
  bool check = true;
  std::string transport = "loopback";
  std::vector<CollectiveKind> kinds = AllCollectiveKinds();
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  absl::Duration timeout = absl::Seconds(120);
  std::string json;
  std::string bind = "auto";
  bool own_stream = false;
  StreamOrder stream_order = StreamOrder::kAfterStream;
  bool device_memory = false;  // --memory device
  bool blocking = false;       // --api blocking
  bool graph = false;          // --api graph
  bool window = false;         // --window 1
  bool held = false;           // --held 1
};

[[noreturn]] void BadFlag(const std::string& message) {
  std::fprintf(stderr, "collectives: %s (see --help)\n", message.c_str());
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("collectives", kUsage, argc, argv);
  while (p.Next()) {
    const std::string& flag = p.name();
    if (bench::SweepFlag(p, f)) {
      continue;
    } else if (flag == "-c") {
      f.check = p.Int(0) != 0;
    } else if (flag == "--ranks") {
      f.ranks = p.Int(1);
      f.ranks_given = true;
    } else if (flag == "--root") {
      f.root = p.Int(0);
    } else if (flag == "--transport") {
      f.transport = p.value();
      f.transport_given = true;
    } else if (flag == "--collective") {
      f.kinds = p.value() == "all" ? AllCollectiveKinds()
                                   : std::vector<CollectiveKind>{
                                         p.Or2(ParseCollective(p.value()))};
    } else if (flag == "--dtype") {
      f.dtype = p.Or2(ParseDataType(p.value()));
    } else if (flag == "--op") {
      f.op = p.Or2(ParseReduceOp(p.value()));
    } else if (flag == "--algorithm") {
      f.algorithm = p.Or2(ParseAlgorithm(p.value()));
    } else if (flag == "--timeout") {
      f.timeout = absl::Seconds(p.Int(1));
    } else if (flag == "--bind") {
      f.bind = p.OneOf({"auto", "core", "none"});
    } else if (flag == "--cuda-stream") {
      f.own_stream = p.OneOf({"default", "own"}) == "own";
    } else if (flag == "--stream-order") {
      f.stream_order = p.OneOf({"after", "on"}) == "on"
                           ? StreamOrder::kOnStream
                           : StreamOrder::kAfterStream;
    } else if (flag == "--memory") {
      f.device_memory = p.OneOf({"host", "device"}) == "device";
    } else if (flag == "--api") {
      const std::string api = p.OneOf({"async", "blocking", "graph"});
      f.blocking = api == "blocking";
      f.graph = api == "graph";
    } else if (flag == "--window") {
      f.window = p.Int(0) != 0;
    } else if (flag == "--held") {
      f.held = p.Int(0) != 0;
    } else if (flag == "--json") {
      f.json = p.value();
    } else {
      p.Unknown();
    }
  }
  if (absl::Status s = bench::CheckSweep(f.min_bytes, f.max_bytes, f.factor);
      !s.ok()) {
    BadFlag(std::string(s.message()));
  }
  // Under a launcher the job fixes the ranks and, by default, the transport.
  if (HasLaunchEnvironment()) {
    absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
    if (!env.ok()) BadFlag(std::string(env.status().message()));
    if (f.ranks_given && f.ranks != env->size) {
      BadFlag(absl::StrCat("--ranks ", f.ranks, " but the job has ", env->size,
                           " ranks"));
    }
    f.ranks = env->size;
    if (!f.transport_given) {
      f.transport = env->transport.empty() ? "ucx" : env->transport;
    }
    f.launched = true;
    f.local_rank = env->local_rank;
    f.local_size = env->local_size > 0 ? env->local_size : env->size;
  }
  if (f.root >= f.ranks) {
    BadFlag(absl::StrCat("--root ", f.root, " is not below --ranks ", f.ranks));
  }
  if (f.ranks > 1024) BadFlag("--ranks above 1024");
  // A forced algorithm runs the collectives it implements.
  std::vector<CollectiveKind> runnable;
  for (CollectiveKind k : f.kinds) {
    if (DefaultEngine().Supports(k, f.algorithm).ok() ||
        f.algorithm == Algorithm::kNative) {
      runnable.push_back(k);
    }
  }
  if (runnable.empty()) {
    BadFlag(absl::StrCat("algorithm ", AlgorithmName(f.algorithm),
                         " implements none of the chosen collectives"));
  }
  f.kinds = runnable;
  return f;
}

bool WholeArraySize(CollectiveKind k) {
  return k == CollectiveKind::kAllGather || k == CollectiveKind::kReduceScatter ||
         k == CollectiveKind::kGather || k == CollectiveKind::kScatter ||
         k == CollectiveKind::kAllToAll;
}

// nccl-tests' type names, so rows diff cleanly against theirs.
std::string TypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float";
    case DataType::kFloat64: return "double";
    case DataType::kFloat16: return "half";
    case DataType::kBfloat16: return "bfloat16";
    default: return std::string(DataTypeName(t));
  }
}

// What one rank passes for one row: buffers sized for the call, in place or
// not, filled with the reference input.
struct Call {
  std::vector<char> send, recv;
  ConstBuffer send_view;
  Buffer recv_view;
  Buffer check_view;  // Where the result lands on this rank (may be empty).
};

// Runs body(begin, end) over [0, n) in chunks on several threads when n is
// large: filling and checking a 1 GB row element by element took about a
// minute a variant on a GPU host, whose cores sat idle (the time is the
// device budget's). Each rank's thread takes its share of the host's cores.
template <typename Body>
void ForChunks(const Flags& f, size_t n, Body body) {
  const int on_host = std::max(1, f.local_size > 0 ? f.local_size : f.ranks);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const size_t workers = std::clamp(cores / on_host, 1, 16);
  if (n < (size_t{1} << 20) || workers == 1) {
    body(size_t{0}, n);
    return;
  }
  std::vector<std::thread> threads;
  const size_t chunk = (n + workers - 1) / workers;
  for (size_t begin = 0; begin < n; begin += chunk) {
    threads.emplace_back(body, begin, std::min(n, begin + chunk));
  }
  for (std::thread& t : threads) t.join();
}

Call MakeCall(CollectiveKind kind, const Flags& f, int rank, size_t count,
              bool in_place) {
  const int n = f.ranks;
  const size_t esize = DataTypeSize(f.dtype);
  const bool root = rank == f.root;
  size_t send_count = count, recv_count = count;
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter:
      send_count = count * n;
      break;
    case CollectiveKind::kAllToAll:
      send_count = recv_count = count * n;
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
      recv_count = count * n;
      break;
    case CollectiveKind::kBarrier:
      send_count = recv_count = 0;
      break;
    default:
      break;
  }
  if ((kind == CollectiveKind::kReduce || kind == CollectiveKind::kGather) &&
      !root) {
    recv_count = 0;
  }
  Call c;
  c.send.resize(send_count * esize);
  c.recv.resize(recv_count * esize);
  ForChunks(f, send_count, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      EncodeAt(f.dtype, InputValue(f.dtype, f.op, rank, i), c.send.data(), i);
    }
  });
  char* send = c.send.data();
  char* recv = c.recv.data();
  const size_t block = count * esize;
  if (in_place) {
    switch (kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kReduce:
        if (!IsRooted(kind) || root) {
          std::memcpy(recv, send, c.send.size());
          send = recv;
        }
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
        if (kind == CollectiveKind::kAllGather || root) {
          std::memcpy(recv + rank * block, send, block);
          send = recv + rank * block;
        }
        break;
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kScatter:
        if (kind == CollectiveKind::kReduceScatter || root) {
          recv = send + rank * block;
        }
        break;
      default:
        break;
    }
  }
  c.send_view = {send, send_count, f.dtype, Device::Host()};
  c.recv_view = {recv, recv_count, f.dtype, Device::Host()};
  c.check_view = c.recv_view;
  return c;
}

// A transport that moves device memory only (nccl) runs on device copies of
// a call's host images (testing/device_memory.h); the check reads the host
// images after CopyBack.
absl::StatusOr<DeviceMirror> MoveToDevice(Call& c) {
  RELAY_ASSIGN_OR_RETURN(DeviceMirror m, DeviceMirror::Of(c.send, c.recv));
  c.send_view = m.Map(c.send_view);
  c.recv_view = m.Map(c.recv_view);
  return m;
}

int64_t CountWrong(CollectiveKind kind, const Flags& f, int rank, size_t count,
                   const Call& c) {
  if (kind == CollectiveKind::kBarrier) return 0;
  std::atomic<int64_t> wrong{0};
  ForChunks(f, c.check_view.count, [&](size_t begin, size_t end) {
    int64_t mine = 0;
    for (size_t i = begin; i < end; ++i) {
      const double want =
          ExpectedValue(kind, f.dtype, f.op, f.root, rank, f.ranks, count, i);
      if (!Matches(f.dtype, f.op, want,
                   DecodeAt(f.dtype, c.check_view.data, i))) {
        ++mine;
      }
    }
    wrong += mine;
  });
  return wrong.load();
}

// Shared between the rank threads: per-rank results of the current row.
struct RowResults {
  std::vector<double> time_us;
  std::vector<int64_t> wrong;
};

// --api graph: the `iters` timed calls captured into one CUDA graph
// (StreamOrder::kOnStream on a stream of the rank's own), replayed once to
// warm up and once timed: the time per call is the replay's over `iters`.
// The timed calls rerun on their own output; RunRow checks a graph of its
// own.
absl::Status RunGraphRow(Communicator& comm, const Flags& f,
                         const std::function<absl::StatusOr<Request>()>& start_one,
                         CollectiveOptions* options, DeviceStream* stream,
                         double* time_us, double* issue_us, int64_t* wrong) {
  if (!comm.capabilities().stream_ordered) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--api graph: transport ", f.transport, " does not queue on CUDA streams"));
  }
  if (stream->get() == nullptr) {
    RELAY_ASSIGN_OR_RETURN(*stream, DeviceStream::Create());
  }
  options->stream = stream->get();
  options->stream_order = StreamOrder::kOnStream;
  RELAY_ASSIGN_OR_RETURN(
      DeviceGraph graph, DeviceGraph::Capture(stream->get(), [&]() -> absl::Status {
        for (int i = 0; i < f.iters; ++i) {
          RELAY_ASSIGN_OR_RETURN(Request r, start_one());
          (void)r;
        }
        return absl::OkStatus();
      }));
  RELAY_RETURN_IF_ERROR(graph.Launch(stream->get()));
  RELAY_RETURN_IF_ERROR(SynchronizeStream(stream->get()));
  CollectiveOptions sync;
  sync.timeout = f.timeout;
  RELAY_ASSIGN_OR_RETURN(Request b, comm.Barrier(sync));
  RELAY_RETURN_IF_ERROR(b.Wait());
  const absl::Time start = absl::Now();
  RELAY_RETURN_IF_ERROR(graph.Launch(stream->get()));
  RELAY_RETURN_IF_ERROR(SynchronizeStream(stream->get()));
  *time_us = absl::ToDoubleMicroseconds(absl::Now() - start) / f.iters;
  *issue_us = -1;
  *wrong = -1;
  return absl::OkStatus();
}

// A receive buffer registered as a symmetric window (--window) for as long
// as it lives: declared after the buffers it covers, so it deregisters
// before they are freed.
class WindowGuard {
 public:
  WindowGuard() = default;
  WindowGuard(const WindowGuard&) = delete;
  WindowGuard& operator=(const WindowGuard&) = delete;
  ~WindowGuard() { Release(); }
  absl::Status Register(Communicator& comm, const Buffer& region) {
    Release();
    RELAY_RETURN_IF_ERROR(comm.RegisterWindow(region));
    comm_ = &comm;
    data_ = region.data;
    return absl::OkStatus();
  }
  void Release() {
    if (comm_ == nullptr) return;
    if (absl::Status s = comm_->DeregisterWindow(data_); !s.ok()) {
      std::fprintf(stderr, "collectives: DeregisterWindow: %s\n", s.ToString().c_str());
    }
    comm_ = nullptr;
  }

 private:
  Communicator* comm_ = nullptr;
  void* data_ = nullptr;
};

absl::Status RunRow(Communicator& comm, CollectiveKind kind, const Flags& f,
                    size_t count, bool in_place, double* time_us,
                    double* issue_us,
                    int64_t* wrong) {
  const int rank = comm.rank();
  const TransportCapabilities caps = comm.capabilities();
  const bool on_device = f.device_memory || !caps.host_memory;
  if (on_device && !caps.device_memory) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory device: transport ", f.transport, " does not move device "
        "memory here (a build without CUDA, or no GPU visible)"));
  }
  // A stream-ordered transport on device memory queues the timed calls.
  const bool queued = on_device && caps.stream_ordered && !f.blocking;
  if (f.held && (!queued || f.graph)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--held 1: the calls must queue on a CUDA stream (device memory, a stream-ordered "
        "transport, --api async); ", f.graph ? "--api graph replays them instead"
                                             : "transport " + f.transport + " here does not"));
  }
  Call call = MakeCall(kind, f, rank, count, in_place);
  DeviceMirror device;
  if (on_device) {
    RELAY_ASSIGN_OR_RETURN(device, MoveToDevice(call));
  }
  // The collectives windows change today (cuda_ipc).
  const bool windowed =
      on_device && f.window &&
      (kind == CollectiveKind::kAllGather || kind == CollectiveKind::kAllReduce) &&
      call.recv_view.count > 0;
  WindowGuard window;
  if (windowed) RELAY_RETURN_IF_ERROR(window.Register(comm, call.recv_view));
  CollectiveOptions options;
  options.algorithm = f.algorithm;
  options.timeout = f.timeout;
  options.stream_order = f.stream_order;
  DeviceStream stream;
  if (on_device && f.own_stream) {
    RELAY_ASSIGN_OR_RETURN(stream, DeviceStream::Create());
    options.stream = stream.get();
  }
  auto start_one = [&]() -> absl::StatusOr<Request> {
    return comm.Collective(kind, call.send_view, call.recv_view, f.op, f.root,
                           options);
  };
  // `iters` calls. A stream-ordered transport queues them all and waits for
  // the last (they complete in order), as nccl-tests times NCCL; a host
  // transport waits for each before the next.
  absl::Time issued;  // When run() had started its last call.
  // `hold`: the calls are queued behind a held stream (--held), released
  // once the last is queued.
  auto run = [&](int iters, bool hold = false) -> absl::Status {
    StreamHold held;
    if (hold) {
      RELAY_ASSIGN_OR_RETURN(held, StreamHold::On(options.stream));
    }
    Request last;
    for (int i = 0; i < iters; ++i) {
      if (f.blocking) {
        RELAY_RETURN_IF_ERROR(comm.RunCollective(
            kind, call.send_view, call.recv_view, f.op, f.root, options));
        continue;
      }
      RELAY_ASSIGN_OR_RETURN(Request r, start_one());
      if (queued) {
        last = std::move(r);
      } else {
        RELAY_RETURN_IF_ERROR(r.Wait());
      }
    }
    issued = absl::Now();
    held.Release();
    return last.valid() ? last.Wait() : absl::OkStatus();
  };
  if (f.graph) {
    RELAY_RETURN_IF_ERROR(
        RunGraphRow(comm, f, start_one, &options, &stream, time_us, issue_us, wrong));
    if (!f.check || !on_device) return absl::OkStatus();
    // One call captured on fresh images, replayed on zeroed ones, then
    // again after the call's images are copied in: the check sees what a
    // replay computed from the data in place at the time.
    call = MakeCall(kind, f, rank, count, in_place);
    window.Release();
    RELAY_ASSIGN_OR_RETURN(device, MoveToDevice(call));
    if (windowed) RELAY_RETURN_IF_ERROR(window.Register(comm, call.recv_view));
    RELAY_ASSIGN_OR_RETURN(DeviceGraph one,
                           DeviceGraph::Capture(stream.get(), [&]() -> absl::Status {
                             return start_one().status();
                           }));
    const std::vector<char> zero_send(call.send.size()), zero_recv(call.recv.size());
    RELAY_RETURN_IF_ERROR(device.CopyIn(zero_send, zero_recv));
    RELAY_RETURN_IF_ERROR(one.Launch(stream.get()));
    RELAY_RETURN_IF_ERROR(SynchronizeStream(stream.get()));
    RELAY_RETURN_IF_ERROR(device.CopyIn(call.send, call.recv));
    RELAY_RETURN_IF_ERROR(one.Launch(stream.get()));
    RELAY_RETURN_IF_ERROR(SynchronizeStream(stream.get()));
    RELAY_RETURN_IF_ERROR(device.CopyBack(absl::MakeSpan(call.send), absl::MakeSpan(call.recv)));
    *wrong = CountWrong(kind, f, rank, count, call);
    return absl::OkStatus();
  }
  // The timed loop reruns the call on its own output: fine for timing; the
  // check runs once on fresh input afterwards.
  RELAY_RETURN_IF_ERROR(run(f.warmup));
  CollectiveOptions sync;  // The harness's own barrier: any algorithm.
  sync.timeout = f.timeout;
  RELAY_ASSIGN_OR_RETURN(Request b, comm.Barrier(sync));
  RELAY_RETURN_IF_ERROR(b.Wait());
  const absl::Time start = absl::Now();
  RELAY_RETURN_IF_ERROR(run(f.iters, f.held));
  *time_us = absl::ToDoubleMicroseconds(absl::Now() - (f.held ? issued : start)) / f.iters;
  *issue_us = queued
                  ? absl::ToDoubleMicroseconds(issued - start) / f.iters
                  : -1;
  *wrong = -1;
  if (f.check) {
    call = MakeCall(kind, f, rank, count, in_place);
    if (on_device) {
      window.Release();
      RELAY_ASSIGN_OR_RETURN(device, MoveToDevice(call));
      if (windowed) RELAY_RETURN_IF_ERROR(window.Register(comm, call.recv_view));
    }
    RELAY_RETURN_IF_ERROR(run(1));
    if (on_device) {
      RELAY_RETURN_IF_ERROR(device.CopyBack(absl::MakeSpan(call.send),
                                            absl::MakeSpan(call.recv)));
    }
    *wrong = CountWrong(kind, f, rank, count, call);
  }
  return absl::OkStatus();
}

// Sums `value` over ranks with the communicator itself, as nccl-tests does
// with MPI.
template <typename T>
absl::StatusOr<T> SumOverRanks(Communicator& comm, T value) {
  std::vector<T> v = {value};
  if (comm.capabilities().host_memory) {
    RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(ConstBuffer::Of(v),
                                                     Buffer::Of(v),
                                                     ReduceOp::kSum));
    RELAY_RETURN_IF_ERROR(r.Wait());
    return v[0];
  }
  RELAY_ASSIGN_OR_RETURN(const int device, CurrentDevice());
  RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(sizeof(T)));
  RELAY_RETURN_IF_ERROR(d.CopyFrom(v.data(), sizeof(T)));
  T* p = reinterpret_cast<T*>(d.data());
  RELAY_ASSIGN_OR_RETURN(
      Request r, comm.AllReduce(ConstBuffer::Of(p, 1, Device::Cuda(device)),
                                Buffer::Of(p, 1, Device::Cuda(device)),
                                ReduceOp::kSum));
  RELAY_RETURN_IF_ERROR(r.Wait());
  RELAY_RETURN_IF_ERROR(d.CopyTo(v.data(), sizeof(T)));
  return v[0];
}

absl::Status RunRank(Communicator& comm, const Flags& f,
                     std::vector<bench::Reporter>& reporters) {
  const int rank = comm.rank(), n = f.ranks;
  const size_t esize = DataTypeSize(f.dtype);
  for (size_t k = 0; k < f.kinds.size(); ++k) {
    const CollectiveKind kind = f.kinds[k];
    bench::Reporter* rep = &reporters[k];
    if (rank == 0) rep->PrintHeader(stdout);
    const std::vector<size_t> sizes =
        kind == CollectiveKind::kBarrier
            ? std::vector<size_t>{0}
            : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor);
    for (size_t bytes : sizes) {
      const size_t count =
          kind == CollectiveKind::kBarrier
              ? 0
              : bytes / esize / (WholeArraySize(kind) ? n : 1);
      if (kind != CollectiveKind::kBarrier && count == 0) continue;
      bench::Row row;
      row.count = count * (WholeArraySize(kind) ? n : 1);
      row.bytes = row.count * esize;
      row.type = TypeName(f.dtype);
      row.redop = IsReduction(kind) ? std::string(ReduceOpName(f.op)) : "none";
      row.root = IsRooted(kind) ? f.root : -1;
      const bool has_inplace =
          kind != CollectiveKind::kAllToAll && kind != CollectiveKind::kBarrier;
      row.has_inplace = has_inplace;
      for (bool in_place : {false, true}) {
        if (in_place && !has_inplace) break;
        double t = 0, issue = -1;
        int64_t wrong = 0;
        RELAY_RETURN_IF_ERROR(
            RunRow(comm, kind, f, count, in_place, &t, &issue, &wrong));
        RELAY_ASSIGN_OR_RETURN(double total_t, SumOverRanks(comm, t));
        RELAY_ASSIGN_OR_RETURN(double total_issue, SumOverRanks(comm, issue));
        RELAY_ASSIGN_OR_RETURN(int64_t total_wrong, SumOverRanks(comm, wrong));
        const double mean_t = total_t / n;
        const int64_t reported = f.check ? total_wrong : -1;
        (in_place ? row.ip_time_us : row.oop_time_us) = mean_t;
        (in_place ? row.ip_issue_us : row.oop_issue_us) =
            issue < 0 ? -1 : total_issue / n;
        (in_place ? row.ip_wrong : row.oop_wrong) = reported;
      }
      if (rank == 0) {
        rep->PrintRow(stdout, row);
        std::fflush(stdout);
      }
    }
    if (rank == 0) rep->PrintFooter(stdout);
  }
  return absl::OkStatus();
}

// Rank 0's verdict over the rows and the JSON file; returns the exit code.
int Finish(const Flags& f, const std::vector<bench::Reporter>& reporters,
           int exit_code) {
  int64_t wrong = 0;
  for (const bench::Reporter& rep : reporters) wrong += rep.TotalWrong();
  if (wrong > 0) exit_code = 1;
  if (!f.json.empty()) {
    std::vector<std::string> docs;
    for (const bench::Reporter& rep : reporters) docs.push_back(rep.ToJson());
    FILE* out = std::fopen(f.json.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "collectives: cannot write %s\n", f.json.c_str());
      return 1;
    }
    std::fprintf(out, "{\"runs\": [%s]}\n", absl::StrJoin(docs, ",\n").c_str());
    std::fclose(out);
  }
  return exit_code;
}

// --bind auto pins ranks, except over the GPU transports: their helper
// threads (NCCL's proxy, the watchdogs) inherit the CPU mask of the thread
// that creates the communicator, and pinned to the rank's one core NCCL's
// added about 10 us to every call on 2 H200s.
bool AutoBinds(const Flags& f) {
  return f.transport != "nccl" && f.transport != "cuda_ipc";
}

// This process is one rank of a launched job.
int RunLaunchedRank(const Flags& f, std::vector<bench::Reporter>& reporters,
                    int cores) {
  if (f.bind == "core" ||
      (f.bind == "auto" && AutoBinds(f) && cores > 0 && f.local_size <= cores)) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(f.local_rank % std::max(cores, 1), &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
  if (DeviceMemoryAvailable()) UseGpuOfLocalRank(f.local_rank).status().IgnoreError();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicatorFromEnvironment({}, absl::Minutes(2), f.transport);
  absl::Status result = comm.ok() ? RunRank(**comm, f, reporters) : comm.status();
  const int rank = comm.ok() ? (*comm)->rank() : -1;
  if (!result.ok()) {
    std::fprintf(stderr, "collectives: rank %d: %s\n", rank,
                 result.ToString().c_str());
    return 1;
  }
  // Rank 0 keeps the store (and its table) until the others are done: a
  // last barrier.
  absl::StatusOr<Request> last = (*comm)->Barrier();
  if (last.ok()) last->Wait().IgnoreError();
  return rank == 0 ? Finish(f, reporters, 0) : 0;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  absl::StatusOr<TransportFactory*> factory = Transports().Get(f.transport);
  if (!factory.ok()) BadFlag(std::string(factory.status().message()));

  std::vector<bench::Reporter> reporters;
  for (CollectiveKind kind : f.kinds) {
    bench::Reporter::Options o;
    o.collective = std::string(CollectiveName(kind));
    o.nranks = f.ranks;
    o.transport = f.transport;
    o.comments = {
        absl::StrCat("relay ", CollectiveName(kind), ": ", f.ranks,
                     " ranks, transport ", f.transport, ", algorithm ",
                     AlgorithmName(f.algorithm), ", bind ", f.bind,
                     f.own_stream ? ", own CUDA stream per rank" : "",
                     f.stream_order == StreamOrder::kOnStream
                         ? ", queued on the caller's stream"
                         : "",
                     f.device_memory ? ", device memory" : "",
                     f.blocking ? ", blocking calls (RunCollective)" : "",
                     f.graph ? ", replayed from a CUDA graph" : "",
                     f.window ? ", receive buffers in symmetric windows" : ""),
        absl::StrCat("-b ", f.min_bytes, " -e ", f.max_bytes, " -f ", f.factor,
                     " -n ", f.iters, " -w ", f.warmup, " -c ", f.check ? 1 : 0)};
    reporters.emplace_back(o);
  }

  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (f.launched) return RunLaunchedRank(f, reporters, cores);
  const bool bind = f.bind == "core" || (f.bind == "auto" && AutoBinds(f) &&
                                         cores > 0 && f.ranks <= cores);
  auto store = std::make_shared<InMemoryStore>();
  std::vector<absl::Status> results(f.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      if (bind) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(r % std::max(cores, 1), &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
      }
      // One GPU per rank where there are GPUs (device transports use the
      // thread's current device).
      if (DeviceMemoryAvailable()) UseGpuOfLocalRank(r).status().IgnoreError();
      CommunicatorConfig config;
      config.rank = r;
      config.size = f.ranks;
      config.store = store;
      config.transport = f.transport;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          CreateCommunicator(config);
      results[r] = comm.ok() ? RunRank(**comm, f, reporters) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  int exit_code = 0;
  for (int r = 0; r < f.ranks; ++r) {
    if (!results[r].ok()) {
      std::fprintf(stderr, "collectives: rank %d: %s\n", r,
                   results[r].ToString().c_str());
      exit_code = 1;
    }
  }
  return Finish(f, reporters, exit_code);
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
