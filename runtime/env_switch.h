// File: runtime/env_switch.h
//
// One reading of relay's on/off environment variables
// (RELAY_RING_BIDIRECTIONAL, RELAY_UCX_PROGRESS_THREAD,
// RELAY_NCCL_RING_EDGES): unset or empty means the default, "1" on and "0"
// off. Anything else is InvalidArgument naming the variable, the value and
// what the switch does, so a typo ("yes", "true", "on") fails the call that
// reads it instead of silently leaving the default in place.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(
//       const bool thread,
//       ReadEnvSwitch("RELAY_UCX_PROGRESS_THREAD", /*default_value=*/true,
//                     "the UCX progress thread"));
#ifndef RELAY_RUNTIME_ENV_SWITCH_H_
#define RELAY_RUNTIME_ENV_SWITCH_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relay {

// `name`'s value as a switch, or `default_value` where it is unset or
// empty. `what` says what the switch turns on, for the error message.
absl::StatusOr<bool> ReadEnvSwitch(const char* name, bool default_value,
                                   absl::string_view what);

}  // namespace relay

#endif  // RELAY_RUNTIME_ENV_SWITCH_H_
