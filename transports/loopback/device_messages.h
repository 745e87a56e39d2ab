// File: transports/loopback/device_messages.h
//
// Device memory over the loopback transport: ranks are threads of one
// process, each driving a GPU (or several sharing one), and a message
// between two device buffers is one cudaMemcpyPeerAsync from the sender's
// buffer into the receiver's, queued on the GPUs so that no host thread
// waits for it. The semantics are NCCL's: an operation posted on a stream
// starts after the work queued there before it, and work queued there after
// it starts once it has finished; the host returns at once.
//
// How, for a batch of operations posted on stream S (Transport::PostBatch;
// a device Isend or Irecv is a batch of one on the legacy stream):
//   1. S records an event `ready` (the send data is written, the receive
//      buffer free), and then waits, for each operation, on a release word
//      in pinned host memory (runtime/device_runtime.h, StreamWaitWord: a
//      one-thread kernel that polls it). S is now held until the
//      operations' copies are done, while the host goes on.
//   2. When the fabric matches a send with its receive (whichever thread
//      posts second), it queues on the receiver's copy lane (a stream of
//      the receiver's GPU): wait for both sides' `ready`, the copy, then
//      writes of both operations' release words. Neither host waits.
//   3. The batch's request completes when every operation was matched and
//      every release word written: a thread that waits on it sees the words
//      (no driver call), and a watcher thread completes batches nobody
//      waits on, so OnDone callbacks run.
//   StreamWait(S') queues the same word waits on S' (no host block).
//
// As with NCCL, operations that must proceed together (both sides of an
// exchange) go in one batch: a lone send and a lone receive queued on one
// stream by each of two ranks in the same order hold each other's streams.
//
// Failure. A batch that fails (size mismatch, a lost peer, Abort) writes
// its release words from the host, so no stream stays held; a copy already
// queued may still land in the receive buffer, so free buffers only after
// the communicator is aborted (as with NCCL). Release words are never
// freed (a stream may read one after its batch is gone); a failed batch's
// are not reused either, since a copy still queued may write them later.
#ifndef RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_
#define RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/buffer.h"
#include "runtime/request.h"

namespace relay {
namespace loopback_device {

// True where this build has CUDA and a GPU is visible: loopback then moves
// device memory.
bool Available();

// Whether `data` is device memory on the GPU it is declared on (for
// declared device memory; host memory is trusted as declared).
absl::Status CheckDeviceMemory(const ConstBuffer& data, const char* what);

// A word in pinned host memory and the value that releases the streams
// waiting on it (runtime/device_runtime.h: StreamWaitWord).
struct ReleaseWord {
  uint32_t* word = nullptr;
  uint32_t value = 0;
  bool Reached() const;
  void WriteFromHost() const;
};

// One rank's copy lane: the stream of its GPU that copies its incoming
// messages (made by the rank's thread, on its current device, at its
// first device receive). The lock keeps one copy's waits, copy and
// writes together.
class CopyLane {
 public:
  ~CopyLane();
  // Makes the stream on the calling thread's current device (once).
  absl::Status Ensure();
  // Queues one message: waits for both sides' ready events, copies `bytes`
  // from `src` to `dst`, then writes both release words.
  absl::Status Queue(void* send_ready, void* recv_ready, const ConstBuffer& src,
                     const Buffer& dst, const ReleaseWord& send_release,
                     const ReleaseWord& recv_release);

 private:
  std::mutex mu_;
  void* stream_ = nullptr;  // Guarded by mu_.
  int device_ = -1;         // The stream's; guarded by mu_.
};

// A batch of device operations posted on one stream: the request the
// loopback transport returns for it.
class DeviceBatch final : public RequestState {
 public:
  // Records `ready` on `stream` and holds it on one release word per
  // operation; the batch then waits for `ops` matches (Matched()).
  static absl::StatusOr<std::shared_ptr<DeviceBatch>> Post(size_t ops,
                                                           void* stream,
                                                           absl::Time deadline);
  ~DeviceBatch() override;

  void* ready() const { return ready_; }
  const ReleaseWord& release(size_t op) const { return releases_[op]; }
  // One operation's copy is queued; the last one hands the batch to the
  // watcher (or to whoever waits on it).
  void Matched(std::shared_ptr<DeviceBatch> self);
  // Completes the batch if every copy has finished; true once done.
  bool Check();

  absl::Status StreamWait(void* cuda_stream) override;
  bool CancelledByTransportAbort() const override { return true; }

 protected:
  bool Progress() override;

 private:
  DeviceBatch(absl::Time deadline, size_t ops);

  void* ready_ = nullptr;
  std::vector<ReleaseWord> releases_;
  std::atomic<size_t> unmatched_;
};

}  // namespace loopback_device
}  // namespace relay

#endif  // RELAY_TRANSPORTS_LOOPBACK_DEVICE_MESSAGES_H_
