#include "relay.h"

#include "absl/strings/str_cat.h"
#include "collectives/engine.h"
#include "runtime/bootstrap/environment.h"
#include "runtime/bootstrap/job_store.h"
#include "runtime/bootstrap/metrics_server.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"
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
    // relay's own GPU wiring for ranks on one host: chosen by name
    // ("cuda_ipc"; torch's backend picks it for CUDA tensors on one host),
    // never a host default: it moves device memory only and holds an arena
    // on every GPU.
    r.Register(0, std::make_unique<CudaIpcTransportFactory>()).IgnoreError();
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
