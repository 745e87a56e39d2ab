// File: runtime/bootstrap/job_store.h
//
// ConnectJobStore: the job's TCP store for a process its launcher started
// (LaunchEnvironment, environment.h): rank 0 hosts it (the returned store
// keeps the server running), the others connect, waiting up to
// `connect_timeout` for it. The job token is RELAY_TOKEN; without it, ranks
// on one host share a token only this user can read (host_token.h), and a
// job across hosts is refused unless RELAY_ALLOW_OPEN_STORE=1
// (docs/reliability.md). Errors name the rank and its launcher.
// CreateCommunicatorFromEnvironment (relay.h) calls it; test drivers that
// want the store beside their communicator call it themselves.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(LaunchEnvironment env, ReadLaunchEnvironment());
//   RELAY_ASSIGN_OR_RETURN(std::shared_ptr<TcpStore> store,
//                          ConnectJobStore(env));
#ifndef RELAY_RUNTIME_BOOTSTRAP_JOB_STORE_H_
#define RELAY_RUNTIME_BOOTSTRAP_JOB_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/bootstrap/environment.h"
#include "runtime/bootstrap/tcp_store.h"

namespace relay {

absl::StatusOr<std::shared_ptr<TcpStore>> ConnectJobStore(
    const LaunchEnvironment& env,
    absl::Duration connect_timeout = absl::Minutes(2));

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_JOB_STORE_H_
