#include "runtime/transport.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace relay {

absl::StatusOr<Request> Transport::PostBatch(absl::Span<const P2POp> ops,
                                             void* /*cuda_stream*/,
                                             absl::Time deadline) {
  std::vector<Request> posted;
  posted.reserve(ops.size());
  for (const P2POp& op : ops) {
    absl::StatusOr<Request> r =
        op.kind == P2POp::Kind::kSend
            ? Isend(op.peer, op.tag, op.data, deadline)
            : Irecv(op.peer, op.tag, op.data, deadline);
    if (!r.ok()) {
      if (posted.empty() || !absl::IsInvalidArgument(r.status())) {
        return r.status();
      }
      // Ops before it are in flight: not "nothing was posted".
      return absl::InternalError(absl::StrCat(
          "batch op ", posted.size(), " refused after ", posted.size(),
          " were posted: ", r.status().message()));
    }
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
