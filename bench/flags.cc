#include "bench/flags.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "bench/report.h"

namespace relay {
namespace bench {

FlagParser::FlagParser(const char* program, const char* usage, int argc,
                       char** argv)
    : program_(program), usage_(usage), argc_(argc), argv_(argv) {}

bool FlagParser::Next() {
  if (next_ >= argc_) return false;
  const absl::string_view arg = argv_[next_++];
  if (arg == "-h" || arg == "--help") {
    std::fputs(usage_, stdout);
    std::exit(0);
  }
  if (arg.size() < 2 || arg[0] != '-') {
    name_ = std::string(arg);
    Fail(absl::StrCat("unexpected argument '", arg, "'"));
  }
  const size_t eq = arg.find('=');
  if (arg.substr(0, 2) == "--" && eq != absl::string_view::npos) {
    name_ = std::string(arg.substr(0, eq));
    value_ = std::string(arg.substr(eq + 1));
    return true;
  }
  name_ = std::string(arg);
  if (next_ >= argc_) Fail(absl::StrCat(name_, " wants a value"));
  value_ = argv_[next_++];
  return true;
}

int FlagParser::Int(int lo) {
  int out = 0;
  if (!absl::SimpleAtoi(value_, &out) || out < lo) {
    Fail(absl::StrCat(name_, " wants an integer >= ", lo, ", got '", value_, "'"));
  }
  return out;
}

double FlagParser::Number() {
  double out = 0;
  if (!absl::SimpleAtod(value_, &out)) {
    Fail(absl::StrCat(name_, " wants a number, got '", value_, "'"));
  }
  return out;
}

size_t FlagParser::Size() { return Or2(ParseSize(value_)); }

const std::string& FlagParser::OneOf(std::initializer_list<const char*> choices) {
  for (const char* c : choices) {
    if (value_ == c) return value_;
  }
  Fail(absl::StrCat(name_, " wants one of ", absl::StrJoin(choices, ", "),
                    ", got '", value_, "'"));
}

void FlagParser::Fail(const std::string& why) const {
  std::fprintf(stderr, "%s: %s (see --help)\n", program_, why.c_str());
  std::exit(2);
}

void FlagParser::Unknown() const { Fail(absl::StrCat("unknown flag ", name_)); }

}  // namespace bench
}  // namespace relay
