// File: testing/fuzz/launch_environment_fuzzer.cc
//
// Fuzzes ReadLaunchEnvironment (runtime/bootstrap/environment.h), which
// parses what launchers (relayrun, torchrun, mpirun, srun) put in the
// environment. The input is NAME=VALUE lines. Properties: refusals are
// InvalidArgument; an accepted environment is self-consistent (a rank
// inside the world, a local rank inside the local world, a TCP port).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "runtime/bootstrap/environment.h"
#include "testing/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string, std::less<>> variables;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    variables[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  const relay::EnvironmentLookup lookup =
      [&](absl::string_view name) -> std::optional<std::string> {
    auto it = variables.find(name);
    if (it == variables.end()) return std::nullopt;
    return it->second;
  };
  const bool launched = relay::HasLaunchEnvironment(lookup);
  absl::StatusOr<relay::LaunchEnvironment> env =
      relay::ReadLaunchEnvironment(lookup);
  if (!env.ok()) {
    RELAY_FUZZ_CHECK(absl::IsInvalidArgument(env.status()));
    return 0;
  }
  RELAY_FUZZ_CHECK(env->size >= 1);
  RELAY_FUZZ_CHECK(env->rank >= 0 && env->rank < env->size);
  RELAY_FUZZ_CHECK(env->local_rank >= 0);
  RELAY_FUZZ_CHECK(env->local_size >= 0 && env->local_size <= env->size);
  RELAY_FUZZ_CHECK(env->local_size == 0 || env->local_rank < env->local_size);
  RELAY_FUZZ_CHECK(env->store_port >= 1 && env->store_port <= 65535);
  RELAY_FUZZ_CHECK(!env->launcher.empty());
  RELAY_FUZZ_CHECK(launched);
  RELAY_FUZZ_CHECK(!env->store_host.empty());
  RELAY_FUZZ_CHECK(env->metrics_port >= 0 && env->metrics_port <= 65535);
  RELAY_FUZZ_CHECK(!env->metrics_host.empty());
  return 0;
}
