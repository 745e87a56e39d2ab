// File: bench/report.h
//
// Benchmark reporting in the nccl-tests format, shared by relay's benchmark
// driver and by the peer harnesses in bench/peers (MPI, ...), so that their
// outputs can be laid side by side and diffed:
//   * BusBwFactor: nccl-tests' bus-bandwidth correction per collective;
//   * Row / Reporter: the nccl-tests table (header, one line per size, footer
//     with "Out of bounds values" and "Avg bus bandwidth") and a JSON document
//     of the same rows;
//   * SizeSweep / CheckSweep / ParseSize: the -b/-e/-f size sweep.
//
// What "size" means (the nccl-tests S, the "size (B)" column; pass it as
// Row::bytes):
//   * all_gather, reduce_scatter, all_to_all, gather, scatter: S is the whole
//     array, count * nranks * element size, where count is the per-rank
//     (all_gather, reduce_scatter, gather, scatter) or per-peer (all_to_all)
//     element count: the all_gather output, the reduce_scatter input, the
//     all_to_all send buffer of one rank, the gather/scatter buffer at root;
//   * all_reduce, broadcast, reduce, sendrecv: S = count * element size, the
//     buffer of one rank;
//   * barrier: 0.
// Row::count is S / element size, as nccl-tests prints it.
//
// Bandwidths: algbw = S / time (GB/s, 1 GB = 1e9 B); busbw = algbw *
// BusBwFactor(collective, nranks).
//
// Example:
//   Reporter::Options opts;
//   opts.collective = "all_reduce";
//   opts.nranks = 4;
//   opts.peer = "openmpi";
//   Reporter rep(opts);
//   rep.PrintHeader(stdout);
//   for (size_t bytes : SizeSweep(8, 64 << 20, 8)) {
//     Row row;
//     row.bytes = bytes;
//     row.count = bytes / sizeof(float);
//     row.type = "float";
//     row.redop = "sum";
//     row.oop_time_us = TimeOutOfPlace(bytes);
//     row.oop_wrong = 0;
//     row.has_inplace = false;
//     rep.PrintRow(stdout, row);
//   }
//   rep.PrintFooter(stdout);
//   absl::Status written = rep.WriteJson("all_reduce.json");
#ifndef RELAY_BENCH_REPORT_H_
#define RELAY_BENCH_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relay {
namespace bench {

// The collective names every harness uses, in nccl-tests order:
// all_reduce, all_gather, reduce_scatter, broadcast, reduce, gather, scatter,
// all_to_all, barrier, sendrecv.
const std::vector<std::string>& CollectiveNames();
bool IsKnownCollective(absl::string_view name);

// nccl-tests' busbw = algbw * factor:
//   all_reduce                                            2(n-1)/n
//   all_gather, reduce_scatter, all_to_all, gather, scatter  (n-1)/n
//   broadcast, reduce, sendrecv                           1
//   barrier                                               0
// An unknown name, or nranks < 1, gives 0.
double BusBwFactor(absl::string_view collective, int nranks);

// S bytes in time_us microseconds, in GB/s (1e9 B/s); 0 when time_us <= 0.
double AlgBw(size_t bytes, double time_us);

// One size of a sweep. A wrong count of -1 means "not checked" (printed N/A).
struct Row {
  size_t bytes = 0;     // S, see the top of this file.
  size_t count = 0;     // S / element size.
  std::string type;     // nccl-tests names: "float", "double", "int32", ...
  std::string redop;    // "sum", "prod", "min", "max", or "none".
  int root = -1;        // -1 for collectives without a root.
  double oop_time_us = 0;
  int64_t oop_wrong = -1;
  bool has_inplace = true;  // false: the in-place columns print N/A.
  double ip_time_us = 0;
  int64_t ip_wrong = -1;
  // Host time to issue one call, where calls are queued and waited for once
  // (device transports, raw NCCL): what the issuing thread spends per call,
  // whether or not the GPU keeps it waiting. JSON only ("issue_us"); < 0:
  // not measured.
  double oop_issue_us = -1;
  double ip_issue_us = -1;
};

class Reporter {
 public:
  struct Options {
    std::string collective;  // One of CollectiveNames().
    int nranks = 1;
    // What ran: relay's transport ("loopback", ...) or a peer library
    // ("openmpi"). Each goes to the JSON document when non-empty.
    std::string transport;
    std::string peer;
    // Free text printed as "# <line>" above the column headers, and kept in
    // the JSON document as "comments".
    std::vector<std::string> comments;
  };

  explicit Reporter(Options options);

  const Options& options() const { return options_; }
  double bus_factor() const { return bus_factor_; }
  const std::vector<Row>& rows() const { return rows_; }

  // The comment lines, a "#" line, then the three nccl-tests header lines.
  void PrintHeader(FILE* out) const;
  // Prints FormatRow(row) and a newline, and records the row for the footer
  // and the JSON document.
  void PrintRow(FILE* out, const Row& row);
  // Records a row without printing it.
  void AddRow(const Row& row) { rows_.push_back(row); }
  // "# Out of bounds values : N OK|FAILED" (N: the wrong counts summed over
  // all recorded rows, in- and out-of-place) and "# Avg bus bandwidth    : X"
  // (the mean busbw over every out-of-place and in-place result recorded).
  void PrintFooter(FILE* out) const;

  // One table line, no newline, laid out like nccl-tests' rows:
  //   "%12zu  %12zu  %8s  %6s  %6d" then, out-of-place and then in-place,
  //   "  %7s  %6.2f  %6.2f  %5s" (time, algbw, busbw, #wrong). The time is
  //   printed "%7.2f" under 100 us, "%7.1f" under 10 ms, "%7.0f" above, as
  //   nccl-tests does, so that the column keeps its width.
  std::string FormatRow(const Row& row) const;

  int64_t TotalWrong() const;   // Sum of the wrong counts that were checked.
  double AvgBusBw() const;      // 0 when no rows.

  // {"collective": ..., "nranks": ..., "transport"/"peer": ...,
  //  "bus_factor": ..., "comments": [...], "rows": [{"size": ..., "count": ...,
  //  "type": ..., "redop": ..., "root": ..., "out_of_place": {"time_us": ...,
  //  "algbw": ..., "busbw": ..., "wrong": N or null}, "in_place": {...} or
  //  null}], "out_of_bounds": ..., "avg_busbw": ...}
  std::string ToJson() const;
  absl::Status WriteJson(const std::string& path) const;

 private:
  Options options_;
  double bus_factor_;
  std::vector<Row> rows_;
};

// `s` as a JSON string literal, quotes included: ", \ and control characters
// are escaped; other bytes (UTF-8 included) are copied as they are.
std::string JsonQuote(absl::string_view s);

// The nccl-tests -b/-e/-f sweep: min_bytes, then each size times `factor`
// (rounded down, and at least one byte more than the last) while it stays
// <= max_bytes. max_bytes itself is in the sweep only when a step lands on it
// (-b 8 -e 64M -f 8 ends at 16M, as with nccl-tests). Always returns at least
// {min_bytes}: when max_bytes <= min_bytes, or when the arguments are invalid
// (see CheckSweep), the sweep is {min_bytes} alone.
std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes,
                              double factor);

// InvalidArgument unless min_bytes <= max_bytes and, when min_bytes <
// max_bytes, factor > 1 (and finite).
absl::Status CheckSweep(size_t min_bytes, size_t max_bytes, double factor);

// The median of `values` (the mean of the middle two for an even count;
// 0 for none): what the GPU benchmarks quote over their rounds.
double Median(std::vector<double> values);

// A byte count as nccl-tests' flags take it: digits, then optionally one of
// K, M, G (powers of 1024, either case), then optionally B:
// "8", "1K", "64M", "1G", "1KB", "2mb". Anything else (empty, signs, spaces,
// fractions, other suffixes, overflow) is InvalidArgument.
absl::StatusOr<size_t> ParseSize(absl::string_view text);

}  // namespace bench
}  // namespace relay

#endif  // RELAY_BENCH_REPORT_H_
