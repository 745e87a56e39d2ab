// bench/gpu/added_latency: the time relay's NCCL transport adds to a small
// native collective, against raw NCCL in the same process, on the same
// GPUs and stream, in the same seconds.
//
// Why another harness: on the shared GPU hosts a program's time per call
// moves by 1-2 us from one run to the next, more than the time relay adds,
// so separate programs run one after the other cannot measure it. Here one thread per GPU holds both a raw NCCL
// communicator and a relay communicator over the NCCL transport, and
// alternates blocks of CALLS calls between them, ROUNDS times per size.
// A third side is raw NCCL plus one cudaEventRecord after every call, the
// one CUDA call relay makes that raw NCCL does not (its completion event):
// the floor relay's transport could reach. The sides' order rotates from
// round to round. Each block is timed
// as nccl-tests times: the calls queued back to back on the thread's
// stream, one cudaStreamSynchronize, time per call = elapsed / CALLS. The
// figure to quote is the median over rounds of the difference between the
// relay block and the raw block of the same round; the host's time to
// queue a block (before the synchronize) is reported the same way.
//
// relay's calls are Communicator collectives on device buffers with the
// thread's stream and --order (on: StreamOrder::kOnStream, NCCL's own
// semantics; after: the default, the transport's stream ordered after the
// caller's by an event), algorithm native. Requests are dropped as they
// are replaced (the transport's watchdog completes them), as
// bench/collectives does.
//
// Usage (GPU host; built by bench/gpu/build.sh):
//   added_latency [-b 8 -e 64K -f 4] [-n CALLS] [-r ROUNDS] [-g GPUS]
//                 [--collective all_reduce|all_gather|reduce_scatter]
//                 [--order on|after] [--in-place 0|1]
// Exit status: 0, 1 if a call failed, 2 for bad flags.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/flags.h"
#include "bench/report.h"
#include "bench/thread_barrier.h"
#include "relay.h"
#include "transports/nccl/nccl_status.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: added_latency [flags]
  -b SIZE -e SIZE -f FACTOR   sizes in bytes, per rank's send buffer for
                              all_reduce and all_gather, receive buffer for
                              reduce_scatter (default 8 .. 64K, x4)
  -n CALLS                    calls per timed block (default 100)
  -w WARMUP                   warm-up calls per size and side (default 100)
  -r ROUNDS                   raw/relay block pairs per size (default 30)
  -g GPUS                     GPUs, one thread each (default: all visible)
  --collective NAME           all_reduce (default), all_gather, reduce_scatter
  --order on|after            relay's StreamOrder: on (kOnStream, default)
                              or after (kAfterStream, relay's default)
  --in-place 0|1              1: send and receive buffers alias (default 0)
  -h, --help                  this text
)";

struct Flags {
  size_t min_bytes = 8, max_bytes = 64 << 10;
  double factor = 4;
  int iters = 100, warmup = 100, rounds = 30, gpus = 0;
  std::string collective = "all_reduce";
  StreamOrder order = StreamOrder::kOnStream;
  bool in_place = false;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("added_latency", kUsage, argc, argv);
  while (p.Next()) {
    if (bench::SweepFlag(p, f)) continue;
    if (p.name() == "-r") {
      f.rounds = p.Int(1);
    } else if (p.name() == "-g") {
      f.gpus = p.Int(1);
    } else if (p.name() == "--collective") {
      f.collective = p.OneOf({"all_reduce", "all_gather", "reduce_scatter"});
    } else if (p.name() == "--order") {
      f.order = p.OneOf({"on", "after"}) == "on" ? StreamOrder::kOnStream
                                                 : StreamOrder::kAfterStream;
    } else if (p.name() == "--in-place") {
      f.in_place = p.Int(0) != 0;
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

// The three sides of a round.
enum Side { kRaw = 0, kRawEvent = 1, kRelay = 2, kSides = 3 };

// One size's figures on one rank: per side, per round, us per call and host
// us to queue a call.
struct Rounds {
  std::vector<double> time[kSides], issue[kSides];
};

class Rank {
 public:
  Rank(const Flags& f, int rank, int size) : f_(f), rank_(rank), size_(size) {}
  ~Rank() {
    relay_.reset();
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (raw_ != nullptr) ncclCommDestroy(raw_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (send_ != nullptr) cudaFree(send_);
    if (recv_ != nullptr) cudaFree(recv_);
  }

  absl::Status Init(const ncclUniqueId& id, std::shared_ptr<Store> store) {
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(rank_), "cudaSetDevice"));
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
        "cudaStreamCreate"));
    const size_t most = f_.max_bytes * static_cast<size_t>(size_);
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&send_, most), "cudaMalloc"));
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&recv_, most), "cudaMalloc"));
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaMemset(send_, 0, most), "cudaMemset"));
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaMemset(recv_, 0, most), "cudaMemset"));
    RELAY_RETURN_IF_ERROR(
        NcclStatus(ncclCommInitRank(&raw_, size_, id, rank_), "ncclCommInitRank"));
    // As relay's pool keeps them: created once, recorded in turn.
    events_.resize(64);
    for (cudaEvent_t& e : events_) {
      RELAY_RETURN_IF_ERROR(CudaStatus(
          cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
          "cudaEventCreate"));
    }
    CommunicatorConfig config;
    config.rank = rank_;
    config.size = size_;
    config.store = std::move(store);
    config.transport = "nccl";
    RELAY_ASSIGN_OR_RETURN(relay_, CreateCommunicator(config));
    options_.algorithm = Algorithm::kNative;
    options_.stream = stream_;
    options_.stream_order = f_.order;
    return absl::OkStatus();
  }

  // `bytes` as the usage says; count is in float32 elements.
  absl::Status Raw(size_t count) {
    void* out = f_.in_place ? send_ : recv_;
    if (f_.collective == "all_reduce") {
      return NcclStatus(ncclAllReduce(send_, out, count, ncclFloat32, ncclSum, raw_,
                                stream_),
                  "ncclAllReduce");
    }
    if (f_.collective == "all_gather") {
      // In place, rank r's part of the output is its input.
      const void* in = f_.in_place
                           ? static_cast<float*>(send_) + count * rank_
                           : send_;
      return NcclStatus(ncclAllGather(in, out, count, ncclFloat32, raw_, stream_),
                  "ncclAllGather");
    }
    const void* in = send_;
    void* to = f_.in_place ? static_cast<float*>(send_) + count * rank_ : recv_;
    return NcclStatus(ncclReduceScatter(in, to, count, ncclFloat32, ncclSum, raw_,
                                  stream_),
                "ncclReduceScatter");
  }

  absl::StatusOr<Request> Relay(size_t count) {
    const Device d = Device::Cuda(rank_);
    float* s = static_cast<float*>(send_);
    float* r = static_cast<float*>(f_.in_place ? send_ : recv_);
    if (f_.collective == "all_reduce") {
      return relay_->AllReduce(ConstBuffer::Of(s, count, d),
                               Buffer::Of(r, count, d), ReduceOp::kSum,
                               options_);
    }
    const size_t whole = count * static_cast<size_t>(size_);
    if (f_.collective == "all_gather") {
      const float* in = f_.in_place ? s + count * rank_ : s;
      return relay_->AllGather(ConstBuffer::Of(in, count, d),
                               Buffer::Of(r, whole, d), options_);
    }
    float* to = f_.in_place ? s + count * rank_ : r;
    return relay_->ReduceScatter(ConstBuffer::Of(s, whole, d),
                                 Buffer::Of(to, count, d), ReduceOp::kSum,
                                 options_);
  }

  // CALLS calls of one side, timed: us per call and host us to queue one.
  absl::Status Block(Side side, size_t count, int calls, double* per_call,
                     double* issue) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    Request last;
    for (int i = 0; i < calls; ++i) {
      if (side == kRelay) {
        RELAY_ASSIGN_OR_RETURN(last, Relay(count));
      } else {
        RELAY_RETURN_IF_ERROR(Raw(count));
        if (side == kRawEvent) {
          RELAY_RETURN_IF_ERROR(CudaStatus(
              cudaEventRecord(events_[next_event_++ % events_.size()], stream_),
              "cudaEventRecord"));
        }
      }
    }
    const auto queued = Clock::now();
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "sync"));
    if (last.valid()) RELAY_RETURN_IF_ERROR(last.Wait());
    const auto end = Clock::now();
    *per_call =
        std::chrono::duration<double, std::micro>(end - start).count() / calls;
    *issue = std::chrono::duration<double, std::micro>(queued - start).count() /
             calls;
    return absl::OkStatus();
  }

 private:
  const Flags& f_;
  const int rank_, size_;
  cudaStream_t stream_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  ncclComm_t raw_ = nullptr;
  std::unique_ptr<Communicator> relay_;
  CollectiveOptions options_;
  std::vector<cudaEvent_t> events_;
  size_t next_event_ = 0;
};

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 1) {
    std::fprintf(stderr, "added_latency: no GPU visible\n");
    return 1;
  }
  const int gpus = f.gpus > 0 ? f.gpus : visible;
  if (gpus > visible) {
    std::fprintf(stderr, "added_latency: -g %d, but %d GPUs are visible\n",
                 gpus, visible);
    return 2;
  }
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    std::fprintf(stderr, "added_latency: ncclGetUniqueId failed\n");
    return 1;
  }
  const std::vector<size_t> sizes =
      bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor);
  // results[rank][size index]
  std::vector<std::vector<Rounds>> results(gpus,
                                           std::vector<Rounds>(sizes.size()));
  std::vector<absl::Status> status(gpus);
  auto store = std::make_shared<InMemoryStore>();
  bench::ThreadBarrier barrier(gpus);
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      Rank rank(f, r, gpus);
      absl::Status s = rank.Init(id, store);
      for (size_t i = 0; s.ok() && i < sizes.size(); ++i) {
        const size_t count = std::max<size_t>(1, sizes[i] / sizeof(float));
        double t = 0, q = 0;
        for (int side = 0; side < kSides; ++side) {
          s.Update(rank.Block(static_cast<Side>(side), count, f.warmup, &t, &q));
        }
        Rounds& out = results[r][i];
        for (int k = 0; s.ok() && k < f.rounds; ++k) {
          for (int j = 0; s.ok() && j < kSides; ++j) {
            const Side side = static_cast<Side>((j + k) % kSides);
            barrier.Wait();
            s.Update(rank.Block(side, count, f.iters, &t, &q));
            out.time[side].push_back(t);
            out.issue[side].push_back(q);
          }
        }
      }
      status[r] = s;
      // A failed rank stops taking part: the others would wait for it at
      // the barrier, so it fails the job instead (exit below).
      if (!s.ok()) {
        std::fprintf(stderr, "added_latency: rank %d: %s\n", r,
                     s.ToString().c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::printf("# added_latency: %s, %d GPUs, %s, relay %s, %d calls a block, "
              "%d rounds (raw, raw + event and relay blocks in turn)\n",
              f.collective.c_str(), gpus, f.in_place ? "in place" : "out of place",
              f.order == StreamOrder::kOnStream ? "kOnStream" : "kAfterStream",
              f.iters, f.rounds);
  std::printf("# rank 0's blocks, us per call: each side's median over rounds; "
              "+relay and +event = median over rounds of (that side - raw) in "
              "the same round, with its 25th..75th percentiles; issue: the "
              "same for the host's time to queue a call\n");
  std::printf("%9s %7s %7s %7s %19s %19s %9s %9s %9s\n", "size(B)", "raw",
              "event", "relay", "+relay(p25..p75)", "+event(p25..p75)",
              "issue_raw", "+issue_rl", "+issue_ev");
  // Median, 25th and 75th percentiles of side - raw, within rounds.
  struct Spread {
    double median, p25, p75;
  };
  auto added = [](const std::vector<double>& side,
                  const std::vector<double>& raw) {
    std::vector<double> d;
    for (size_t k = 0; k < raw.size(); ++k) d.push_back(side[k] - raw[k]);
    std::sort(d.begin(), d.end());
    return Spread{bench::Median(d), d[d.size() / 4], d[(d.size() * 3) / 4]};
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Rounds& r0 = results[0][i];
    const Spread rl = added(r0.time[kRelay], r0.time[kRaw]);
    const Spread ev = added(r0.time[kRawEvent], r0.time[kRaw]);
    std::printf("%9zu %7.2f %7.2f %7.2f %+6.2f(%+5.2f..%+5.2f) "
                "%+6.2f(%+5.2f..%+5.2f) %9.2f %+9.2f %+9.2f\n",
                sizes[i], bench::Median(r0.time[kRaw]), bench::Median(r0.time[kRawEvent]),
                bench::Median(r0.time[kRelay]), rl.median, rl.p25, rl.p75, ev.median,
                ev.p25, ev.p75, bench::Median(r0.issue[kRaw]),
                added(r0.issue[kRelay], r0.issue[kRaw]).median,
                added(r0.issue[kRawEvent], r0.issue[kRaw]).median);
  }
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
