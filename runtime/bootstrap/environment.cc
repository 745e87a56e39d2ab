#include "runtime/bootstrap/environment.h"

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/config.h"

namespace relay {
namespace {

struct Launcher {
  const char* name;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // May be null.
};

constexpr Launcher kLaunchers[] = {
    {"relay", "RELAY_RANK", "RELAY_WORLD_SIZE", "RELAY_LOCAL_RANK",
     "RELAY_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

struct Reader {
  const EnvironmentLookup& lookup;

  bool IsSet(const char* name) const {
    return name != nullptr && lookup(name).has_value();
  }

  // The integer in `name`; nullopt if unset; error if not an integer or
  // below `min`.
  absl::StatusOr<std::optional<int>> Int(const char* name, int min) const {
    if (name == nullptr) return std::optional<int>();
    std::optional<std::string> text = lookup(name);
    if (!text.has_value()) return std::optional<int>();
    int value = 0;
    if (!absl::SimpleAtoi(*text, &value) || value < min) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=\"", *text, "\" is not an integer >= ", min));
    }
    return std::optional<int>(value);
  }
};

struct Numbers {
  int rank, size;
  std::optional<int> local_rank, local_size;
};

absl::StatusOr<Numbers> ReadNumbers(const Reader& env, const Launcher& l) {
  auto rank = env.Int(l.rank, 0);
  if (!rank.ok()) return rank.status();
  auto size = env.Int(l.size, 1);
  if (!size.ok()) return size.status();
  if (!rank->has_value() || !size->has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        l.name, " launch environment is incomplete: ",
        rank->has_value() ? l.size : l.rank, " is not set (",
        rank->has_value() ? l.rank : l.size, " is)"));
  }
  if (**rank >= **size) {
    return absl::InvalidArgumentError(absl::StrCat(
        l.rank, "=", **rank, " is not below ", l.size, "=", **size));
  }
  auto local_rank = env.Int(l.local_rank, 0);
  if (!local_rank.ok()) return local_rank.status();
  auto local_size = env.Int(l.local_size, 1);
  if (!local_size.ok()) return local_size.status();
  if (local_rank->has_value() && local_size->has_value() &&
      **local_rank >= **local_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(l.local_rank, "=", **local_rank, " is not below ",
                     l.local_size, "=", **local_size));
  }
  if (local_size->has_value() && **local_size > **size) {
    return absl::InvalidArgumentError(
        absl::StrCat(l.local_size, "=", **local_size, " exceeds ", l.size,
                     "=", **size));
  }
  return Numbers{**rank, **size, *local_rank, *local_size};
}

}  // namespace

EnvironmentLookup ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    return GetEnv(std::string(name).c_str());
  };
}

bool HasLaunchEnvironment(const EnvironmentLookup& lookup) {
  const Reader env{lookup};
  for (const Launcher& l : kLaunchers) {
    if (env.IsSet(l.rank) || env.IsSet(l.size)) return true;
  }
  return false;
}

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(
    const EnvironmentLookup& lookup) {
  const Reader env{lookup};
  const Launcher* chosen = nullptr;
  for (const Launcher& l : kLaunchers) {
    if (env.IsSet(l.rank) || env.IsSet(l.size)) {
      chosen = &l;
      break;
    }
  }
  if (chosen == nullptr) {
    return absl::InvalidArgumentError(
        "no launch environment: set RELAY_RANK and RELAY_WORLD_SIZE "
        "(tools/relayrun does), or RANK and WORLD_SIZE (torchrun), or start "
        "under mpirun or srun");
  }
  absl::StatusOr<Numbers> numbers = ReadNumbers(env, *chosen);
  if (!numbers.ok()) return numbers.status();

  // relay's and torchrun's variables must agree when both are present.
  const Launcher& relay = kLaunchers[0];
  const Launcher& torchrun = kLaunchers[1];
  if (chosen == &relay &&
      (env.IsSet(torchrun.rank) || env.IsSet(torchrun.size))) {
    absl::StatusOr<Numbers> other = ReadNumbers(env, torchrun);
    if (!other.ok()) return other.status();
    if (other->rank != numbers->rank || other->size != numbers->size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "contradictory launch environment: RELAY_RANK=", numbers->rank,
          " RELAY_WORLD_SIZE=", numbers->size, " but RANK=", other->rank,
          " WORLD_SIZE=", other->size));
    }
  }

  LaunchEnvironment out;
  out.launcher = chosen->name;
  out.rank = numbers->rank;
  out.size = numbers->size;
  out.local_rank = numbers->local_rank.value_or(0);
  out.local_size = numbers->local_size.value_or(0);

  const char* addr_var = env.IsSet("RELAY_STORE_ADDR") ? "RELAY_STORE_ADDR"
                         : env.IsSet("MASTER_ADDR")    ? "MASTER_ADDR"
                                                       : nullptr;
  if (addr_var != nullptr) {
    out.store_host = *lookup(addr_var);
    if (out.store_host.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(addr_var, " is set but empty"));
    }
  } else if (out.size == 1 || out.local_size == out.size) {
    out.store_host = "127.0.0.1";  // Every rank is on this host.
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "no store address for a ", out.size,
        "-rank job that spans hosts: set RELAY_STORE_ADDR (or MASTER_ADDR) "
        "to rank 0's host"));
  }
  const char* port_var = env.IsSet("RELAY_STORE_PORT") ? "RELAY_STORE_PORT"
                         : env.IsSet("MASTER_PORT")    ? "MASTER_PORT"
                                                       : nullptr;
  out.store_port = kDefaultStorePort;
  if (port_var != nullptr) {
    auto port = env.Int(port_var, 1);
    if (!port.ok()) return port.status();
    if (**port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat(port_var, "=", **port, " is not a TCP port (1..65535)"));
    }
    out.store_port = **port;
  }
  if (env.IsSet("RELAY_METRICS_PORT")) {
    auto base = env.Int("RELAY_METRICS_PORT", 1);
    if (!base.ok()) return base.status();
    if (**base > 65535 - out.local_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RELAY_METRICS_PORT=", **base, " plus local rank ", out.local_rank,
          " is not a TCP port (1..65535)"));
    }
    out.metrics_port = **base + out.local_rank;
  }
  if (std::optional<std::string> host = lookup("RELAY_METRICS_ADDR")) {
    if (host->empty()) {
      return absl::InvalidArgumentError("RELAY_METRICS_ADDR is set but empty");
    }
    out.metrics_host = *host;
  }
  out.token = lookup("RELAY_TOKEN").value_or("");
  out.transport = lookup("RELAY_TRANSPORT").value_or("");
  return out;
}

}  // namespace relay
