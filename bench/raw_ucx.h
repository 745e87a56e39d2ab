// File: bench/raw_ucx.h
//
// RawUcxPair: UCX's own tagged send and receive between the two ranks of a
// bench/pingpong job, on a UCP worker of its own, without relay in the
// path. pingpong --raw-ucx alternates blocks of its round trips with
// relay's on the same buffers in the same processes, so the difference is
// relay's path alone: the launcher, the host's phase and the buffers' pages
// are shared by both sides, where a comparison against ucx_perftest (other
// processes, minutes apart on a noisy VM) carries them all.
//
// The loop is ucx_perftest tag_lat's: rank 0 posts its send and then its
// receive and waits for both; rank 1 waits for the receive it posted ahead,
// replies, posts the next receive and waits for the reply. Waits poll
// ucp_worker_progress and never yield, as perftest's do.
//
// Example:
//   absl::StatusOr<std::unique_ptr<RawUcxPair>> raw = RawUcxPair::Connect(comm);
//   RELAY_RETURN_IF_ERROR((*raw)->RoundTrip(send, recv, bytes, ahead));
#ifndef RELAY_BENCH_RAW_UCX_H_
#define RELAY_BENCH_RAW_UCX_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay.h"

struct ucp_context;
struct ucp_worker;
struct ucp_ep;

namespace relay {
namespace bench {

class RawUcxPair {
 public:
  // Creates this rank's context, worker and endpoint (tag matching only,
  // single-threaded, UCX_TLS as set) and swaps worker addresses with the
  // peer through `comm`, which must have exactly 2 ranks.
  static absl::StatusOr<std::unique_ptr<RawUcxPair>> Connect(
      Communicator& comm);
  ~RawUcxPair();
  RawUcxPair(const RawUcxPair&) = delete;
  RawUcxPair& operator=(const RawUcxPair&) = delete;

  // One round trip of `bytes` in perftest's pattern (above). `post_next`:
  // rank 1 posts its receive for the next round trip before waiting for
  // its reply, as perftest does; false leaves nothing posted afterwards
  // (the last round trip of a block). Rank 1 posts a receive itself when
  // none is posted. Each wait gives up after 60 s (DeadlineExceeded).
  absl::Status RoundTrip(const void* send, void* recv, size_t bytes,
                         bool post_next);
  int rank() const { return rank_; }

 private:
  explicit RawUcxPair(int rank) : rank_(rank) {}
  absl::Status WaitFor(void* request, const char* what);
  absl::StatusOr<void*> PostRecv(void* recv, size_t bytes);

  const int rank_;
  ucp_context* context_ = nullptr;
  ucp_worker* worker_ = nullptr;
  ucp_ep* ep_ = nullptr;
  void* next_recv_ = nullptr;  // Rank 1's receive, posted ahead.
  bool next_recv_posted_ = false;
};

}  // namespace bench
}  // namespace relay

#endif  // RELAY_BENCH_RAW_UCX_H_
