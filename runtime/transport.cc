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

absl::Status Transport::RunExchange(const ExchangeCall& call) {
  absl::StatusOr<Request> started = Exchange(call);
  if (!started.ok()) return started.status();
  return started->Wait();
}

}  // namespace relay
