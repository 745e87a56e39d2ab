// File: bench/flags.h
//
// FlagParser: the command-line loop the benchmark programs share (relay's
// drivers and the peer harnesses in bench/peers), so that every one accepts
// the same forms and fails the same way:
//   * every flag takes one value: "-b 8", "--ranks 4" or "--ranks=4";
//   * -h or --help prints the program's usage and exits 0;
//   * a bad or unknown flag prints "PROGRAM: what is wrong (see --help)" on
//     stderr and exits 2, before anything runs.
//
// Example:
//   FlagParser p("pingpong", kUsage, argc, argv);
//   while (p.Next()) {
//     if (p.name() == "-n") f.iters = p.Int(1);
//     else if (p.name() == "-b") f.min_bytes = p.Size();
//     else p.Unknown();
//   }
#ifndef RELAY_BENCH_FLAGS_H_
#define RELAY_BENCH_FLAGS_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace relay {
namespace bench {

class FlagParser {
 public:
  FlagParser(const char* program, const char* usage, int argc, char** argv);

  // Moves to the next flag and its value; false when none is left.
  bool Next();
  const std::string& name() const { return name_; }
  const std::string& value() const { return value_; }

  // The value as an integer >= lo.
  int Int(int lo);
  // The value as a number.
  double Number();
  // The value as a byte count with an optional K, M or G suffix
  // (report.h's ParseSize).
  size_t Size();
  // The value, if it is one of `choices`.
  const std::string& OneOf(std::initializer_list<const char*> choices);
  // What one of relay's own parsers made of the value (ParseDataType, ...).
  template <typename T>
  T Or2(const absl::StatusOr<T>& parsed) {
    if (!parsed.ok()) Fail(absl::StrCat(name_, ": ", parsed.status().message()));
    return *parsed;
  }

  // Exits 2 with "PROGRAM: why (see --help)".
  [[noreturn]] void Fail(const std::string& why) const;
  // Exits 2 naming the current flag as unknown.
  [[noreturn]] void Unknown() const;

 private:
  const char* program_;
  const char* usage_;
  int argc_;
  char** argv_;
  int next_ = 1;
  std::string name_, value_;
};

// The nccl-tests sweep flags every driver takes: -b and -e (sizes), -f
// (factor), -n and -w (timed and warm-up iterations). If the current flag
// is one of them, stores it in `f` (which has members min_bytes,
// max_bytes, factor, iters and warmup) and returns true.
template <typename FlagsT>
bool SweepFlag(FlagParser& p, FlagsT& f) {
  const std::string& n = p.name();
  if (n == "-b") {
    f.min_bytes = p.Size();
  } else if (n == "-e") {
    f.max_bytes = p.Size();
  } else if (n == "-f") {
    f.factor = p.Number();
  } else if (n == "-n") {
    f.iters = p.Int(1);
  } else if (n == "-w") {
    f.warmup = p.Int(0);
  } else {
    return false;
  }
  return true;
}

}  // namespace bench
}  // namespace relay

#endif  // RELAY_BENCH_FLAGS_H_
