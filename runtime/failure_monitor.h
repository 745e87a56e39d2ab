// File: runtime/failure_monitor.h
//
// FailureMonitor: tells every rank of a communicator, through its store,
// that one rank failed, so the others stop waiting at once instead of each
// running into its own timeout (a transport like UCX over shared memory, or
// NCCL, does not tell a peer that this rank gave up or died).
//
// What it shares, under the communicator's store scope:
//   failure/<r>    why rank r failed (set by r when it aborts, or by a rank
//                  that found r's heartbeat stopped)
//   failures       a counter bumped after each failure/<r>; the only key a
//                  healthy poll reads besides the heartbeats it watches
//   heartbeat/<r>  a counter rank r bumps every poll (with peer_timeout set)
//   closed/<r>     set when r's communicator is destroyed normally, so a
//                  stopped heartbeat is then not a failure
// Each rank watches the heartbeats of the next `watched_peers` ranks (a
// ring), so the store's load grows with the rank count, not its square.
//
// A background thread per monitor polls every `poll_interval`: a failure
// published anywhere reaches every rank within about one interval; a dead
// or frozen process within peer_timeout plus one interval. When it learns
// of a failure it calls `on_peer_failure` once, on its thread, with
// Unavailable naming the rank and why.
//
// Publish never blocks on the store (the thread writes), so a failure path
// can call it even when the store's host is gone. If the store itself stops
// answering for longer than peer_timeout (its host, usually rank 0, died),
// that too is reported as Unavailable.
//
// Example:
//   FailureMonitor monitor(store, rank, size, {},
//       [&](absl::Status why) { comm_abort(why); });
//   ...
//   monitor.Publish(absl::DeadlineExceededError("all_reduce #12 timed out"));
#ifndef RELAY_RUNTIME_FAILURE_MONITOR_H_
#define RELAY_RUNTIME_FAILURE_MONITOR_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/store.h"

namespace relay {

struct FailureMonitorOptions {
  absl::Duration poll_interval = absl::Milliseconds(250);
  // A watched peer whose heartbeat has not moved for this long is lost;
  // zero: no heartbeats (only published failures are shared).
  absl::Duration peer_timeout = absl::Seconds(30);
  int watched_peers = 2;
};

// The options with peer_timeout from RELAY_PEER_TIMEOUT (seconds, may be
// fractional; 0 turns heartbeats off) when set; InvalidArgument naming the
// variable if it is malformed.
absl::StatusOr<FailureMonitorOptions> FailureMonitorOptionsFromEnvironment(
    FailureMonitorOptions defaults = {});

class FailureMonitor {
 public:
  using OnPeerFailure = std::function<void(absl::Status)>;

  FailureMonitor(std::shared_ptr<Store> store, int rank, int size,
                 FailureMonitorOptions options, OnPeerFailure on_peer_failure);
  // Stops the thread; writes a pending Publish first, or closed/<rank> if
  // this rank never failed.
  ~FailureMonitor();
  FailureMonitor(const FailureMonitor&) = delete;
  FailureMonitor& operator=(const FailureMonitor&) = delete;

  // This rank failed: the others are told on the next poll. Only the first
  // call counts; it does not block.
  void Publish(const absl::Status& why);

 private:
  void Loop();
  // One poll; returns the failure to report, if any.
  std::optional<absl::Status> Poll(absl::Time now);
  std::optional<absl::Status> CheckHeartbeats(absl::Time now);
  void WritePublished();

  const std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const FailureMonitorOptions options_;
  const OnPeerFailure on_peer_failure_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                   // Guarded by mu_.
  std::optional<absl::Status> publish_;  // Guarded by mu_.
  bool published_ = false;              // Guarded by mu_ (written once).

  // The thread's own state.
  struct Watched {
    int rank;
    int64_t beat = -1;
    absl::Time moved;
    bool closed = false;
  };
  std::vector<Watched> watched_;
  absl::Time store_failing_since_ = absl::InfiniteFuture();
  bool reported_ = false;
  std::thread thread_;  // Last: starts after everything above.
};

}  // namespace relay

#endif  // RELAY_RUNTIME_FAILURE_MONITOR_H_
