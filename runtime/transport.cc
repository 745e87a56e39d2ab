#include "runtime/transport.h"

#include <utility>
#include <vector>

namespace relay {

absl::StatusOr<Request> Transport::PostBatch(absl::Span<const PeerOp> ops,
                                             void* /*cuda_stream*/,
                                             absl::Time deadline) {
  std::vector<Request> posted;
  posted.reserve(ops.size());
  for (const PeerOp& op : ops) {
    absl::StatusOr<Request> r =
        op.kind == PeerOp::Kind::kSend
            ? Isend(op.peer, op.tag, op.data, deadline)
            : Irecv(op.peer, op.tag, op.data, deadline);
    if (!r.ok()) return r.status();
    posted.push_back(*std::move(r));
  }
  if (posted.size() == 1) return std::move(posted.front());
  return WhenAll(std::move(posted), deadline);
}

absl::Status Transport::RunExchange(uint64_t tag, ExchangeInput input,
                                    ExchangeFinishFn finish,
                                    const void* context, size_t context_bytes,
                                    absl::Time deadline) {
  absl::StatusOr<Request> started =
      Exchange(tag, input, finish, context, context_bytes, deadline);
  if (!started.ok()) return started.status();
  absl::Status waited = started->Wait();
  // Still in flight, and it would write into the caller's memory later.
  if (absl::IsDeadlineExceeded(waited)) Abort(waited);
  return waited;
}

// CollectiveEngine's default Run, here rather than in collective.cc: it
// aborts the transport, which collective.h only declares (the transport
// library depends on the collective one).
absl::Status CollectiveEngine::Run(const std::shared_ptr<Transport>& transport,
                                   const TransportCapabilities& caps,
                                   const CollectiveArgs& args) const {
  absl::StatusOr<Request> started = Start(transport, caps, args);
  if (!started.ok()) return started.status();
  absl::Status waited = started->Wait();
  if (absl::IsDeadlineExceeded(waited)) transport->Abort(waited);
  return waited;
}

}  // namespace relay
