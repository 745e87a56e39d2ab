// File: relay.h
//
// relay's public entry point: builds communicators over the registered
// transports with relay's own collective algorithms. Include this, link
// //:relay, and use runtime/communicator.h's Communicator.
//
// Built-in transports (see `Transports().List()`):
//   loopback  ranks as threads of one process (the default for threads).
//   ucx       ranks as processes, on one host or many (the default for
//             processes: CreateCommunicatorFromEnvironment). Absent from
//             builds with --define=relay_ucx=off.
//   nccl      ranks as processes or threads, one GPU each, device memory
//             only (transports/nccl/nccl_transport.h). Not viable without
//             NCCL at build time or without a visible GPU.
//
// Lifetime and ownership. The registry and the engine are process-wide and
// live forever; communicators are owned by the caller. Every rank of a group
// calls CreateCommunicator with the same store, and each group needs a store
// of its own (wrap a shared one in a PrefixStore per group).
//
// Example (four ranks as threads):
//   auto store = std::make_shared<InMemoryStore>();
//   // on each thread r:
//   RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//       CreateCommunicator({.rank = r, .size = 4, .store = store}));
//   RELAY_ASSIGN_OR_RETURN(Request req, comm->Barrier());
//   RELAY_RETURN_IF_ERROR(req.Wait());
#ifndef RELAY_RELAY_H_
#define RELAY_RELAY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/collective.h"
#include "runtime/communicator.h"
#include "runtime/request.h"
#include "runtime/status_macros.h"
#include "runtime/store.h"
#include "runtime/transport_registry.h"

namespace relay {

struct CommunicatorConfig {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;
  // A registered transport's name; empty: the default (highest-priority
  // viable) transport.
  std::string transport;
  CommunicatorOptions options;
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommunicatorConfig& config);

// Builds this process's communicator from its launcher's environment
// (runtime/bootstrap/environment.h: relayrun, torchrun, mpirun or srun).
// Rank 0 hosts the job's TCP store at the store address, which the
// communicator keeps alive; the others connect to it, waiting up to
// `connect_timeout` for rank 0 to come up. The transport is `transport` if
// given, else RELAY_TRANSPORT, else the default one that spans processes.
// With RELAY_METRICS_PORT set, the communicator also serves its metrics
// for Prometheus at http://RELAY_METRICS_ADDR:(port + local rank)/metrics
// (RELAY_METRICS_ADDR defaults to 127.0.0.1; runtime/bootstrap/metrics_server.h).
//
// Example (run as `relayrun -n 4 -- ./my_program`):
//   RELAY_ASSIGN_OR_RETURN(auto comm, CreateCommunicatorFromEnvironment());
//   RELAY_ASSIGN_OR_RETURN(Request r, comm->AllReduce(...));
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicatorFromEnvironment(
    CommunicatorOptions options = {},
    absl::Duration connect_timeout = absl::Minutes(2),
    const std::string& transport = "");

// The registry with every built-in transport registered.
TransportRegistry& Transports();

// relay's collective algorithms (collectives/engine.h).
const CollectiveEngine& DefaultEngine();

}  // namespace relay

#endif  // RELAY_RELAY_H_
