// File: runtime/bootstrap/environment.h
//
// LaunchEnvironment: who this process is in a job (rank, world size, local
// rank) and where the job's store is, read from the variables a launcher
// sets. Understood launchers, in order of precedence:
//
//   relay (tools/relayrun)  RELAY_RANK, RELAY_WORLD_SIZE, RELAY_LOCAL_RANK,
//                           RELAY_LOCAL_WORLD_SIZE
//   torchrun                RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI (mpirun)       OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                           OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//   Slurm (srun)            SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//
// The first launcher with any of its variables set is used; it must set
// both its rank and its size. relay's and torchrun's variables, when both
// are set (relayrun sets both), must agree. Open MPI's and Slurm's are
// ignored under a higher launcher, because torchrun started by srun has
// legitimately different numbers.
//
// Store: RELAY_STORE_ADDR and RELAY_STORE_PORT, else MASTER_ADDR and
// MASTER_PORT. Without an address, a job whose ranks are all on this host
// (by the launcher's local size) uses 127.0.0.1; otherwise it is an error.
// Without a port, 29500 (torchrun's default). Rank 0 hosts the store.
// RELAY_TOKEN is the job token (auth.h); RELAY_TRANSPORT names a transport.
//
// Every error is InvalidArgument naming the variables at fault and their
// values.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(LaunchEnvironment env, ReadLaunchEnvironment());
//   std::cout << "rank " << env.rank << " of " << env.size << " via "
//             << env.launcher << "\n";
#ifndef RELAY_RUNTIME_BOOTSTRAP_ENVIRONMENT_H_
#define RELAY_RUNTIME_BOOTSTRAP_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relay {

struct LaunchEnvironment {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 0;  // 0: the launcher did not say.
  std::string launcher;  // "relay", "torchrun", "Open MPI" or "Slurm".
  std::string store_host;
  int store_port = 0;
  std::string token;
  std::string transport;  // Empty: the default.
  // RELAY_METRICS_PORT: where this process serves GET /metrics, already
  // offset by local_rank so the ranks of one host do not collide; 0: no
  // endpoint. On RELAY_METRICS_ADDR, else 127.0.0.1.
  int metrics_port = 0;
  std::string metrics_host = "127.0.0.1";
};

inline constexpr int kDefaultStorePort = 29500;

// Looks a variable up; nullopt if unset. Tests pass a map.
using EnvironmentLookup =
    std::function<std::optional<std::string>(absl::string_view name)>;

// The process's own environment (getenv).
EnvironmentLookup ProcessEnvironment();

absl::StatusOr<LaunchEnvironment> ReadLaunchEnvironment(
    const EnvironmentLookup& lookup = ProcessEnvironment());

// True if any launcher's rank or size variable is set: the process was
// (meant to be) started as one rank of a job. Tools use it to choose
// between running ranks as threads and being one rank.
bool HasLaunchEnvironment(const EnvironmentLookup& lookup = ProcessEnvironment());

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_ENVIRONMENT_H_
