// File: bench/peers/mpi_collectives.cc
//
// The peer harness for MPI: times MPI collectives over an nccl-tests size
// sweep and prints them in the nccl-tests format (//bench:report), so relay's
// figures can be set beside Open MPI's. Run one process per rank under mpirun;
// only rank 0 prints. bench/peers/run_mpi_allreduce.sh builds and runs it.
//
// Before the sweep, WARMUP iterations at the largest and at the smallest size
// (as nccl-tests). Per size: WARMUP iterations, MPI_Barrier, ITERS timed
// iterations (MPI_Wtime); the time per op is the largest over ranks of
// elapsed / ITERS.
// Out-of-place runs first, then in-place (MPI_IN_PLACE). With -c 1 each mode
// is then run once more on fresh data and checked against a result computed
// locally; #wrong is the number of wrong elements, summed over ranks.
//
// Example:
//   bazel build //bench/peers:mpi_collectives
//   mpirun --allow-run-as-root --oversubscribe -np 4
//       bazel-bin/bench/peers/mpi_collectives -b 8 -e 64M -f 8 -n 20 -w 5
//       --collective all_reduce --dtype float32 --op sum --json ar.json
//   (one command line), or: bench/peers/run_mpi_allreduce.sh --np 4 -b 8 ...

#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "bench/report.h"

namespace relay {
namespace bench {
namespace {

constexpr int kRoot = 0;  // Root of broadcast and reduce.

constexpr char kUsage[] =
    R"(usage: mpirun -np N mpi_collectives [flags]

Times an MPI collective over a size sweep; prints nccl-tests-style rows.
  -b, --minbytes SIZE       smallest size (default 32M); SIZE: 8, 1K, 64M, 1G
  -e, --maxbytes SIZE       largest size (default 32M)
  -f, --stepfactor F        multiply the size by F each step (default 2)
  -n, --iters N             timed iterations per size (default 20)
  -w, --warmup_iters N      warm-up iterations per size (default 5)
  -c, --check 0|1           check results (default 1)
  -d, --dtype TYPE          float32 (default), float64 or int32
  -o, --op OP               sum (default), prod, min or max
      --collective NAME     all_reduce (default), all_gather, reduce_scatter,
                            broadcast, reduce or all_to_all
      --json FILE           also write the rows to FILE as JSON (rank 0)
  -h, --help                this message
Sizes are nccl-tests' S: the whole array for all_gather, reduce_scatter and
all_to_all (per-rank count * nranks * element size), one rank's buffer for the
others. Exit status: 0 ok, 1 wrong results or I/O error, 2 bad flags.
)";

struct Flags {
  size_t min_bytes = size_t{32} << 20;
  size_t max_bytes = size_t{32} << 20;
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  std::string dtype = "float32";
  std::string op = "sum";
  std::string collective = "all_reduce";
  std::string json;
  bool help = false;
};

const std::vector<std::string>& SupportedCollectives() {
  static const auto* names = new std::vector<std::string>{
      "all_reduce", "all_gather", "reduce_scatter",
      "broadcast",  "reduce",     "all_to_all"};
  return *names;
}

bool Contains(const std::vector<std::string>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Maps a flag as written (-b, --minbytes) to its short spelling, or "" if it
// is not ours.
std::string CanonicalFlag(absl::string_view name) {
  static const std::vector<std::vector<std::string>> kSpellings = {
      {"-b", "--minbytes"},     {"-e", "--maxbytes"},
      {"-f", "--stepfactor"},   {"-n", "--iters"},
      {"-w", "--warmup_iters"}, {"-c", "--check"},
      {"-d", "--dtype", "--datatype"},
      {"-o", "--op"},           {"--collective"},
      {"--json"}};
  for (const std::vector<std::string>& spellings : kSpellings) {
    if (Contains(spellings, name)) return spellings.front();
  }
  return "";
}

absl::Status ParseInt(absl::string_view flag, absl::string_view text, int min,
                      int* out) {
  if (!absl::SimpleAtoi(text, out) || *out < min) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " wants an integer >= ", min, ", got \"", text, "\""));
  }
  return absl::OkStatus();
}

absl::Status ApplyFlag(const std::string& flag, absl::string_view value,
                       Flags* f) {
  if (flag == "-b" || flag == "-e") {
    absl::StatusOr<size_t> size = ParseSize(value);
    if (!size.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": ", size.status().message()));
    }
    (flag == "-b" ? f->min_bytes : f->max_bytes) = *size;
  } else if (flag == "-f") {
    if (!absl::SimpleAtod(value, &f->factor) || !std::isfinite(f->factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("-f wants a number, got \"", value, "\""));
    }
  } else if (flag == "-n") {
    return ParseInt(flag, value, 1, &f->iters);
  } else if (flag == "-w") {
    return ParseInt(flag, value, 0, &f->warmup);
  } else if (flag == "-c") {
    if (value != "0" && value != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("-c wants 0 or 1, got \"", value, "\""));
    }
    f->check = value == "1";
  } else if (flag == "-d") {
    // nccl-tests' names are accepted too.
    if (value == "float") value = "float32";
    if (value == "double") value = "float64";
    if (value != "float32" && value != "float64" && value != "int32") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--dtype wants float32, float64 or int32, got \"", value, "\""));
    }
    f->dtype = std::string(value);
  } else if (flag == "-o") {
    if (value != "sum" && value != "prod" && value != "min" && value != "max") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--op wants sum, prod, min or max, got \"", value, "\""));
    }
    f->op = std::string(value);
  } else if (flag == "--collective") {
    if (!Contains(SupportedCollectives(), value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--collective wants one of ",
                       absl::StrJoin(SupportedCollectives(), ", "), "; got \"",
                       value, "\""));
    }
    f->collective = std::string(value);
  } else if (flag == "--json") {
    if (value.empty()) return absl::InvalidArgumentError("--json wants a path");
    f->json = std::string(value);
  }
  return absl::OkStatus();
}

// nccl-tests' syntax: "-b 8", "-b8", "--minbytes 8", "--minbytes=8".
absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      f.help = true;
      continue;
    }
    std::string name;
    std::string value;
    bool has_value = false;
    if (absl::StartsWith(arg, "--")) {
      const size_t eq = arg.find('=');
      name = std::string(arg.substr(0, eq));
      if (eq != absl::string_view::npos) {
        value = std::string(arg.substr(eq + 1));
        has_value = true;
      }
    } else if (arg.size() >= 2 && arg[0] == '-') {
      name = std::string(arg.substr(0, 2));
      if (arg.size() > 2) {
        value = std::string(arg.substr(2));
        has_value = true;
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument \"", arg, "\""));
    }
    const std::string flag = CanonicalFlag(name);
    if (flag.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag \"", name, "\""));
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag ", name, " wants a value"));
      }
      value = argv[++i];
    }
    absl::Status applied = ApplyFlag(flag, value, &f);
    if (!applied.ok()) return applied;
  }
  absl::Status sweep = CheckSweep(f.min_bytes, f.max_bytes, f.factor);
  if (!sweep.ok()) return sweep;
  return f;
}

// ----------------------------------------------------------------------------
// Data: rank r's input element i is ((r * 7 + i * 3) % 17) - 8, so that every
// rank and index differs; expected results are computed from it locally.

template <typename T>
T Input(int rank, size_t i) {
  return static_cast<T>(
      static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3) % 17) - 8);
}

// Not a possible result of any op on inputs in [-8, 8] (for < 1500 ranks):
// written into output buffers before a checked run, to catch skipped writes.
template <typename T>
T Sentinel() {
  return static_cast<T>(-12345);
}

enum class Op { kSum, kProd, kMin, kMax };

template <typename T>
T Combine(Op op, T a, T b) {
  switch (op) {
    case Op::kSum:
    case Op::kProd:
      if constexpr (std::is_integral_v<T>) {
        // Wraps like the MPI library does, without signed overflow here.
        using U = std::make_unsigned_t<T>;
        const U ua = static_cast<U>(a), ub = static_cast<U>(b);
        return static_cast<T>(op == Op::kSum ? static_cast<U>(ua + ub)
                                             : static_cast<U>(ua * ub));
      } else {
        return op == Op::kSum ? a + b : a * b;
      }
    case Op::kMin:
      return std::min(a, b);
    case Op::kMax:
      return std::max(a, b);
  }
  return a;
}

template <typename T>
bool Matches(T got, T want, int nranks) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    if (got == want) return true;  // Exact, inf included.
    // Sums of small integers are exact; products may round differently when
    // MPI combines in another order.
    const T eps = std::is_same_v<T, float> ? T(1e-6) : T(1e-14);
    return std::fabs(got - want) <= eps * nranks * std::fabs(want);
  }
}

// ----------------------------------------------------------------------------

template <typename T>
class Collective {
 public:
  Collective(const Flags& flags, MPI_Datatype type, Op op, MPI_Op mpi_op,
             int rank, int nranks)
      : name_(flags.collective),
        type_(type),
        op_(op),
        mpi_op_(mpi_op),
        rank_(rank),
        nranks_(nranks) {}

  bool rooted() const { return name_ == "broadcast" || name_ == "reduce"; }
  bool reduces() const {
    return name_ == "all_reduce" || name_ == "reduce_scatter" ||
           name_ == "reduce";
  }
  // MPI_Bcast has a single buffer: it is timed once, as out-of-place.
  bool has_inplace() const { return name_ != "broadcast"; }

  // Elements per call and per rank (per peer for all_to_all) for a sweep size.
  size_t CountFor(size_t bytes) const {
    return blocked() ? bytes / (sizeof(T) * nranks_) : bytes / sizeof(T);
  }
  // The nccl-tests S for that count.
  size_t BytesFor(size_t count) const {
    return count * sizeof(T) * (blocked() ? nranks_ : 1);
  }

  // Sizes the buffers for `count` (see CountFor).
  void Resize(size_t count) {
    count_ = count;
    const size_t whole = count * nranks_;
    size_t send = count, recv = count;
    if (name_ == "all_gather") recv = whole;
    if (name_ == "reduce_scatter") send = recv = whole;  // recv: in-place.
    if (name_ == "all_to_all") send = recv = whole;
    if (name_ == "broadcast") send = 0;
    send_.resize(send);
    recv_.resize(recv);
  }

  // Largest element count any one MPI call is given for `count`.
  size_t MaxCallCount(size_t count) const {
    return name_ == "all_gather" || name_ == "reduce_scatter" ||
                   name_ == "all_to_all"
               ? count * nranks_
               : count;
  }

  // Fresh input; outputs set to Sentinel.
  void Init(bool in_place) {
    for (size_t i = 0; i < send_.size(); ++i) send_[i] = Input<T>(rank_, i);
    std::fill(recv_.begin(), recv_.end(), Sentinel<T>());
    if (name_ == "broadcast") {
      if (rank_ == kRoot) {
        for (size_t i = 0; i < recv_.size(); ++i) recv_[i] = Input<T>(rank_, i);
      }
      return;
    }
    if (!in_place) return;
    if (name_ == "all_gather") {
      std::copy(send_.begin(), send_.end(), recv_.begin() + rank_ * count_);
    } else if (name_ == "reduce" && rank_ != kRoot) {
      // Only the root passes MPI_IN_PLACE; the others keep their send buffer.
    } else {
      std::copy(send_.begin(), send_.end(), recv_.begin());
    }
  }

  void Run(bool in_place) {
    const int n = static_cast<int>(count_);
    const void* send = in_place ? MPI_IN_PLACE : send_.data();
    T* recv = recv_.data();
    if (name_ == "all_reduce") {
      MPI_Allreduce(send, recv, n, type_, mpi_op_, MPI_COMM_WORLD);
    } else if (name_ == "all_gather") {
      MPI_Allgather(send, in_place ? 0 : n, in_place ? MPI_DATATYPE_NULL : type_,
                    recv, n, type_, MPI_COMM_WORLD);
    } else if (name_ == "reduce_scatter") {
      MPI_Reduce_scatter_block(send, recv, n, type_, mpi_op_, MPI_COMM_WORLD);
    } else if (name_ == "broadcast") {
      MPI_Bcast(recv, n, type_, kRoot, MPI_COMM_WORLD);
    } else if (name_ == "reduce") {
      if (rank_ != kRoot) send = send_.data();
      MPI_Reduce(send, rank_ == kRoot ? recv : nullptr, n, type_, mpi_op_,
                 kRoot, MPI_COMM_WORLD);
    } else if (name_ == "all_to_all") {
      MPI_Alltoall(send, in_place ? 0 : n, in_place ? MPI_DATATYPE_NULL : type_,
                   recv, n, type_, MPI_COMM_WORLD);
    }
  }

  // Wrong elements in this rank's output after Init(in_place) + Run(in_place).
  int64_t CountWrong() const {
    int64_t wrong = 0;
    auto expect = [&](size_t at, T want) {
      if (!Matches(recv_[at], want, nranks_)) ++wrong;
    };
    const size_t c = count_;
    if (name_ == "all_reduce" || (name_ == "reduce" && rank_ == kRoot)) {
      for (size_t i = 0; i < c; ++i) expect(i, Reduced(i));
    } else if (name_ == "reduce_scatter") {
      for (size_t i = 0; i < c; ++i) expect(i, Reduced(rank_ * c + i));
    } else if (name_ == "all_gather") {
      for (int p = 0; p < nranks_; ++p) {
        for (size_t i = 0; i < c; ++i) expect(p * c + i, Input<T>(p, i));
      }
    } else if (name_ == "broadcast") {
      for (size_t i = 0; i < c; ++i) expect(i, Input<T>(kRoot, i));
    } else if (name_ == "all_to_all") {
      for (int p = 0; p < nranks_; ++p) {
        for (size_t i = 0; i < c; ++i) {
          expect(p * c + i, Input<T>(p, rank_ * c + i));
        }
      }
    }
    return wrong;
  }

 private:
  bool blocked() const {
    return name_ == "all_gather" || name_ == "reduce_scatter" ||
           name_ == "all_to_all";
  }

  // Element i of the reduction over all ranks' inputs, in rank order.
  T Reduced(size_t i) const {
    T acc = Input<T>(0, i);
    for (int r = 1; r < nranks_; ++r) acc = Combine(op_, acc, Input<T>(r, i));
    return acc;
  }

  const std::string name_;
  const MPI_Datatype type_;
  const Op op_;
  const MPI_Op mpi_op_;
  const int rank_;
  const int nranks_;
  size_t count_ = 0;
  std::vector<T> send_;
  std::vector<T> recv_;
};

// Times `coll` in one mode at its current size: microseconds per op, the
// largest over ranks.
template <typename T>
double TimeUs(Collective<T>& coll, bool in_place, const Flags& flags) {
  coll.Init(in_place);
  for (int i = 0; i < flags.warmup; ++i) coll.Run(in_place);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < flags.iters; ++i) coll.Run(in_place);
  double per_op = (MPI_Wtime() - start) / flags.iters;
  double slowest = 0;
  MPI_Allreduce(&per_op, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest * 1e6;
}

// Wrong elements over all ranks after one fresh run; -1 when not checking.
template <typename T>
int64_t CheckAll(Collective<T>& coll, bool in_place, const Flags& flags) {
  if (!flags.check) return -1;
  coll.Init(in_place);
  coll.Run(in_place);
  int64_t mine = coll.CountWrong();
  int64_t all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return all;
}

std::string LibraryVersion() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string first_line(version, static_cast<size_t>(std::max(length, 0)));
  first_line = first_line.substr(0, first_line.find('\n'));
  while (!first_line.empty() && (first_line.back() == '\0' ||
                                 first_line.back() == ' ' ||
                                 first_line.back() == '\r')) {
    first_line.pop_back();
  }
  return first_line;
}

// Returns the process exit status.
template <typename T>
int RunSweep(const Flags& flags, MPI_Datatype type, const char* type_name,
             int rank, int nranks) {
  Op op = Op::kSum;
  MPI_Op mpi_op = MPI_SUM;
  if (flags.op == "prod") {
    op = Op::kProd;
    mpi_op = MPI_PROD;
  } else if (flags.op == "min") {
    op = Op::kMin;
    mpi_op = MPI_MIN;
  } else if (flags.op == "max") {
    op = Op::kMax;
    mpi_op = MPI_MAX;
  }
  Collective<T> coll(flags, type, op, mpi_op, rank, nranks);

  const std::vector<size_t> sizes =
      SizeSweep(flags.min_bytes, flags.max_bytes, flags.factor);
  if (coll.MaxCallCount(coll.CountFor(sizes.back())) > INT_MAX) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "mpi_collectives: maximum size %zu B is too large: an MPI "
                   "call would take more than INT_MAX elements\n",
                   sizes.back());
    }
    return 2;
  }

  Reporter::Options opts;
  opts.collective = flags.collective;
  opts.nranks = nranks;
  opts.peer = "openmpi";
  opts.comments.push_back(absl::StrCat("relay bench/peers/mpi_collectives: ",
                                       flags.collective, " over MPI, ", nranks,
                                       " ranks"));
  opts.comments.push_back(LibraryVersion());
  for (const char* var : {"OMPI_MCA_coll_tuned_use_dynamic_rules",
                          "OMPI_MCA_coll_tuned_allreduce_algorithm"}) {
    if (const char* value = std::getenv(var)) {
      opts.comments.push_back(absl::StrCat(var, "=", value));
    }
  }
  opts.comments.push_back(absl::StrCat(
      "minBytes ", flags.min_bytes, " maxBytes ", flags.max_bytes, " step: ",
      flags.factor, "(factor) warmup iters: ", flags.warmup,
      " iters: ", flags.iters, " validation: ", flags.check ? 1 : 0,
      " dtype: ", flags.dtype, " op: ", flags.op));
  if (!coll.has_inplace()) {
    opts.comments.push_back(
        "MPI_Bcast has one buffer: timed as out-of-place; in-place is N/A");
  }
  Reporter reporter(opts);
  if (rank == 0) reporter.PrintHeader(stdout);

  // As nccl-tests does before its sweep: warm up at the largest size and at
  // the smallest, so the first rows do not pay for connection setup and first
  // touches. Each size then has its own warm-up too (TimeUs).
  for (size_t bytes : {sizes.back(), sizes.front()}) {
    coll.Resize(coll.CountFor(bytes));
    coll.Init(/*in_place=*/false);
    for (int i = 0; i < flags.warmup; ++i) coll.Run(/*in_place=*/false);
  }

  for (size_t bytes : sizes) {
    const size_t count = coll.CountFor(bytes);
    coll.Resize(count);
    Row row;
    row.bytes = coll.BytesFor(count);
    row.count = row.bytes / sizeof(T);
    row.type = type_name;
    row.redop = coll.reduces() ? flags.op : "none";
    row.root = coll.rooted() ? kRoot : -1;
    row.oop_time_us = TimeUs(coll, /*in_place=*/false, flags);
    row.oop_wrong = CheckAll(coll, /*in_place=*/false, flags);
    row.has_inplace = coll.has_inplace();
    if (row.has_inplace) {
      row.ip_time_us = TimeUs(coll, /*in_place=*/true, flags);
      row.ip_wrong = CheckAll(coll, /*in_place=*/true, flags);
    }
    if (rank == 0) {
      reporter.PrintRow(stdout, row);
    } else {
      reporter.AddRow(row);
    }
  }

  int status = reporter.TotalWrong() == 0 ? 0 : 1;
  if (rank == 0) {
    reporter.PrintFooter(stdout);
    if (!flags.json.empty()) {
      absl::Status written = reporter.WriteJson(flags.json);
      if (!written.ok()) {
        std::fprintf(stderr, "mpi_collectives: %s\n",
                     std::string(written.message()).c_str());
        status = 1;
      }
    }
  }
  return status;
}

int Main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  int status = 0;
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    if (rank == 0) {
      std::fprintf(stderr, "mpi_collectives: %s (see --help)\n",
                   std::string(flags.status().message()).c_str());
    }
    status = 2;
  } else if (flags->help) {
    if (rank == 0) std::fputs(kUsage, stdout);
  } else if (flags->dtype == "float64") {
    status = RunSweep<double>(*flags, MPI_DOUBLE, "double", rank, nranks);
  } else if (flags->dtype == "int32") {
    status = RunSweep<int32_t>(*flags, MPI_INT32_T, "int32", rank, nranks);
  } else {
    status = RunSweep<float>(*flags, MPI_FLOAT, "float", rank, nranks);
  }
  // Every rank parsed the same flags and checked the same totals, so every
  // rank ends with the same status.
  MPI_Finalize();
  return status;
}

}  // namespace
}  // namespace bench
}  // namespace relay

int main(int argc, char** argv) { return relay::bench::Main(argc, argv); }
