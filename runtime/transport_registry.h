// File: runtime/transport_registry.h
//
// TransportRegistry: transports by name and priority. The //:relay target
// registers the built-in ones; tools list them with their viability, and the
// default transport is the viable one of highest priority.
//
// Lifetime and ownership. The registry owns its factories for the life of the
// process; the pointers it hands out never dangle. Thread-safe.
//
// Example:
//   TransportRegistry& reg = TransportRegistry::Global();
//   RELAY_ASSIGN_OR_RETURN(TransportFactory* f, reg.Get("loopback"));
#ifndef RELAY_RUNTIME_TRANSPORT_REGISTRY_H_
#define RELAY_RUNTIME_TRANSPORT_REGISTRY_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/transport.h"

namespace relay {

class TransportRegistry {
 public:
  struct Entry {
    std::string name;
    int priority;
    bool viable;
    bool spans_processes;
  };

  static TransportRegistry& Global();

  // AlreadyExists if `factory->name()` is taken.
  absl::Status Register(int priority, std::unique_ptr<TransportFactory> factory);
  // NotFound, listing the registered names, if `name` is unknown.
  absl::StatusOr<TransportFactory*> Get(absl::string_view name) const;
  // The viable transport of highest priority (among those that span
  // processes, if `across_processes`); NotFound if there is none.
  absl::StatusOr<TransportFactory*> Default(bool across_processes = false) const;
  // Every registered transport, highest priority first.
  std::vector<Entry> List() const;

 private:
  struct Registered {
    int priority;
    std::unique_ptr<TransportFactory> factory;
  };
  mutable std::mutex mu_;
  std::vector<Registered> entries_;  // Sorted.
};

}  // namespace relay

#endif  // RELAY_RUNTIME_TRANSPORT_REGISTRY_H_
