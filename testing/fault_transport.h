// File: testing/fault_transport.h
//
// FaultInjectingTransportFactory: wraps any transport factory so that each
// rank's transport, from a seed, delays its operations, reorders them, stalls
// or kills the rank at a chosen operation. Same seed, same faults: every
// decision is drawn from a generator seeded by (seed, rank), in the order the
// rank posts its operations.
//
//   delays    each Isend/Irecv is held back for a random time in
//             [0, max_delay] (with probability delay_probability) before it
//             reaches the wrapped transport; the caller gets its request at
//             once.
//   reorder   held-back operations are released by time, so operations on
//             different peers or tags overtake each other; operations on one
//             (peer, tag, direction) are never reordered, so the transport's
//             non-overtaking rule still holds.
//   stall     from operation `fail_at_op` on, rank `fail_rank` posts nothing
//             more: its peers and it see their deadlines pass.
//   kill      at operation `fail_at_op`, rank `fail_rank` aborts its
//             transport with Unavailable, as a crashed process would look to
//             its own requests; peers learn of it the way the wrapped
//             transport tells them.
//
// Fused receive-and-reduce, the shared-address-space rendezvous and native
// collectives are not offered (so every byte goes through the faulty path);
// algorithm "direct" therefore cannot run over it.
//
// Lifetime and ownership. The factory keeps a reference to the wrapped one,
// which must outlive it. Each transport owns its wrapped transport and a
// thread that releases held-back operations.
//
// Example:
//   LoopbackTransportFactory loopback;
//   FaultPlan plan;
//   plan.seed = 42;
//   plan.max_delay = absl::Microseconds(200);
//   FaultInjectingTransportFactory faulty(loopback, plan);
//   RunRanks(4, faulty, engine, body);
#ifndef RELAY_TESTING_FAULT_TRANSPORT_H_
#define RELAY_TESTING_FAULT_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runtime/transport.h"

namespace relay {

struct ConformanceCase;

// What the fault tests and bench/fault_sweep run under a plan: every
// collective with every algorithm the wrapper can carry (all but direct) at
// 3 and 4 ranks, with a count that does not divide evenly (barrier: none),
// float32 sum, every root, out of place and in place.
std::vector<ConformanceCase> FaultSweepCases();

struct FaultPlan {
  uint64_t seed = 1;
  double delay_probability = 0.5;
  absl::Duration max_delay = absl::Microseconds(300);
  enum class Failure : uint8_t { kNone, kStall, kKill };
  Failure failure = Failure::kNone;
  int fail_rank = -1;        // The rank that stalls or dies.
  int64_t fail_at_op = -1;   // Its operation count (0-based) when it does.

  std::string ToString() const;
};

// What the transports of one factory did, summed over ranks: operations
// released to the wrapped transport, and how many of them went out after an
// operation this rank posted later (reordered).
struct FaultStats {
  std::atomic<int64_t> released{0};
  std::atomic<int64_t> overtaken{0};
};

class FaultInjectingTransportFactory final : public TransportFactory {
 public:
  FaultInjectingTransportFactory(TransportFactory& inner, FaultPlan plan)
      : inner_(inner), plan_(plan), name_("faulty-" + std::string(inner.name())) {}

  const FaultStats& stats() const { return *stats_; }

  absl::string_view name() const override { return name_; }
  bool IsViable() const override { return inner_.IsViable(); }
  bool SpansProcesses() const override { return inner_.SpansProcesses(); }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override;

 private:
  TransportFactory& inner_;
  const FaultPlan plan_;
  const std::string name_;
  const std::shared_ptr<FaultStats> stats_ = std::make_shared<FaultStats>();
};

}  // namespace relay

#endif  // RELAY_TESTING_FAULT_TRANSPORT_H_
