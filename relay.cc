#include "relay.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/engine.h"
#include "runtime/bootstrap/host_token.h"
#include "runtime/bootstrap/metrics_server.h"
#include "runtime/bootstrap/socket.h"
#include "runtime/config.h"
#include "transports/loopback/loopback_transport.h"
#include "transports/nccl/nccl_transport.h"
#if RELAY_WITH_UCX
#include "transports/ucx/ucx_transport.h"
#endif

namespace relay {

TransportRegistry& Transports() {
  static TransportRegistry* registry = [] {
    TransportRegistry& r = TransportRegistry::Global();
    // Priorities. Loopback is the fastest wiring for ranks that are threads
    // of one process; UCX is the default for ranks that are processes
    // (Default(across_processes=true) skips loopback).
    r.Register(10, std::make_unique<LoopbackTransportFactory>()).IgnoreError();
#if RELAY_WITH_UCX
    r.Register(5, std::make_unique<UcxTransportFactory>()).IgnoreError();
#endif
    // Device memory only: chosen by name ("nccl"), never a host default
    // where another transport is viable.
    r.Register(1, std::make_unique<NcclTransportFactory>()).IgnoreError();
    return &r;
  }();
  return *registry;
}

const CollectiveEngine& DefaultEngine() {
  static const auto* engine = new ScheduleEngine();
  return *engine;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommunicatorConfig& config) {
  TransportRegistry& registry = Transports();
  absl::StatusOr<TransportFactory*> factory =
      config.transport.empty() ? registry.Default()
                               : registry.Get(config.transport);
  if (!factory.ok()) return factory.status();
  return Communicator::Create(**factory, DefaultEngine(), config.store,
                              config.rank, config.size, config.options);
}

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

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicatorFromEnvironment(
    CommunicatorOptions options, absl::Duration connect_timeout,
    const std::string& transport) {
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) return env.status();
  if (!transport.empty()) env->transport = transport;
  absl::StatusOr<std::shared_ptr<TcpStore>> store =
      ConnectJobStore(*env, connect_timeout);
  if (!store.ok()) return store.status();
  TransportRegistry& registry = Transports();
  absl::StatusOr<TransportFactory*> factory =
      !env->transport.empty() ? registry.Get(env->transport)
                              : registry.Default(/*across_processes=*/env->size > 1);
  if (!factory.ok()) return factory.status();
  if (env->size > 1 && !(*factory)->SpansProcesses()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transport '", env->transport,
        "' connects threads of one process, but this job's ranks are "
        "processes"));
  }
  std::shared_ptr<Store> base = *std::move(store);
  // The communicator owns its store (and so rank 0's server) through this.
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(
      **factory, DefaultEngine(), std::move(base), env->rank, env->size, options);
  if (!comm.ok() || env->metrics_port == 0) return comm;
  // Asked for by name (RELAY_METRICS_PORT), so a port that cannot be bound
  // fails the call rather than leaving the job unobserved.
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(
      {.host = env->metrics_host, .port = env->metrics_port},
      (*comm)->MetricsRenderer());
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("rank ", env->rank, ": RELAY_METRICS_PORT: ",
                                     server.status().message()));
  }
  (*comm)->Own(std::shared_ptr<MetricsServer>(*std::move(server)));
  return comm;
}

}  // namespace relay
