// File: runtime/env_var.h
//
// One reading of relay's environment variables that switch something on or
// off (RELAY_RING_BIDIRECTIONAL, RELAY_UCX_PROGRESS_THREAD,
// RELAY_NCCL_RING_EDGES) or give a count (RELAY_SEGMENT_BYTES,
// RELAY_PIPELINE_DEPTH, RELAY_STREAM_REDUCE_BLOCKS, RELAY_NCCL_P2P_CHANNELS,
// RELAY_NCCL_RING_EDGE_BYTES). Unset or empty means the default. A value
// that does not parse is InvalidArgument naming the variable, the value and
// what it sets, so a typo ("yes", "64k") fails the call that reads it
// instead of silently leaving the default in place.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(
//       const bool thread,
//       ReadEnvSwitch("RELAY_UCX_PROGRESS_THREAD", /*default_value=*/true,
//                     "the UCX progress thread"));
//   RELAY_ASSIGN_OR_RETURN(
//       const uint64_t channels,
//       ReadEnvCount("RELAY_NCCL_P2P_CHANNELS", 64, 0, 1024,
//                    "point-to-point channels"));
#ifndef RELAY_RUNTIME_ENV_VAR_H_
#define RELAY_RUNTIME_ENV_VAR_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relay {

// `name` as a switch: "1" on, "0" off, `default_value` where it is unset or
// empty. `what` says what the switch turns on, for the error message.
absl::StatusOr<bool> ReadEnvSwitch(const char* name, bool default_value,
                                   absl::string_view what);

// `name` as a whole number from `min` to `max` (decimal digits only), or
// `default_value` where it is unset or empty (which need not be in range:
// 0 can mean "not set"). `what` says what it counts.
absl::StatusOr<uint64_t> ReadEnvCount(const char* name, uint64_t default_value,
                                      uint64_t min, uint64_t max,
                                      absl::string_view what);

}  // namespace relay

#endif  // RELAY_RUNTIME_ENV_VAR_H_
