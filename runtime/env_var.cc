#include "runtime/env_var.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace relay {

absl::StatusOr<bool> ReadEnvSwitch(const char* name, bool default_value,
                                   absl::string_view what) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return default_value;
  const absl::string_view v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat(
      name, "='", v, "' is neither 1 (", what, " on) nor 0 (off); unset, it is ",
      default_value ? "on" : "off"));
}

absl::StatusOr<uint64_t> ReadEnvCount(const char* name, uint64_t default_value,
                                      uint64_t min, uint64_t max,
                                      absl::string_view what) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return default_value;
  const absl::string_view v(value);
  // Digits only: SimpleAtoi alone takes a sign and surrounding spaces.
  bool digits = true;
  for (char c : v) digits &= absl::ascii_isdigit(static_cast<unsigned char>(c));
  uint64_t parsed = 0;
  if (!digits || !absl::SimpleAtoi(v, &parsed) || parsed < min ||
      parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", v, "' is not a whole number from ", min,
                     " to ", max, " (", what, ")"));
  }
  return parsed;
}

}  // namespace relay
