#include "runtime/bootstrap/job_store.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/bootstrap/host_token.h"
#include "runtime/bootstrap/socket.h"
#include "runtime/config.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" ||
         absl::StartsWith(host, "127.");
}

// The job's ranks all run on this host: every one counts itself local, or
// they meet at a loopback address.
bool SingleHostJob(const LaunchEnvironment& env) {
  return env.size == 1 || env.local_size == env.size ||
         IsLoopbackHost(env.store_host);
}

// A job without RELAY_TOKEN across hosts runs only when
// RELAY_ALLOW_OPEN_STORE=1 says so, and is warned once.
absl::Status AllowOpenStore(const LaunchEnvironment& env) {
  absl::StatusOr<bool> allowed = ReadSwitch("RELAY_ALLOW_OPEN_STORE", false);
  if (!allowed.ok()) return allowed.status();
  if (!*allowed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELAY_TOKEN is not set and this ", env.size, "-rank job (launched by ",
        env.launcher, ") spans hosts: anyone who reaches ",
        JoinHostPort(env.store_host, env.store_port),
        " could read and write the job's store, and abort it. Give every rank "
        "the same secret (export RELAY_TOKEN=$(openssl rand -hex 32) before "
        "torchrun or srun; mpirun -x RELAY_TOKEN), or set "
        "RELAY_ALLOW_OPEN_STORE=1 to run without one"));
  }
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr,
                 "relay: warning: RELAY_ALLOW_OPEN_STORE=1: the store at %s "
                 "has no job token; anyone who reaches it can join the job\n",
                 JoinHostPort(env.store_host, env.store_port).c_str());
  });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TcpStore>> HostOrConnect(
    const LaunchEnvironment& env, absl::Duration connect_timeout) {
  TcpStoreOptions options{.host = env.store_host,
                          .port = env.store_port,
                          .token = env.token,
                          .connect_timeout = connect_timeout};
  if (!env.token.empty() || !SingleHostJob(env)) {
    if (env.token.empty()) RELAY_RETURN_IF_ERROR(AllowOpenStore(env));
    return env.rank == 0 ? TcpStore::Host(options) : TcpStore::Connect(options);
  }
  // One host, no token from the launcher: rank 0 makes one that only this
  // user can read (runtime/bootstrap/host_token.h).
  if (env.rank == 0) {
    RELAY_ASSIGN_OR_RETURN(std::shared_ptr<HostToken> token,
                           HostToken::Create(env.store_port));
    options.token = token->token();
    RELAY_ASSIGN_OR_RETURN(std::shared_ptr<TcpStore> store,
                           TcpStore::Host(options));
    store->KeepAlive(std::move(token));
    return store;
  }
  const absl::Time deadline = absl::Now() + connect_timeout;
  std::string refused;  // A token left by an earlier job on this port.
  while (true) {
    RELAY_ASSIGN_OR_RETURN(options.token,
                           ReadHostToken(env.store_port, deadline, refused));
    options.connect_timeout = std::max(absl::Seconds(1), deadline - absl::Now());
    absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(options);
    if (store.ok() || !absl::IsUnauthenticated(store.status()) ||
        absl::Now() >= deadline) {
      return store;
    }
    refused = options.token;
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<TcpStore>> ConnectJobStore(
    const LaunchEnvironment& env, absl::Duration connect_timeout) {
  absl::StatusOr<std::shared_ptr<TcpStore>> store =
      HostOrConnect(env, connect_timeout);
  if (!store.ok()) {
    return absl::Status(
        store.status().code(),
        absl::StrCat("rank ", env.rank, " of ", env.size, " (launched by ",
                     env.launcher, "): ", store.status().message()));
  }
  return store;
}

}  // namespace relay
