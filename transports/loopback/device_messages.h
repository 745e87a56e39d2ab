// File: transports/loopback/device_messages.h
//
// Device memory over the loopback transport: ranks are threads of one
// process, each driving a GPU (or several sharing one), and a message
// between two device buffers is one copy from the sender's buffer into the
// receiver's, queued on the receiver's GPU. An operation posted on a stream
// starts after the work queued there before it, and work queued there
// after it starts once it has finished, as with NCCL; the host never waits
// for the GPU.
//
// How, for a batch of operations posted on stream S (Transport::PostBatch;
// a device Isend or Irecv is a batch of one on the legacy stream):
//   1. S records an event `ready` (the send data is written, the receive
//      buffer free).
//   2. When the fabric matches a send with its receive (whichever thread
//      posts second), it queues on the receiver's copy lane (a stream of
//      the receiver's GPU): waits for both sides' `ready`, the copy (a
//      kernel: runtime/device_runtime.h, CopyPeerAsync), then records an
//      event `done`, which both sides' batches share.
//   3. PostBatch returns once every operation of the batch is matched,
//      after making S wait for each `done`. The host thread thus waits for
//      its peers to post their side (ranks are threads: microseconds), not
//      for the GPU.
//   4. The batch's request completes when every `done` event has fired: a
//      thread that waits on it queries them, and a watcher thread
//      completes batches nobody waits on, so OnDone callbacks run.
//   StreamWait(S') makes S' wait for the same events.
//
// Why the host waits for the match. A stream cannot wait on the GPU for
// work that no thread has queued yet without holding something: CUDA's
// stream memory operations (cuStreamWaitValue32) and a kernel polling a
// flag both do, and the next command of a held stream blocks one of the
// GPU's few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), behind which
// the copy that would release it can sit. Both deadlocked relay's
// executor on 4 H100s, which makes new streams for each collective. Every
// wait here is on an event already recorded, which cannot deadlock.
//
// As with NCCL, operations that must proceed together (both sides of an
// exchange) go in one batch: two ranks that each post a lone send and then
// a lone receive to each other wait for each other's receive forever (until
// the deadline, DeadlineExceeded).
//
// Failure. A batch that fails (size mismatch, a lost peer, Abort, its
// deadline while waiting for its peers) completes with the error; a copy
// already queued may still land in the receive buffer, so free buffers
// only after the communicator is aborted (as with NCCL).
#ifndef RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_
#define RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/buffer.h"
#include "runtime/request.h"

namespace relay {
namespace loopback_device {

// True where this build has CUDA and a GPU is visible: loopback then moves
// device memory. Asked once per process (the first loopback transport's
// capabilities), which initialises the CUDA runtime in a CUDA build.
bool Available();

// Whether `data` is device memory on the GPU it is declared on (for
// declared device memory; host memory is trusted as declared).
absl::Status CheckDeviceMemory(const ConstBuffer& data, absl::string_view what);

// An event shared by both sides of a message (destroyed with the last
// reference; CUDA allows that while it is pending).
using SharedEvent = std::shared_ptr<void>;

// One rank's copy lane: the stream of its GPU that copies its incoming
// messages (made by the rank's thread, on its current device, at its
// first device receive). The lock keeps one copy's waits, copy and
// writes together.
class CopyLane {
 public:
  ~CopyLane();
  // Makes the stream on the calling thread's current device (once).
  absl::Status Ensure();
  // Queues one message: waits for both sides' ready events, copies from
  // `src` to `dst`; returns the event recorded after the copy.
  absl::StatusOr<SharedEvent> Queue(void* send_ready, void* recv_ready,
                                    const ConstBuffer& src, const Buffer& dst);

 private:
  std::mutex mu_;
  void* stream_ = nullptr;  // Guarded by mu_.
  int device_ = -1;         // The stream's; guarded by mu_.
};

// A batch of device operations posted on one stream: the request the
// loopback transport returns for it.
class DeviceBatch final : public RequestState {
 public:
  // Records `ready` on `stream`; the batch then waits for `ops` matches.
  static absl::StatusOr<std::shared_ptr<DeviceBatch>> Post(size_t ops,
                                                           void* stream,
                                                           absl::Time deadline);
  ~DeviceBatch() override;

  void* ready() const { return ready_; }
  // Operation `op`'s copy is queued, finishing at `done` (null: nothing to
  // copy); the last one hands the batch to the watcher (or to whoever
  // waits on it).
  void Matched(const std::shared_ptr<DeviceBatch>& self, size_t op,
               SharedEvent done);
  // Blocks until every operation is matched (OK), the batch failed (its
  // error) or `deadline` passed (DeadlineExceeded, and the batch fails
  // with it: its operations stay posted, so abort before freeing).
  absl::Status AwaitMatched(absl::Time deadline);
  // Completes the batch if every copy has finished (or with the error of
  // an event that failed); true once done.
  bool Check();

  // Waits for the peers' posts (AwaitMatched, up to the request's
  // deadline) on the host, then orders `cuda_stream` after every copy.
  absl::Status StreamWait(void* cuda_stream) override;
  bool CancelledByTransportAbort() const override { return true; }

 protected:
  bool Progress() override;

 private:
  DeviceBatch(absl::Time deadline, size_t ops);

  void* ready_ = nullptr;
  std::atomic<size_t> unmatched_;
  std::mutex mu_;
  std::condition_variable matched_;   // Notified by Matched and on failure.
  // By op; guarded by mu_ until unmatched_ reaches 0, read-only after.
  std::vector<SharedEvent> done_;
};

}  // namespace loopback_device
}  // namespace relay

#endif  // RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_
