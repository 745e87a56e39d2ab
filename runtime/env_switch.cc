#include "runtime/env_switch.h"

#include <cstdlib>

#include "absl/status/status.h"
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

}  // namespace relay
