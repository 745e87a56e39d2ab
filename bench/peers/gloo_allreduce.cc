// File: bench/peers/gloo_allreduce.cc
//
// The peer harness for Gloo (Debian's libgloo, the library behind
// torch.distributed's "gloo" backend): times Gloo's all_reduce (float32 sum)
// over an nccl-tests size sweep and prints it in the nccl-tests format
// (//bench:report). One process per rank, started by tools/relayrun (it reads
// RELAY_RANK and RELAY_WORLD_SIZE); ranks meet through a Gloo FileStore and
// talk over Gloo's TCP transport on 127.0.0.1. Only rank 0 prints.
//
// Gloo's all_reduce is in place. Per size: WARMUP iterations, a barrier,
// ITERS timed iterations; the time per op is the largest over ranks of
// elapsed / ITERS. With -c 1 the size is run once more on fresh data and
// checked; #wrong counts wrong elements over ranks.
//
// Algorithms (--algorithm): ring, ring_chunked, halving_doubling, bcube (the
// classic gloo::Allreduce* classes) and new_ring, new_bcube (gloo::allreduce
// with AllreduceOptions, what torch's ProcessGroupGloo calls).
//
// Example:
//   tools/relayrun -n 4 -- bazel-bin/bench/peers/gloo_allreduce
//       --algorithm ring -b 8 -e 64M -f 2 -n 20 -w 5 --json ring.json
//   (one command line)
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/flags.h"
#include "bench/report.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"
#include "runtime/bootstrap/environment.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: gloo_allreduce [flags]   (one rank per process, under relayrun)
  -b SIZE -e SIZE -f FACTOR   size sweep (default 8 .. 64M, x2)
  -n ITERS -w WARMUP          timed and warm-up iterations per size (20, 5)
  -c 0|1                      check results (default 1)
  --algorithm NAME            ring, ring_chunked, halving_doubling, bcube,
                              new_ring, new_bcube (default ring)
  --store-dir DIR             Gloo FileStore directory (default
                              /tmp/relay-gloo-<job token prefix>)
  --json FILE                 also write the rows as JSON (rank 0)
)";

struct Flags {
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5;
  bool check = true;
  std::string algorithm = "ring";
  std::string store_dir;
  std::string json;
};

[[noreturn]] void BadFlag(const std::string& why) {
  std::fprintf(stderr, "gloo_allreduce: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("gloo_allreduce", kUsage, argc, argv);
  while (p.Next()) {
    const std::string& flag = p.name();
    if (bench::SweepFlag(p, f)) {
      continue;
    } else if (flag == "-c") {
      f.check = p.Int(0) != 0;
    } else if (flag == "--algorithm") {
      f.algorithm = p.OneOf({"ring", "ring_chunked", "halving_doubling", "bcube",
                             "new_ring", "new_bcube"});
    } else if (flag == "--store-dir") {
      f.store_dir = p.value();
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
  return f;
}

// One all_reduce of `count` floats at `data`, in place, with the chosen
// algorithm. The classic algorithms are built per call, as a caller that
// varies sizes would.
void AllReduce(const std::string& algorithm,
               const std::shared_ptr<gloo::Context>& context, float* data,
               size_t count) {
  const int n = static_cast<int>(count);
  std::vector<float*> ptrs = {data};
  if (algorithm == "ring") {
    gloo::AllreduceRing<float>(context, ptrs, n).run();
  } else if (algorithm == "ring_chunked") {
    gloo::AllreduceRingChunked<float>(context, ptrs, n).run();
  } else if (algorithm == "halving_doubling") {
    gloo::AllreduceHalvingDoubling<float>(context, ptrs, n).run();
  } else if (algorithm == "bcube") {
    gloo::AllreduceBcube<float>(context, ptrs, n).run();
  } else {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(data, count);
    opts.setAlgorithm(algorithm == "new_ring"
                          ? gloo::AllreduceOptions::Algorithm::RING
                          : gloo::AllreduceOptions::Algorithm::BCUBE);
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    opts.setReduceFunction(sum);
    gloo::allreduce(opts);
  }
}

double MaxOverRanks(const std::shared_ptr<gloo::Context>& context, double v) {
  std::vector<double*> ptrs = {&v};
  gloo::AllreduceRing<double>(context, ptrs, 1,
                              gloo::ReductionFunction<double>::max)
      .run();
  return v;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) BadFlag(std::string(env.status().message()));
  const int rank = env->rank, n = env->size;
  std::string dir = f.store_dir;
  if (dir.empty()) {
    dir = absl::StrCat("/tmp/relay-gloo-",
                       env->token.substr(0, 16).empty()
                           ? absl::StrCat(env->store_port)
                           : env->token.substr(0, 16));
  }
  mkdir(dir.c_str(), 0700);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, n);
  context->connectFullMesh(store, device);

  bench::Reporter::Options opts;
  opts.collective = "all_reduce";
  opts.nranks = n;
  opts.peer = "gloo";
  opts.comments = {absl::StrCat("gloo all_reduce (", f.algorithm, "), ", n,
                                " processes, tcp on 127.0.0.1")};
  bench::Reporter reporter(opts);
  if (rank == 0) reporter.PrintHeader(stdout);

  std::vector<float> data(f.max_bytes / sizeof(float) + 1);
  gloo::BarrierAllToAll barrier(context);
  int64_t total_wrong = 0;
  for (size_t bytes : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor)) {
    const size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    for (size_t i = 0; i < count; ++i) data[i] = float(rank + 1);
    for (int i = 0; i < f.warmup; ++i) {
      AllReduce(f.algorithm, context, data.data(), count);
    }
    barrier.run();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < f.iters; ++i) {
      AllReduce(f.algorithm, context, data.data(), count);
    }
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      f.iters;
    const double t = MaxOverRanks(context, us);
    int64_t wrong = -1;
    if (f.check) {
      for (size_t i = 0; i < count; ++i) {
        data[i] = float((rank + 1) * static_cast<int>(i % 17 + 1));
      }
      AllReduce(f.algorithm, context, data.data(), count);
      int64_t mine = 0;
      for (size_t i = 0; i < count; ++i) {
        const float want = float(n * (n + 1) / 2 * static_cast<int>(i % 17 + 1));
        if (data[i] != want) ++mine;
      }
      wrong = static_cast<int64_t>(MaxOverRanks(context, double(mine)));
      total_wrong += wrong;
    }
    bench::Row row;
    row.bytes = count * sizeof(float);
    row.count = count;
    row.type = "float";
    row.redop = "sum";
    row.root = -1;
    row.oop_time_us = t;
    row.oop_wrong = wrong;
    row.has_inplace = false;
    if (rank == 0) {
      reporter.PrintRow(stdout, row);
      std::fflush(stdout);
    }
  }
  if (rank == 0) {
    reporter.PrintFooter(stdout);
    if (!f.json.empty()) {
      absl::Status written = reporter.WriteJson(f.json);
      if (!written.ok()) {
        std::fprintf(stderr, "gloo_allreduce: %s\n",
                     std::string(written.message()).c_str());
        return 1;
      }
    }
  }
  barrier.run();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
