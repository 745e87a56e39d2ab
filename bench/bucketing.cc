// bench/bucketing: what fusing small all_reduces gains. Ranks are threads on
// the loopback transport; each training "step" all_reduces --tensors float32
// tensors of --bytes each, four ways:
//   one by one, waiting    each all_reduce waited on before the next starts
//   one by one, in flight  all issued, then all waited on (what a framework
//                          without buckets does)
//   fused                  embed/bucketing's GradientBucketer with
//                          --bucket-bytes buckets (copies in and out)
//   fused, bucket views    embed/bucketing's BucketedBuffers: the tensors
//                          live inside --bucket-bytes buckets (DDP's
//                          gradient_as_bucket_view), no copies
// Every step's results are checked element by element (a wrong element
// fails the run). Prints the median step time of each and the speedup of
// each fused way over the faster unfused way.
//
//   bazel run //bench:bucketing -- [--ranks 4] [--tensors 1000] [--bytes 4096]
//       [--bucket-bytes 26214400] [--steps 15]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "bench/flags.h"
#include "embed/bucketing/bucketed_buffers.h"
#include "embed/bucketing/gradient_bucketer.h"
#include "relay.h"

namespace relay {
namespace {

struct Flags {
  int ranks = 4;
  int tensors = 1000;
  int64_t bytes = 4096;
  int64_t bucket_bytes = int64_t{25} << 20;
  int steps = 15;
  // Before each step's barrier: CPU-bound work (a training step's compute)
  // or sleep, per rank; shows what the scheduler does to the next step.
  int64_t busy_us = 0;
  int64_t idle_us = 0;
  bool spans = false;  // Print each rank's start and end of every step.
  bool settle = false;  // A barrier after each step, before its check.
};

enum class Mode { kWaitEach, kInFlight, kFused, kViews };
constexpr int kModes = 4;
constexpr const char* kModeNames[] = {"one by one, waiting",
                                      "one by one, in flight", "fused",
                                      "fused, bucket views"};

// All_reduces one step of each fused way started (rank 0's count; every
// rank's is the same).
std::atomic<size_t> fused_ops{0};
std::atomic<size_t> view_ops{0};

float Input(int rank, int t, size_t j) {
  return static_cast<float>(rank * 7 + (t + static_cast<int>(j)) % 5);
}

// When one rank started and finished one step.
struct Span {
  absl::Time start, end;
};

// One rank: runs `steps` steps of `mode`, returns each step's span (or an
// empty vector after printing an error).
std::vector<Span> RunRank(Communicator& comm, const Flags& f, Mode mode,
                            absl::Barrier* start) {
  const size_t n = static_cast<size_t>(f.bytes) / sizeof(float);
  std::vector<std::vector<float>> grads(f.tensors, std::vector<float>(n));
  std::vector<Span> seconds;
  // Kept across steps, as a framework keeps its buckets.
  GradientBucketer fuse(comm, {.bucket_bytes = static_cast<size_t>(f.bucket_bytes)});
  // The same tensors laid out inside buckets (used by kViews only).
  absl::StatusOr<BucketedBuffers> views = BucketedBuffers::Create(
      DataType::kFloat32, std::vector<size_t>(f.tensors, n),
      static_cast<size_t>(f.bucket_bytes));
  if (!views.ok()) {
    std::fprintf(stderr, "bucketing: %s\n", views.status().ToString().c_str());
    return {};
  }
  // Where tensor t lives in this mode.
  auto tensor = [&](int t) {
    return mode == Mode::kViews ? static_cast<float*>(views->buffer(t).data)
                                : grads[t].data();
  };
  start->Block();
  for (int step = 0; step < f.steps; ++step) {
    for (int t = 0; t < f.tensors; ++t) {
      float* g = tensor(t);
      for (size_t j = 0; j < n; ++j) g[j] = Input(comm.rank(), t, j);
    }
    if (f.busy_us > 0) {
      const absl::Time until = absl::Now() + absl::Microseconds(f.busy_us);
      while (absl::Now() < until) {
      }
    }
    if (f.idle_us > 0) absl::SleepFor(absl::Microseconds(f.idle_us));
    Request barrier = *comm.Barrier();
    if (!barrier.Wait().ok()) return {};
    const absl::Time t0 = absl::Now();
    absl::Status s;
    if (mode == Mode::kFused) {
      const size_t before = fuse.buckets_started();
      for (int t = 0; t < f.tensors && s.ok(); ++t) s = fuse.Add(Buffer::Of(grads[t]));
      absl::StatusOr<Request> done = fuse.Flush();
      s = s.ok() ? (done.ok() ? done->Wait() : done.status()) : s;
      if (comm.rank() == 0) fused_ops = fuse.buckets_started() - before;
    } else if (mode == Mode::kViews) {
      absl::StatusOr<Request> done = views->AllReduce(comm, ReduceOp::kSum);
      s = done.ok() ? done->Wait() : done.status();
      if (comm.rank() == 0) view_ops = views->buckets();
    } else {
      std::vector<Request> inflight;
      for (int t = 0; t < f.tensors && s.ok(); ++t) {
        absl::StatusOr<Request> r =
            comm.AllReduce(Buffer::Of(grads[t]), Buffer::Of(grads[t]), ReduceOp::kSum);
        if (!r.ok()) {
          s = r.status();
        } else if (mode == Mode::kWaitEach) {
          s = r->Wait();
        } else {
          inflight.push_back(std::move(*r));
        }
      }
      for (Request& r : inflight) {
        absl::Status w = r.Wait();
        if (s.ok()) s = w;
      }
    }
    seconds.push_back({t0, absl::Now()});
    if (!s.ok()) {
      std::fprintf(stderr, "bucketing: rank %d: %s\n", comm.rank(), s.ToString().c_str());
      return {};
    }
    if (f.settle) {
      // Ranks that finished wait for the others before checking: with more
      // ranks than cores, CPU-bound work here would keep a rank whose step
      // is already complete off the CPU for a scheduler slice (milliseconds)
      // before it sees that, and its end time would measure the scheduler.
      Request after = *comm.Barrier();
      if (!after.Wait().ok()) return {};
    }
    for (int t = 0; t < f.tensors; ++t) {
      for (size_t j = 0; j < n; ++j) {
        float want = 0;
        for (int r = 0; r < comm.size(); ++r) want += Input(r, t, j);
        if (tensor(t)[j] != want) {
          std::fprintf(stderr, "bucketing: rank %d %s: tensor %d element %zu is %g, want %g\n",
                       comm.rank(), kModeNames[static_cast<int>(mode)], t, j,
                       tensor(t)[j], want);
          return {};
        }
      }
    }
  }
  return seconds;
}

constexpr char kUsage[] =
    "bucketing: all_reduce of many small tensors, unfused vs fused\n"
    "  --ranks N         loopback ranks (threads), default 4\n"
    "  --tensors N       tensors per step, default 1000\n"
    "  --bytes N         bytes per tensor (float32), default 4096\n"
    "  --bucket-bytes N  bucket size of both fused ways, default 25 MiB\n"
    "  --steps N         timed steps per way, default 15 (median shown)\n"
    "  --busy-us N       each rank computes (spins) N us before every step\n"
    "  --idle-us N       each rank sleeps N us before every step\n"
    "  --spans 0|1       1: print every rank's start and end of every step\n"
    "                    (ms from the step's first start); default 0\n"
    "  --settle 0|1      1: a barrier after each timed step, before the\n"
    "                    check (see RunRank); default 0\n";

int Main(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("bucketing", kUsage, argc, argv);
  while (p.Next()) {
    if (p.name() == "--ranks") {
      f.ranks = p.Int(1);
    } else if (p.name() == "--tensors") {
      f.tensors = p.Int(1);
    } else if (p.name() == "--bytes") {
      f.bytes = p.Int(1);
    } else if (p.name() == "--bucket-bytes") {
      f.bucket_bytes = p.Int(1);
    } else if (p.name() == "--steps") {
      f.steps = p.Int(1);
    } else if (p.name() == "--busy-us") {
      f.busy_us = p.Int(0);
    } else if (p.name() == "--idle-us") {
      f.idle_us = p.Int(0);
    } else if (p.name() == "--spans") {
      f.spans = p.OneOf({"0", "1"}) == "1";
    } else if (p.name() == "--settle") {
      f.settle = p.OneOf({"0", "1"}) == "1";
    } else {
      p.Unknown();
    }
  }
  if (f.bytes % sizeof(float) != 0) {
    std::fprintf(stderr, "bucketing: --bytes must be a multiple of 4\n");
    return 2;
  }
  std::printf("# %d loopback ranks, %d tensors x %lld B per step, bucket %lld B, "
              "median of %d steps\n",
              f.ranks, f.tensors, static_cast<long long>(f.bytes),
              static_cast<long long>(f.bucket_bytes), f.steps);
  std::printf("%-24s %12s %10s\n", "way", "step (ms)", "ops/step");
  double median[kModes] = {};
  for (Mode mode : {Mode::kWaitEach, Mode::kInFlight, Mode::kFused, Mode::kViews}) {
    auto store = std::make_shared<InMemoryStore>();
    absl::Barrier start(f.ranks);
    std::vector<std::vector<Span>> seconds(f.ranks);
    std::vector<std::thread> threads;
    bool failed = false;
    for (int r = 0; r < f.ranks; ++r) {
      threads.emplace_back([&, r] {
        auto comm = CreateCommunicator({.rank = r, .size = f.ranks, .store = store,
                                        .transport = "loopback"});
        if (!comm.ok()) {
          std::fprintf(stderr, "bucketing: %s\n", comm.status().ToString().c_str());
          std::exit(1);
        }
        seconds[r] = RunRank(**comm, f, mode, &start);
      });
    }
    for (std::thread& t : threads) t.join();
    // A step lasts from the moment the last rank starts it to the moment
    // the last one has every result: ranks leave the barrier before it at
    // different times (with more ranks than cores, a scheduler quantum
    // apart), and that skew is not the reduction's.
    std::vector<double> step(f.steps, 0);
    for (int r = 0; r < f.ranks; ++r) {
      if (static_cast<int>(seconds[r].size()) != f.steps) failed = true;
    }
    for (int s = 0; s < f.steps && !failed && f.spans; ++s) {
      absl::Time first = absl::InfiniteFuture();
      for (int r = 0; r < f.ranks; ++r) first = std::min(first, seconds[r][s].start);
      std::printf("  %s step %d:", kModeNames[static_cast<int>(mode)], s);
      for (int r = 0; r < f.ranks; ++r) {
        std::printf("  r%d %.2f-%.2f", r,
                    absl::ToDoubleMilliseconds(seconds[r][s].start - first),
                    absl::ToDoubleMilliseconds(seconds[r][s].end - first));
      }
      std::printf("\n");
    }
    for (int s = 0; s < f.steps && !failed; ++s) {
      absl::Time last_start = absl::InfinitePast(), last_end = absl::InfinitePast();
      for (int r = 0; r < f.ranks; ++r) {
        last_start = std::max(last_start, seconds[r][s].start);
        last_end = std::max(last_end, seconds[r][s].end);
      }
      step[s] = absl::ToDoubleSeconds(last_end - last_start);
    }
    if (failed) return 1;
    std::sort(step.begin(), step.end());
    const int m = static_cast<int>(mode);
    median[m] = step[step.size() / 2];
    size_t ops = static_cast<size_t>(f.tensors);
    if (mode == Mode::kFused) ops = fused_ops.load();
    if (mode == Mode::kViews) ops = view_ops.load();
    std::printf("%-24s %12.3f %10zu\n", kModeNames[m], median[m] * 1e3, ops);
  }
  const double unfused = std::min(median[0], median[1]);
  std::printf("fused speedup over the faster unfused way: %.1fx (copying), "
              "%.1fx (bucket views)\n",
              unfused / median[2], unfused / median[3]);
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
