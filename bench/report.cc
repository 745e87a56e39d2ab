#include "bench/report.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace relay {
namespace bench {
namespace {

// printf into a std::string.
std::string Printf(const char* format, ...)
    __attribute__((format(printf, 1, 2)));

std::string Printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out;
  if (n > 0) {
    out.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(&out[0], out.size(), format, args);
    out.resize(static_cast<size_t>(n));
  }
  va_end(args);
  return out;
}

// nccl-tests keeps the time column 7 wide by dropping decimals as it grows.
std::string FormatTime(double us) {
  if (us >= 10000.0) return Printf("%7.0f", us);
  if (us >= 100.0) return Printf("%7.1f", us);
  return Printf("%7.2f", us);
}

std::string FormatWrong(int64_t wrong) {
  if (wrong < 0) return "N/A";
  return Printf("%" PRId64, wrong);
}

// A JSON number; JSON has no inf or nan, so those become null.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return Printf("%.6g", v);
}

std::string JsonWrong(int64_t wrong) {
  if (wrong < 0) return "null";
  return Printf("%" PRId64, wrong);
}

}  // namespace

const std::vector<std::string>& CollectiveNames() {
  static const auto* names = new std::vector<std::string>{
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
      "gather",     "scatter",    "all_to_all",     "barrier",   "sendrecv"};
  return *names;
}

bool IsKnownCollective(absl::string_view name) {
  for (const std::string& known : CollectiveNames()) {
    if (name == known) return true;
  }
  return false;
}

double BusBwFactor(absl::string_view collective, int nranks) {
  if (nranks < 1) return 0.0;
  const double n = nranks;
  if (collective == "all_reduce") return 2.0 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter" ||
      collective == "all_to_all" || collective == "gather" ||
      collective == "scatter") {
    return (n - 1) / n;
  }
  if (collective == "broadcast" || collective == "reduce" ||
      collective == "sendrecv") {
    return 1.0;
  }
  return 0.0;  // barrier, or unknown.
}

double AlgBw(size_t bytes, double time_us) {
  if (!(time_us > 0)) return 0.0;
  // bytes / (time_us * 1e-6 s) / 1e9 B/GB.
  return static_cast<double>(bytes) / time_us / 1e3;
}

Reporter::Reporter(Options options)
    : options_(std::move(options)),
      bus_factor_(BusBwFactor(options_.collective, options_.nranks)) {}

void Reporter::PrintHeader(FILE* out) const {
  for (const std::string& line : options_.comments) {
    std::fprintf(out, "# %s\n", line.c_str());
  }
  std::fprintf(out, "#\n");
  std::fprintf(out,
               "# %10s  %12s  %8s  %6s  %6s           out-of-place       "
               "                in-place          \n",
               "", "", "", "", "");
  std::fprintf(out,
               "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s "
               "%6s\n",
               "size", "count", "type", "redop", "root", "time", "algbw",
               "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(out,
               "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  "
               "%6s  %5s\n",
               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
               "(us)", "(GB/s)", "(GB/s)", "");
}

std::string Reporter::FormatRow(const Row& row) const {
  std::string line = Printf("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                            row.type.c_str(), row.redop.c_str(), row.root);
  const double oop_algbw = AlgBw(row.bytes, row.oop_time_us);
  absl::StrAppend(&line, Printf("  %7s  %6.2f  %6.2f  %5s",
                                FormatTime(row.oop_time_us).c_str(), oop_algbw,
                                oop_algbw * bus_factor_,
                                FormatWrong(row.oop_wrong).c_str()));
  if (row.has_inplace) {
    const double ip_algbw = AlgBw(row.bytes, row.ip_time_us);
    absl::StrAppend(&line, Printf("  %7s  %6.2f  %6.2f  %5s",
                                  FormatTime(row.ip_time_us).c_str(), ip_algbw,
                                  ip_algbw * bus_factor_,
                                  FormatWrong(row.ip_wrong).c_str()));
  } else {
    absl::StrAppend(&line, Printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A",
                                  "N/A"));
  }
  return line;
}

void Reporter::PrintRow(FILE* out, const Row& row) {
  std::fprintf(out, "%s\n", FormatRow(row).c_str());
  std::fflush(out);
  AddRow(row);
}

int64_t Reporter::TotalWrong() const {
  int64_t total = 0;
  for (const Row& row : rows_) {
    if (row.oop_wrong > 0) total += row.oop_wrong;
    if (row.has_inplace && row.ip_wrong > 0) total += row.ip_wrong;
  }
  return total;
}

double Reporter::AvgBusBw() const {
  double sum = 0;
  int n = 0;
  for (const Row& row : rows_) {
    sum += AlgBw(row.bytes, row.oop_time_us) * bus_factor_;
    ++n;
    if (row.has_inplace) {
      sum += AlgBw(row.bytes, row.ip_time_us) * bus_factor_;
      ++n;
    }
  }
  return n == 0 ? 0.0 : sum / n;
}

void Reporter::PrintFooter(FILE* out) const {
  const int64_t wrong = TotalWrong();
  std::fprintf(out, "# Out of bounds values : %" PRId64 " %s\n", wrong,
               wrong == 0 ? "OK" : "FAILED");
  std::fprintf(out, "# Avg bus bandwidth    : %g \n", AvgBusBw());
  std::fprintf(out, "#\n");
  std::fflush(out);
}

std::string Reporter::ToJson() const {
  std::string json = "{\n";
  absl::StrAppend(&json, "  \"collective\": ", JsonQuote(options_.collective),
                  ",\n  \"nranks\": ", options_.nranks, ",\n");
  if (!options_.transport.empty()) {
    absl::StrAppend(&json, "  \"transport\": ", JsonQuote(options_.transport),
                    ",\n");
  }
  if (!options_.peer.empty()) {
    absl::StrAppend(&json, "  \"peer\": ", JsonQuote(options_.peer), ",\n");
  }
  absl::StrAppend(&json, "  \"bus_factor\": ", JsonNumber(bus_factor_),
                  ",\n  \"comments\": [");
  for (size_t i = 0; i < options_.comments.size(); ++i) {
    absl::StrAppend(&json, i == 0 ? "" : ", ",
                    JsonQuote(options_.comments[i]));
  }
  absl::StrAppend(&json, "],\n  \"rows\": [");
  auto result = [this](size_t bytes, double time_us, int64_t wrong,
                        double issue_us) {
    const double algbw = AlgBw(bytes, time_us);
    return absl::StrCat("{\"time_us\": ", JsonNumber(time_us),
                        ", \"algbw\": ", JsonNumber(algbw),
                        ", \"busbw\": ", JsonNumber(algbw * bus_factor_),
                        ", \"wrong\": ", JsonWrong(wrong),
                        issue_us >= 0
                            ? absl::StrCat(", \"issue_us\": ",
                                           JsonNumber(issue_us))
                            : std::string(),
                        "}");
  };
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& row = rows_[i];
    absl::StrAppend(
        &json, i == 0 ? "\n" : ",\n", "    {\"size\": ", row.bytes,
        ", \"count\": ", row.count, ", \"type\": ", JsonQuote(row.type),
        ", \"redop\": ", JsonQuote(row.redop), ", \"root\": ", row.root,
        ",\n     \"out_of_place\": ",
        result(row.bytes, row.oop_time_us, row.oop_wrong, row.oop_issue_us),
        ",\n     \"in_place\": ",
        row.has_inplace ? result(row.bytes, row.ip_time_us, row.ip_wrong,
                                 row.ip_issue_us)
                        : std::string("null"),
        "}");
  }
  absl::StrAppend(&json, rows_.empty() ? "" : "\n  ",
                  "],\n  \"out_of_bounds\": ", TotalWrong(),
                  ",\n  \"avg_busbw\": ", JsonNumber(AvgBusBw()), "\n}\n");
  return json;
}

absl::Status Reporter::WriteJson(const std::string& path) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  const std::string json = ToJson();
  const bool wrote = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

std::string JsonQuote(absl::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += Printf("\\u%04x", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

absl::Status CheckSweep(size_t min_bytes, size_t max_bytes, double factor) {
  if (min_bytes > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("minimum size ", min_bytes,
                     " is larger than the maximum size ", max_bytes));
  }
  if (min_bytes < max_bytes && !(factor > 1 && std::isfinite(factor))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step factor must be a finite number > 1 when the minimum size (",
        min_bytes, ") is below the maximum (", max_bytes, "); got ", factor));
  }
  return absl::OkStatus();
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<size_t> SizeSweep(size_t min_bytes, size_t max_bytes,
                              double factor) {
  std::vector<size_t> sizes = {min_bytes};
  if (min_bytes >= max_bytes || !CheckSweep(min_bytes, max_bytes, factor).ok()) {
    return sizes;
  }
  size_t current = min_bytes;
  while (current < max_bytes) {
    const long double scaled = static_cast<long double>(current) * factor;
    if (scaled > static_cast<long double>(max_bytes)) break;
    size_t next = static_cast<size_t>(scaled);
    if (next <= current) next = current + 1;
    if (next > max_bytes) break;
    sizes.push_back(next);
    current = next;
  }
  return sizes;
}

absl::StatusOr<size_t> ParseSize(absl::string_view text) {
  auto invalid = [text](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid size \"", absl::CEscape(text), "\": ", why,
        " (expected digits with an optional K, M or G suffix, e.g. 8, 1K, "
        "64M, 1G, 1KB)"));
  };
  size_t i = 0;
  size_t value = 0;
  constexpr size_t kMax = std::numeric_limits<size_t>::max();
  while (i < text.size() && absl::ascii_isdigit(text[i])) {
    const size_t digit = static_cast<size_t>(text[i] - '0');
    if (value > (kMax - digit) / 10) return invalid("too large");
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return invalid("no digits");
  int shift = 0;
  if (i < text.size()) {
    switch (absl::ascii_toupper(text[i])) {
      case 'K':
        shift = 10;
        ++i;
        break;
      case 'M':
        shift = 20;
        ++i;
        break;
      case 'G':
        shift = 30;
        ++i;
        break;
      default:
        break;
    }
  }
  if (i < text.size() && absl::ascii_toupper(text[i]) == 'B') ++i;
  if (i != text.size()) return invalid("unexpected characters after the number");
  if (shift > 0 && value > (kMax >> shift)) return invalid("too large");
  return value << shift;
}

}  // namespace bench
}  // namespace relay
