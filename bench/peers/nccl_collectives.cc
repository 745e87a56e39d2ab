// File: bench/peers/nccl_collectives.cc
//
// The raw-NCCL peer harness: NCCL's collectives called directly, with the
// sizes, timing and columns of relay's bench/collectives (nccl-tests'
// format, //bench:report), so relay's NCCL transport can be set beside it as
// a ratio in one run. One process drives every visible GPU (or -g of them)
// from one thread, each call a ncclGroupStart/End over the GPUs, like
// nccl-tests' -g mode.
//
// With --id-file, it is one rank of a job of processes instead, one GPU
// each (launched by tools/relayrun, whose RELAY_RANK, RELAY_WORLD_SIZE and
// RELAY_LOCAL_RANK it reads): rank 0 writes NCCL's unique id to the file,
// the others read it; each rank times its own calls between NCCL barriers,
// and rank 0 prints the mean over ranks, as relay's bench/collectives does
// under relayrun. Unchecked (-c 0) in this form.
//
// Per size: WARMUP iterations, then ITERS timed ones on the host clock
// between stream synchronisations (time per op = elapsed / ITERS);
// out-of-place, then in-place. With -c 1 every row runs once more on
// rank- and index-dependent float32 data and is checked (#wrong counts wrong
// elements over GPUs); other dtypes print N/A.
//
// Example (on a GPU host; built by bench/gpu/build.sh):
//   NCCL_NVLS_ENABLE=0 gpu_bin/nccl_collectives -b 8 -e 1G -f 2
//       --collective all_reduce --json nccl.json   (one command line)
//
// Exit status: 0 if every checked row was right, 1 if any was wrong or a
// CUDA/NCCL call failed, 2 for bad flags.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/flags.h"
#include "bench/report.h"
#include "bench/thread_barrier.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: nccl_collectives [flags]
  -b SIZE -e SIZE -f FACTOR   size sweep (default 8 .. 64M, x2)
  -n ITERS -w WARMUP          timed and warm-up iterations per size (20, 5)
  -c 0|1                      check float32 results (default 1)
  -g GPUS                     GPUs to drive (default: every visible one)
  -t 0|1                      1: one thread per GPU, each issuing its own
                              calls (relay's bench/collectives with ranks as
                              threads does the same); 0: one thread, group
                              calls, like nccl-tests -g (default 0)
  --collective NAME           all_reduce, all_gather, reduce_scatter,
                              broadcast, reduce, sendrecv, or all (default
                              all_reduce). sendrecv is nccl-tests' ring
                              exchange: each GPU sends its buffer to the
                              next and receives the previous one's, in one
                              NCCL group (the point-to-point ceiling of
                              relay's own algorithms over NCCL); it has no
                              in-place form, so both columns time it
  --dtype float32|bfloat16|float16|float64|int32   (default float32)
  --json FILE                 also write the rows as JSON
  --id-file PATH              one rank of a job of processes (relayrun):
                              the file that carries NCCL's unique id from
                              rank 0 to the others (not there yet; removed
                              by rank 0 at the end); needs -c 0
  --symmetric 0|1             1: buffers from ncclMemAlloc, registered as
                              symmetric windows (ncclCommWindowRegister,
                              NCCL_WIN_COLL_SYMMETRIC), so NCCL >= 2.27 may
                              run its symmetric-memory kernels (default 0)
  --event-per-call 0|1        1: record a CUDA event after every call, as a
                              runtime that tracks each call's completion
                              does (relay's nccl transport): what that
                              alone costs (default 0)
Size is nccl-tests' S: the whole array for all_gather and reduce_scatter,
one GPU's buffer otherwise.
)";

[[noreturn]] void BadFlag(const std::string& why) {
  std::fprintf(stderr, "nccl_collectives: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

#define CHECK_CUDA(call)                                                   \
  do {                                                                     \
    cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "nccl_collectives: %s: %s\n", #call,            \
                   cudaGetErrorString(e_));                                \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

#define CHECK_NCCL(call)                                                   \
  do {                                                                     \
    ncclResult_t r_ = (call);                                              \
    if (r_ != ncclSuccess) {                                               \
      std::fprintf(stderr, "nccl_collectives: %s: %s (%s)\n", #call,       \
                   ncclGetErrorString(r_), ncclGetLastError(nullptr));     \
      std::exit(1);                                                        \
    }                                                                      \
  } while (0)

struct Flags {
  size_t min_bytes = 8, max_bytes = 64 << 20;
  double factor = 2;
  int iters = 20, warmup = 5, gpus = 0;
  bool event_per_call = false;
  bool symmetric = false;
  bool check = true;
  bool threads = false;
  std::vector<std::string> collectives = {"all_reduce"};
  ncclDataType_t dtype = ncclFloat32;
  std::string dtype_name = "float";
  size_t esize = 4;
  std::string json;
  std::string id_file;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  bench::FlagParser p("nccl_collectives", kUsage, argc, argv);
  while (p.Next()) {
    const std::string& flag = p.name();
    if (bench::SweepFlag(p, f)) {
      continue;
    } else if (flag == "-c") {
      f.check = p.Int(0) != 0;
    } else if (flag == "-g") {
      f.gpus = p.Int(1);
    } else if (flag == "-t") {
      f.threads = p.Int(0) != 0;
    } else if (flag == "--collective") {
      const std::string& v =
          p.OneOf({"all", "all_reduce", "all_gather", "reduce_scatter",
                   "broadcast", "reduce", "sendrecv"});
      f.collectives = v == "all"
                          ? std::vector<std::string>{"all_reduce", "all_gather",
                                                     "reduce_scatter",
                                                     "broadcast", "reduce"}
                          : std::vector<std::string>{v};
    } else if (flag == "--dtype") {
      const std::string& v =
          p.OneOf({"float32", "bfloat16", "float16", "float64", "int32"});
      if (v == "float32") {
        f.dtype = ncclFloat32, f.dtype_name = "float", f.esize = 4;
      } else if (v == "bfloat16") {
        f.dtype = ncclBfloat16, f.dtype_name = "bfloat16", f.esize = 2;
      } else if (v == "float16") {
        f.dtype = ncclFloat16, f.dtype_name = "half", f.esize = 2;
      } else if (v == "float64") {
        f.dtype = ncclFloat64, f.dtype_name = "double", f.esize = 8;
      } else {
        f.dtype = ncclInt32, f.dtype_name = "int32", f.esize = 4;
      }
    } else if (flag == "--json") {
      f.json = p.value();
    } else if (flag == "--id-file") {
      f.id_file = p.value();
    } else if (flag == "--event-per-call") {
      f.event_per_call = p.Int(0) != 0;
    } else if (flag == "--symmetric") {
      f.symmetric = p.Int(0) != 0;
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 27, 0)
      if (f.symmetric) p.Fail("--symmetric needs NCCL 2.27 or later at build time");
#endif
    } else {
      p.Unknown();
    }
  }
  if (absl::Status s = bench::CheckSweep(f.min_bytes, f.max_bytes, f.factor);
      !s.ok()) {
    p.Fail(std::string(s.message()));
  }
  if (!f.id_file.empty() && f.check) p.Fail("--id-file needs -c 0");
  return f;
}

struct Gpu {
  int device = 0;
  int nranks = 1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  char* send = nullptr;
  char* recv = nullptr;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t send_window = nullptr;  // --symmetric.
  ncclWindow_t recv_window = nullptr;
#endif
  // --event-per-call: recorded in turn, one per call.
  std::vector<cudaEvent_t> events;
  size_t next_event = 0;
};

bool WholeArray(const std::string& c) {
  return c == "all_gather" || c == "reduce_scatter";
}

// Issues GPU r's part of one collective.
void IssueOne(const std::string& c, Gpu& g, int r, size_t count, bool in_place,
              const Flags& f) {
  char* recv = g.recv;
  char* send = g.send;
  if (c == "all_reduce") {
    if (in_place) send = recv;
    CHECK_NCCL(ncclAllReduce(send, recv, count, f.dtype, ncclSum, g.comm, g.stream));
  } else if (c == "broadcast") {
    if (in_place) send = recv;
    CHECK_NCCL(ncclBroadcast(send, recv, count, f.dtype, 0, g.comm, g.stream));
  } else if (c == "reduce") {
    if (in_place) send = recv;
    CHECK_NCCL(ncclReduce(send, recv, count, f.dtype, ncclSum, 0, g.comm, g.stream));
  } else if (c == "all_gather") {
    // count: per-GPU elements; in place, this GPU's block of recv.
    if (in_place) send = recv + r * count * f.esize;
    CHECK_NCCL(ncclAllGather(send, recv, count, f.dtype, g.comm, g.stream));
  } else if (c == "sendrecv") {
    const int n = g.nranks;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclSend(send, count, f.dtype, (r + 1) % n, g.comm, g.stream));
    CHECK_NCCL(ncclRecv(recv, count, f.dtype, (r + n - 1) % n, g.comm, g.stream));
    CHECK_NCCL(ncclGroupEnd());
  } else {  // reduce_scatter
    if (in_place) recv = send + r * count * f.esize;
    CHECK_NCCL(ncclReduceScatter(send, recv, count, f.dtype, ncclSum, g.comm, g.stream));
  }
  if (!g.events.empty()) {
    CHECK_CUDA(cudaEventRecord(g.events[g.next_event++ % g.events.size()],
                               g.stream));
  }
}

// Issues one collective on every GPU inside one NCCL group.
void Issue(const std::string& c, std::vector<Gpu>& gpus, size_t count,
           bool in_place, const Flags& f) {
  const int n = static_cast<int>(gpus.size());
  CHECK_NCCL(ncclGroupStart());
  for (int r = 0; r < n; ++r) IssueOne(c, gpus[r], r, count, in_place, f);
  CHECK_NCCL(ncclGroupEnd());
}

// -t 1: each GPU's thread warms up, meets the others, times ITERS calls on
// its own stream; the row's time is the mean over threads (as relay's
// bench/collectives averages over ranks).
double TimeThreaded(const std::string& c, std::vector<Gpu>& gpus, size_t count,
                    bool in_place, const Flags& f, double* issue_us) {
  const int n = static_cast<int>(gpus.size());
  bench::ThreadBarrier barrier(n);
  std::vector<double> us(n), issue(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Gpu& g = gpus[r];
      CHECK_CUDA(cudaSetDevice(g.device));
      for (int i = 0; i < f.warmup; ++i) IssueOne(c, g, r, count, in_place, f);
      CHECK_CUDA(cudaStreamSynchronize(g.stream));
      barrier.Wait();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < f.iters; ++i) IssueOne(c, g, r, count, in_place, f);
      issue[r] = std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - start)
                     .count() /
                 f.iters;
      CHECK_CUDA(cudaStreamSynchronize(g.stream));
      us[r] = std::chrono::duration<double, std::micro>(
                  std::chrono::steady_clock::now() - start)
                  .count() /
              f.iters;
    });
  }
  for (std::thread& t : threads) t.join();
  double total = 0, total_issue = 0;
  for (int r = 0; r < n; ++r) total += us[r], total_issue += issue[r];
  *issue_us = total_issue / n;
  return total / n;
}

// This process's place in a job of processes (--id-file).
struct ProcessRank {
  int rank = 0, size = 1, local_rank = 0;
};

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  int x = -1;
  if (v == nullptr || !absl::SimpleAtoi(v, &x) || x < 0) {
    BadFlag(absl::StrCat("--id-file: ", name, " is not set to a rank (run under tools/relayrun)"));
  }
  return x;
}

// Rank 0 makes the unique id and publishes it (written aside, then renamed,
// so a reader never sees half of it); the others wait up to a minute.
ncclUniqueId ShareUniqueId(const ProcessRank& p, const std::string& path) {
  ncclUniqueId id;
  if (p.rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp";
    FILE* out = std::fopen(tmp.c_str(), "wb");
    if (out == nullptr || std::fwrite(&id, sizeof(id), 1, out) != 1 ||
        std::fclose(out) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "nccl_collectives: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    return id;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (true) {
    if (FILE* in = std::fopen(path.c_str(), "rb")) {
      const bool read = std::fread(&id, sizeof(id), 1, in) == 1;
      std::fclose(in);
      if (read) return id;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "nccl_collectives: rank %d: no unique id in %s after 1 min\n",
                   p.rank, path.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The sum of `value` over the job's ranks, through NCCL (also a barrier).
double SumOverRanks(Gpu& g, double value) {
  double* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, sizeof(double)));
  CHECK_CUDA(cudaMemcpy(d, &value, sizeof(double), cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclAllReduce(d, d, 1, ncclFloat64, ncclSum, g.comm, g.stream));
  CHECK_CUDA(cudaStreamSynchronize(g.stream));
  CHECK_CUDA(cudaMemcpy(&value, d, sizeof(double), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(d));
  return value;
}

// --id-file: this rank warms up, meets the others (an NCCL barrier), times
// ITERS calls on its stream; the row's time is the mean over ranks.
double TimeProcess(const std::string& c, Gpu& g, int rank, size_t count,
                   bool in_place, const Flags& f, double* issue_us) {
  for (int i = 0; i < f.warmup; ++i) IssueOne(c, g, rank, count, in_place, f);
  CHECK_CUDA(cudaStreamSynchronize(g.stream));
  SumOverRanks(g, 0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < f.iters; ++i) IssueOne(c, g, rank, count, in_place, f);
  const double issue = std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - start)
                           .count() /
                       f.iters;
  CHECK_CUDA(cudaStreamSynchronize(g.stream));
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count() /
                    f.iters;
  *issue_us = SumOverRanks(g, issue) / g.nranks;
  return SumOverRanks(g, us) / g.nranks;
}

void SyncAll(std::vector<Gpu>& gpus) {
  for (Gpu& g : gpus) {
    CHECK_CUDA(cudaSetDevice(g.device));
    CHECK_CUDA(cudaStreamSynchronize(g.stream));
  }
}

// Input element i of GPU r: small integers, exact in float32 sums.
float InputValue(int r, size_t i) {
  return static_cast<float>((r + 1) * static_cast<int>(i % 13 + 1));
}

// Runs `body(r)` for every GPU on a thread of its own (the host side of a
// 4 GB row on 8 GPUs takes minutes on one thread).
template <typename Body>
void ForEachGpu(std::vector<Gpu>& gpus, Body body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(gpus.size()); ++r) {
    threads.emplace_back([&, r] {
      CHECK_CUDA(cudaSetDevice(gpus[r].device));
      body(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Runs the row once on fresh data and counts wrong float32 elements.
int64_t CheckRow(const std::string& c, std::vector<Gpu>& gpus, size_t count,
                 bool in_place, const Flags& f) {
  const int n = static_cast<int>(gpus.size());
  const size_t send_count = c == "reduce_scatter" ? count * n : count;
  const size_t recv_count = c == "all_gather" ? count * n : count;
  ForEachGpu(gpus, [&](int r) {
    std::vector<float> in(send_count);
    for (size_t i = 0; i < send_count; ++i) in[i] = InputValue(r, i);
    char* dst = gpus[r].send;
    if (in_place && (c == "all_reduce" || c == "broadcast" || c == "reduce")) {
      dst = gpus[r].recv;
    } else if (in_place && c == "all_gather") {
      dst = gpus[r].recv + r * count * f.esize;
    }
    // On the GPU's own stream: a plain cudaMemcpy from pageable memory may
    // return before its DMA lands, and the collective runs on a
    // non-blocking stream that would not wait for it (seen: wrong elements
    // in one in-place row on 2 H200s).
    CHECK_CUDA(cudaMemcpyAsync(dst, in.data(), send_count * 4,
                               cudaMemcpyHostToDevice, gpus[r].stream));
    CHECK_CUDA(cudaStreamSynchronize(gpus[r].stream));
  });
  Issue(c, gpus, count, in_place, f);
  SyncAll(gpus);
  std::vector<int64_t> wrong(n, 0);
  const float total = static_cast<float>(n * (n + 1) / 2);
  ForEachGpu(gpus, [&](int r) {
    if (c == "reduce" && r != 0) return;  // Defined at the root only.
    std::vector<float> out(recv_count);
    const char* src = gpus[r].recv;
    if (in_place && c == "reduce_scatter") src = gpus[r].send + r * count * f.esize;
    CHECK_CUDA(cudaMemcpy(out.data(), src, recv_count * 4, cudaMemcpyDeviceToHost));
    // The expected value by collective, chosen once per row: comparing the
    // name for every element made checking a 1 GB row take half a minute
    // of a GPU lease.
    auto count_wrong = [&](auto want) {
      int64_t w = 0;
      for (size_t i = 0; i < recv_count; ++i) w += out[i] != want(i);
      return w;
    };
    if (c == "all_reduce" || c == "reduce") {
      wrong[r] = count_wrong(
          [&](size_t i) { return total * static_cast<float>(i % 13 + 1); });
    } else if (c == "broadcast") {
      wrong[r] = count_wrong([](size_t i) { return InputValue(0, i); });
    } else if (c == "all_gather") {
      wrong[r] = count_wrong([&](size_t i) {
        return InputValue(static_cast<int>(i / count), i % count);
      });
    } else if (c == "sendrecv") {
      wrong[r] = count_wrong(
          [&](size_t i) { return InputValue((r + n - 1) % n, i); });
    } else {
      wrong[r] = count_wrong([&](size_t i) {
        const size_t gi = r * count + i;  // Element of the whole vector.
        return total * static_cast<float>(gi % 13 + 1);
      });
    }
  });
  int64_t total_wrong = 0;
  for (int64_t w : wrong) total_wrong += w;
  return total_wrong;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  int visible = 0;
  CHECK_CUDA(cudaGetDeviceCount(&visible));
  const int n = f.gpus > 0 ? f.gpus : visible;
  if (n > visible) BadFlag(absl::StrCat("-g ", n, " but ", visible, " GPUs are visible"));
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  // One process for every GPU, or (--id-file) one GPU of a job of processes.
  const bool processes = !f.id_file.empty();
  ProcessRank proc;
  if (processes) {
    proc.rank = EnvInt("RELAY_RANK");
    proc.size = EnvInt("RELAY_WORLD_SIZE");
    proc.local_rank = EnvInt("RELAY_LOCAL_RANK");
  }
  const int nranks = processes ? proc.size : n;
  std::vector<Gpu> gpus(processes ? 1 : n);
  std::vector<ncclComm_t> comms(gpus.size());
  if (processes) {
    gpus[0].device = proc.local_rank % visible;
    CHECK_CUDA(cudaSetDevice(gpus[0].device));
    const ncclUniqueId id = ShareUniqueId(proc, f.id_file);
    CHECK_NCCL(ncclCommInitRank(&comms[0], proc.size, id, proc.rank));
  } else {
    std::vector<int> devices(n);
    for (int r = 0; r < n; ++r) devices[r] = gpus[r].device = r;
    CHECK_NCCL(ncclCommInitAll(comms.data(), n, devices.data()));
  }
  const bool printer = !processes || proc.rank == 0;
  const size_t max_elems = f.max_bytes / f.esize + 1;
  for (size_t r = 0; r < gpus.size(); ++r) {
    Gpu& g = gpus[r];
    g.comm = comms[r];
    g.nranks = nranks;
    CHECK_CUDA(cudaSetDevice(g.device));
    CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    if (f.event_per_call) {
      g.events.resize(64);
      for (cudaEvent_t& e : g.events) {
        CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
    }
    // all_gather's recv and reduce_scatter's send hold the whole array.
    if (f.symmetric) {
      CHECK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&g.send), max_elems * f.esize));
      CHECK_NCCL(ncclMemAlloc(reinterpret_cast<void**>(&g.recv), max_elems * f.esize));
    } else {
      CHECK_CUDA(cudaMalloc(&g.send, max_elems * f.esize));
      CHECK_CUDA(cudaMalloc(&g.recv, max_elems * f.esize));
    }
    CHECK_CUDA(cudaMemset(g.send, 0, max_elems * f.esize));
    CHECK_CUDA(cudaMemset(g.recv, 0, max_elems * f.esize));
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  if (f.symmetric) {
    // Collective over the ranks: one group for every GPU this process drives.
    CHECK_NCCL(ncclGroupStart());
    for (Gpu& g : gpus) {
      CHECK_CUDA(cudaSetDevice(g.device));
      CHECK_NCCL(ncclCommWindowRegister(g.comm, g.send, max_elems * f.esize,
                                        &g.send_window, NCCL_WIN_COLL_SYMMETRIC));
      CHECK_NCCL(ncclCommWindowRegister(g.comm, g.recv, max_elems * f.esize,
                                        &g.recv_window, NCCL_WIN_COLL_SYMMETRIC));
    }
    CHECK_NCCL(ncclGroupEnd());
  }
#endif
  int64_t total_wrong = 0;
  std::vector<std::string> docs;
  for (const std::string& c : f.collectives) {
    bench::Reporter::Options opts;
    opts.collective = c;
    opts.nranks = nranks;
    opts.peer = "nccl";
    opts.comments = {absl::StrCat("raw NCCL ", version / 10000, ".",
                                  (version / 100) % 100, ".", version % 100,
                                  " ", c, ": ", nranks, " GPUs, ",
                                  processes    ? "one process per GPU"
                                  : f.threads ? "one process, one thread per GPU"
                                              : "one process, group calls",
                                  f.symmetric ? ", symmetric windows" : ""),
                     absl::StrCat("-b ", f.min_bytes, " -e ", f.max_bytes,
                                  " -f ", f.factor, " -n ", f.iters, " -w ",
                                  f.warmup, " -c ", f.check ? 1 : 0)};
    bench::Reporter reporter(opts);
    if (printer) reporter.PrintHeader(stdout);
    for (size_t bytes : bench::SizeSweep(f.min_bytes, f.max_bytes, f.factor)) {
      const size_t count = bytes / f.esize / (WholeArray(c) ? nranks : 1);
      if (count == 0) continue;
      bench::Row row;
      row.count = count * (WholeArray(c) ? nranks : 1);
      row.bytes = row.count * f.esize;
      row.type = f.dtype_name;
      row.redop = (c == "all_reduce" || c == "reduce" || c == "reduce_scatter") ? "sum" : "none";
      row.root = (c == "broadcast" || c == "reduce") ? 0 : -1;
      for (bool in_place : {false, true}) {
        double us = 0, issue_us = 0;
        if (processes) {
          us = TimeProcess(c, gpus[0], proc.rank, count, in_place, f, &issue_us);
        } else if (f.threads) {
          us = TimeThreaded(c, gpus, count, in_place, f, &issue_us);
        } else {
          for (int i = 0; i < f.warmup; ++i) Issue(c, gpus, count, in_place, f);
          SyncAll(gpus);
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < f.iters; ++i) Issue(c, gpus, count, in_place, f);
          issue_us = std::chrono::duration<double, std::micro>(
                         std::chrono::steady_clock::now() - start)
                         .count() /
                     f.iters;
          SyncAll(gpus);
          us = std::chrono::duration<double, std::micro>(
                   std::chrono::steady_clock::now() - start)
                   .count() /
               f.iters;
        }
        int64_t wrong = -1;
        if (f.check && f.dtype == ncclFloat32) {
          wrong = CheckRow(c, gpus, count, in_place, f);
          total_wrong += wrong;
        }
        (in_place ? row.ip_time_us : row.oop_time_us) = us;
        (in_place ? row.ip_issue_us : row.oop_issue_us) = issue_us;
        (in_place ? row.ip_wrong : row.oop_wrong) = wrong;
      }
      if (printer) {
        reporter.PrintRow(stdout, row);
        std::fflush(stdout);
      }
    }
    if (printer) reporter.PrintFooter(stdout);
    docs.push_back(reporter.ToJson());
  }
  if (processes) {
    SumOverRanks(gpus[0], 0);  // Every rank has read the id by now.
    if (proc.rank == 0) std::remove(f.id_file.c_str());
  }
  if (printer && !f.json.empty()) {
    FILE* out = std::fopen(f.json.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "nccl_collectives: cannot write %s\n", f.json.c_str());
      return 1;
    }
    std::string all;
    for (size_t i = 0; i < docs.size(); ++i) all += (i ? ",\n" : "") + docs[i];
    std::fprintf(out, "{\"runs\": [%s]}\n", all.c_str());
    std::fclose(out);
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  if (f.symmetric) {
    ncclGroupStart();
    for (Gpu& g : gpus) {
      cudaSetDevice(g.device);
      ncclCommWindowDeregister(g.comm, g.send_window);
      ncclCommWindowDeregister(g.comm, g.recv_window);
    }
    ncclGroupEnd();
  }
#endif
  for (Gpu& g : gpus) {
    cudaSetDevice(g.device);
    if (f.symmetric) {
      ncclMemFree(g.send);
      ncclMemFree(g.recv);
    } else {
      cudaFree(g.send);
      cudaFree(g.recv);
    }
    for (cudaEvent_t e : g.events) cudaEventDestroy(e);
    cudaStreamDestroy(g.stream);
    ncclCommDestroy(g.comm);
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
