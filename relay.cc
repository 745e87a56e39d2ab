#include "relay.h"

#include "collectives/engine.h"
#include "transports/loopback/loopback_transport.h"

namespace relay {

TransportRegistry& Transports() {
  static TransportRegistry* registry = [] {
    TransportRegistry& r = TransportRegistry::Global();
    // Priorities: hardware transports will outrank loopback once they exist.
    r.Register(0, std::make_unique<LoopbackTransportFactory>()).IgnoreError();
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

}  // namespace relay
