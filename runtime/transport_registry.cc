#include "runtime/transport_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace relay {

TransportRegistry& TransportRegistry::Global() {
  static auto* registry = new TransportRegistry();
  return *registry;
}

absl::Status TransportRegistry::Register(
    int priority, std::unique_ptr<TransportFactory> factory) {
  if (factory == nullptr) {
    return absl::InvalidArgumentError("Register: null transport factory");
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Registered& e : entries_) {
    if (e.factory->name() == factory->name()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "transport '", factory->name(), "' is already registered"));
    }
  }
  entries_.push_back({priority, std::move(factory)});
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Registered& a, const Registered& b) {
                     return a.priority > b.priority;
                   });
  return absl::OkStatus();
}

absl::StatusOr<TransportFactory*> TransportRegistry::Get(
    absl::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const Registered& e : entries_) {
    if (e.factory->name() == name) return e.factory.get();
    names.emplace_back(e.factory->name());
  }
  return absl::NotFoundError(absl::StrCat("unknown transport '", name,
                                          "' (registered: ",
                                          absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<TransportFactory*> TransportRegistry::Default(
    bool across_processes) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Registered& e : entries_) {
    if (across_processes && !e.factory->SpansProcesses()) continue;
    if (e.factory->IsViable()) return e.factory.get();
  }
  return absl::NotFoundError(
      across_processes
          ? "no viable transport connects ranks in separate processes "
            "(is relay built with UCX?)"
          : "no viable transport is registered");
}

std::vector<TransportRegistry::Entry> TransportRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  for (const Registered& e : entries_) {
    out.push_back({std::string(e.factory->name()), e.priority,
                   e.factory->IsViable(), e.factory->SpansProcesses()});
  }
  return out;
}

}  // namespace relay
