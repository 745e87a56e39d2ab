// File: runtime/config.h
//
// relay's configuration table: every RELAY_* environment variable relay
// reads, declared once in Settings() (name, kind, default, range, one-line
// description), and the one place library code reads the environment. A
// setting is read through ReadSwitch, ReadCount, ReadSeconds, ReadChoice or
// ReadText, which refuse a name the table lacks; another program's variable
// (a launcher's RANK, UCX's UCX_TLS) through GetEnv. docs/configuration.md
// is generated from the table (`bazel run //tools:configuration_doc`), and
// //tools:configuration_doc_test fails when the two disagree.
//
// Unset or empty means the default. A value that does not parse, or is out
// of the setting's range, is InvalidArgument naming the variable, the value
// and what it sets, so a typo ("yes", "64k") fails the call that reads it
// instead of silently leaving the default in place.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(const bool thread,
//                          ReadSwitch("RELAY_UCX_PROGRESS_THREAD", true));
//   RELAY_ASSIGN_OR_RETURN(const uint64_t channels,
//                          ReadCount("RELAY_NCCL_P2P_CHANNELS", 64));
#ifndef RELAY_RUNTIME_CONFIG_H_
#define RELAY_RUNTIME_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace relay {

enum class SettingKind : uint8_t {
  kSwitch,   // 1 on, 0 off.
  kCount,    // A whole number in [min, max] (digits only).
  kSeconds,  // A number of seconds in [min, max], fractions allowed.
  kChoice,   // One of `choices`, separated by '|'.
  kText,     // Any text (an address, a path, a token, a spec).
};

struct Setting {
  const char* name;
  SettingKind kind;
  const char* default_text;  // As documented: "1", "600", "unset".
  double min = 0;            // kCount and kSeconds.
  double max = 0;
  const char* choices = "";  // kChoice.
  const char* group = "";    // The section of docs/configuration.md.
  const char* description = "";
};

// Every setting, in the order docs/configuration.md lists them.
absl::Span<const Setting> Settings();
// The table's entry for `name`, or null.
const Setting* FindSetting(absl::string_view name);

// The setting `name` read as its kind; `default_value` where it is unset or
// empty. Internal for a name the table lacks or of another kind.
absl::StatusOr<bool> ReadSwitch(const char* name, bool default_value);
absl::StatusOr<uint64_t> ReadCount(const char* name, uint64_t default_value);
absl::StatusOr<absl::Duration> ReadSeconds(const char* name,
                                           absl::Duration default_value);
absl::StatusOr<std::string> ReadChoice(const char* name,
                                       absl::string_view default_value);
// A kText setting as set (empty included), or nullopt where unset.
absl::StatusOr<std::optional<std::string>> ReadText(const char* name);

// Any environment variable, for the variables of other programs relay
// honours (launchers', UCX's, XDG_RUNTIME_DIR); nullopt where unset.
std::optional<std::string> GetEnv(const char* name);

// docs/configuration.md, generated from Settings().
std::string ConfigurationMarkdown();

}  // namespace relay

#endif  // RELAY_RUNTIME_CONFIG_H_
