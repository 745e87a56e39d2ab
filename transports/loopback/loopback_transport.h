// File: transports/loopback/loopback_transport.h
//
// The loopback transport: N ranks as threads of one process, moving host
// memory, and device memory where the build has CUDA and a GPU is visible
// (one copy between GPUs per message, queued on CUDA streams:
// device_messages.h). It is relay's default transport and its test vehicle,
// and it is built to be fast rather than to pretend:
//   - A message costs one copy, made straight from the sender's buffer into
//     the receiver's by whichever side arrives second (no staging buffer).
//   - IrecvReduce reduces the sender's bytes straight into the destination
//     (NCCL's recvReduceCopy), so a ring step reads each input once.
//   - Nothing spins forever: requests spin briefly, then sleep
//     (runtime/request.h), so sixteen ranks share two cores.
//   - Exchange (the shm algorithm) runs over slots in ordinary memory
//     (runtime/slot_exchange.h): the same code as over a shared-memory
//     segment between processes, so the loopback suites test it. The cost
//     model keeps the direct algorithm here, which moves less.
// Sends complete when their receive has copied the data (rendezvous), so an
// algorithm must post both sides of an exchange before waiting on either.
//
// Failure. Abort() on one rank cancels its own pending requests and fails
// every peer's pending or later receive from it, and every send to it, with
// Unavailable naming the rank, so peers learn of the loss at once instead of
// waiting out their timeouts.
//
// Lifetime and ownership. The ranks of one group share a LoopbackFabric,
// found through the store at Connect() time; each rank's transport holds it
// by shared_ptr. Ranks in different processes cannot use this transport
// (Connect fails with FailedPrecondition).
//
// Example:
//   LoopbackTransportFactory factory;
//   auto store = std::make_shared<InMemoryStore>();
//   // On each of n threads, with rank r:
//   RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t,
//                          factory.Connect({store, r, n}));
#ifndef RELAY_TRANSPORTS_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define RELAY_TRANSPORTS_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <chrono>
#include <memory>

#include "absl/strings/string_view.h"
#include "runtime/slot_exchange.h"
#include "runtime/transport.h"

namespace relay {

class LoopbackFabric;

// One rank's hold on the fabric, shared by that rank's requests. Requests
// keep this rather than the fabric itself: every rank's requests would
// otherwise count references on the one fabric's control block, a cache line
// that bounces between cores on every operation.
struct LoopbackRankEnd {
  std::shared_ptr<LoopbackFabric> fabric;
  int rank = 0;
  // RequestState::SpinBudget of this rank's requests: long when every rank
  // of the group can have a core of its own, as the peer a request waits
  // for is then running, not queued behind this thread.
  std::chrono::nanoseconds spin_budget = RequestState::kDefaultSpinBudget;
};

// Capabilities a loopback group may turn off, so that the algorithms' paths
// for transports without them (their fallbacks) run in tests too.
struct LoopbackOptions {
  bool fused_recv_reduce = true;     // IrecvReduce.
  bool shared_address_space = true;  // Rendezvous (direct algorithms).
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, int rank,
                    LoopbackOptions options = {});
  ~LoopbackTransport() override;

  absl::string_view name() const override { return "loopback"; }
  int rank() const override { return rank_; }
  int size() const override;
  TransportCapabilities capabilities() const override;

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override;
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override;
  absl::StatusOr<Request> IrecvReduce(int peer, Tag tag, ConstBuffer local,
                                      Buffer dst, ReduceFn reduce,
                                      absl::Time deadline) override;
  // Device memory (where loopback_device::Available()): a batch is queued on
  // `cuda_stream` as NCCL's group would be, and returns once the peers have
  // posted their side (device_messages.h), or at `deadline` with the
  // request failed. Host memory: each op through Isend and Irecv.
  absl::StatusOr<Request> PostBatch(absl::Span<const P2POp> ops,
                                    void* cuda_stream,
                                    absl::Time deadline) override;
  // Declared device memory must live on the GPU it names.
  absl::Status CheckMemory(const ConstBuffer& data,
                           absl::string_view what) const override;
  bool Progress() override;
  void StartedPolling() override;
  void FinishedPolling() override;
  absl::StatusOr<Request> Rendezvous(Tag tag, const void* record,
                                     size_t record_bytes, CombineFn combine,
                                     size_t parts, absl::Time deadline,
                                     uint64_t signature = 0) override;
  absl::StatusOr<Request> Exchange(const ExchangeCall& call) override;
  absl::Status RunExchange(const ExchangeCall& call) override;
  void Abort(absl::Status reason) override;

 private:
  absl::StatusOr<Request> PostDevice(absl::Span<const P2POp> ops,
                                     void* cuda_stream, absl::Time deadline);
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, ConstBuffer local,
                                   Buffer dst, ReduceFn reduce,
                                   absl::Time deadline);

  std::shared_ptr<LoopbackFabric> fabric_;
  const int rank_;
  const std::shared_ptr<const LoopbackRankEnd> end_;  // For requests.
  const LoopbackOptions options_;
  // Kept by the fabric (LoopbackFabric::MakeExchange); null where the
  // fabric has no exchange region.
  SlotExchange* const exchange_;
};

class LoopbackTransportFactory final : public TransportFactory {
 public:
  explicit LoopbackTransportFactory(LoopbackOptions options = {})
      : options_(options) {}
  absl::string_view name() const override { return "loopback"; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override;

 private:
  const LoopbackOptions options_;
};

}  // namespace relay

#endif  // RELAY_TRANSPORTS_LOOPBACK_LOOPBACK_TRANSPORT_H_
