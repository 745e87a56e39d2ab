#include "transports/nccl/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/device_runtime.h"
#include "runtime/env_switch.h"
#include "runtime/status_macros.h"
#include "transports/nccl/finished_prefix.h"
#include "transports/nccl/nccl_status.h"
#include "transports/nccl/posted_list.h"
#include "transports/nccl/ring_edges.h"

namespace relay {
namespace {

constexpr char kUniqueIdKey[] = "nccl/unique_id";
// How often the watchdog looks at pending requests. It completes requests
// nobody waits on (so OnDone callbacks run), and its period bounds how late
// a timeout is noticed.
constexpr std::chrono::microseconds kWatchdogPeriod = std::chrono::milliseconds(1);
// Its shortest sleep between looks while requests are pending (see
// WatchdogLoop).
constexpr std::chrono::microseconds kWatchdogMinPause(50);
// The most pending requests the watchdog probes per look (their oldest
// first). It used to copy every pending request's event, and scan every
// one for its deadline, under the lock each enqueue takes too: O(queue)
// per look, every 50 us, with thousands queued when a loop issues faster
// than the GPU runs. Requests finish in queue order, so the next look
// takes the next batch. (On one H100 this did not move the 8 B loop
// measurably: the host's CUDA calls dominate there,
// bench/results/2026-11-25-nccl-host-path-h100.)
constexpr size_t kWatchdogProbeBatch = 256;
// How long Abort waits for a thread inside an NCCL enqueue call before
// aborting under it (that call may be blocked on a peer that is gone, and
// ncclCommAbort is what unblocks it).
constexpr auto kAbortGrace = std::chrono::milliseconds(200);

// Channels of the communicator that carries point-to-point (PostBatch:
// relay's own algorithms and user send/recv), unless RELAY_NCCL_P2P_CHANNELS
// says otherwise. NCCL stripes one send over at most (its point-to-point
// channels) / (ranks) channels until a part would pass 32 chunks (16 MB),
// and its point-to-point channels are as many as its collectives'
// (rounded up to a power of two: 32 on H100s with NV18). So on 4 ranks
// a send of 8-128 MB ran on 8 channels, at 118-161 GB/s, and only from
// 256 MB on 16 (298): the ring's messages (S / (ranks x lanes)) sat in the
// slow regime. With 64 channels, the same sends moved 153-279 GB/s on 4
// H100s (bench/results/2026-11-26-nccl-p2p-channels-h100). A second
// communicator keeps NCCL's native collectives on the channels NCCL chose.
constexpr int kDefaultP2pChannels = 64;
// The smallest message along the ring (rank r to r+1) that runs on its edge's
// communicator (ring_edges.h) rather than the point-to-point one. On 4
// H100s relay's ring (2 lanes) ran slower on the edges with 32 MB
// messages (0.63 of native all_reduce against 0.66) and faster with 64 MB
// (0.77 against 0.72) and 128 MB (0.84 against 0.76), though bare NCCL
// moved a ring step 12% faster on the edges at 32 MB too
// (bench/gpu/neighbour_exchange). Queuing a step on the edges (two
// kernels, two communicators' launch work) takes the host 30-46 us
// against 15-23 on one communicator: with small messages (2 GPUs, 8 MB)
// that is as long as the step itself. On 4 GPUs a 32 MB step runs about
// 120 us, so the host does not explain the loss there; it was measured
// with 16 reduction blocks, before the default became 32
// (bench/results/2026-11-26-nccl-ring-edges-h100).
constexpr size_t kDefaultRingEdgeBytes = size_t{48} << 20;

#ifdef RELAY_NCCL_DIAG
// Diagnostic switches, compiled in only with -DRELAY_NCCL_DIAG (bench/gpu/
// build.sh builds collectives_diag, a second bench/collectives, with them):
// they take parts of the per-call path out to measure what each costs
// (bench/gpu/nccl_latency.sh). Never in a normal build: some are unsafe.
//   RELAY_NCCL_DIAG_NOPTR=1  skip the pointer checks in CheckMemory
//                            (cached verdicts included)
//   RELAY_NCCL_DIAG_WATCHDOG_PAUSE_US=N
//                            the watchdog sleeps at least N us between
//                            looks at pending requests (its cudaEventQuery
//                            calls), instead of kWatchdogMinPause
//   RELAY_NCCL_DIAG_NO_WATCH=1
//                            requests are not handed to the watchdog: they
//                            complete only when waited on or tested (no
//                            OnDone without a waiter, no timeouts)
//   RELAY_NCCL_DIAG_PROFILE=1
//                            Launch times its parts on the host clock and
//                            each transport prints the mean per call to
//                            stderr when it is destroyed (LaunchProfile)
struct DiagSwitches {
  bool no_pointer_check = false;
  std::chrono::microseconds watchdog_min_pause{0};
  bool no_watch = false;
  bool profile = false;
};
const DiagSwitches& Diag() {
  static const DiagSwitches d = [] {
    DiagSwitches s;
    if (const char* v = std::getenv("RELAY_NCCL_DIAG_NOPTR")) s.no_pointer_check = *v == '1';
    if (const char* v = std::getenv("RELAY_NCCL_DIAG_WATCHDOG_PAUSE_US")) {
      s.watchdog_min_pause = std::chrono::microseconds(std::atoi(v));
    }
    if (const char* v = std::getenv("RELAY_NCCL_DIAG_NO_WATCH")) s.no_watch = *v == '1';
    if (const char* v = std::getenv("RELAY_NCCL_DIAG_PROFILE")) s.profile = *v == '1';
    return s;
  }();
  return d;
}

// RELAY_NCCL_DIAG_PROFILE: the host time of Launch's parts, summed over
// calls by the one thread that posts to a transport (the benchmarks'),
// printed when the transport's core is destroyed.
struct LaunchProfile {
  static constexpr int kParts = 6;
  static constexpr const char* kNames[kParts] = {
      "device", "lock", "event+order+enqueue", "done event",
      "unlock+request", "watch"};
  int64_t ns[kParts] = {};
  int64_t calls = 0;
  std::chrono::steady_clock::time_point last;
  void Start() { last = std::chrono::steady_clock::now(); }
  void Mark(int part) {
    const auto now = std::chrono::steady_clock::now();
    ns[part] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count();
    last = now;
  }
  void Print(int rank) const {
    if (calls == 0) return;
    std::string line = absl::StrCat("nccl launch profile, rank ", rank, ", ",
                                    calls, " calls, ns per call:");
    for (int i = 0; i < kParts; ++i) {
      absl::StrAppend(&line, " ", kNames[i], " ", ns[i] / calls);
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
};
#endif

absl::StatusOr<ncclDataType_t> NcclType(DataType t) {
  switch (t) {
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kUint32: return ncclUint32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint64: return ncclUint64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBfloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL type for dtype ", static_cast<int>(t)));
}

absl::StatusOr<ncclRedOp_t> NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL op for reduce op ", static_cast<int>(op)));
}

// cudaEvent_t recycling: creating an event costs more than recording one,
// and every operation needs one (its completion).
class EventPool {
 public:
  ~EventPool() {
    for (cudaEvent_t e : taken_) cudaEventDestroy(e);
    for (cudaEvent_t e : returned_) cudaEventDestroy(e);
  }
  // One caller at a time (Launch holds the transport's enqueue lock). It
  // takes the events given back since its last refill in one go: a lock
  // per event, shared with the threads giving them back (the watchdog's,
  // mostly), moved a cache line between cores on every call.
  absl::StatusOr<cudaEvent_t> Get() {
    if (taken_.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      taken_.swap(returned_);
    }
    if (!taken_.empty()) {
      cudaEvent_t e = taken_.back();
      taken_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
    return e;
  }
  // Any thread. A stream that waits on `e` captured its state at
  // cudaStreamWaitEvent, so `e` may be recorded again at once.
  void Put(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mu_);
    returned_.push_back(e);
  }

 private:
  std::vector<cudaEvent_t> taken_;  // Get's own.
  std::mutex mu_;
  std::vector<cudaEvent_t> returned_;  // Guarded by mu_.
};

class NcclRequest;

// Addresses CheckMemory found to be memory of this rank's GPU, so a buffer
// used again (a training loop's gradients, the stream executor's scratch
// from its pool) is not asked about again. cudaPointerGetAttributes was
// 2-3 us of each small collective on 2 H100s with ranks as threads
// (bench/results/2026-11-26-nccl-latency-h100), against a budget of 1 us
// for all that relay adds to a call. NCCL itself checks no pointers unless NCCL_CHECK_POINTERS=1.
// The cost: an address freed and then reused for another GPU's or pinned
// host memory passes unchecked, as it would in bare NCCL. Direct-mapped,
// lock-free: an entry is 0 or an address that was checked.
class CheckedPointers {
 public:
  bool Contains(const void* p) const {
    return slots_[Slot(p)].load(std::memory_order_relaxed) == Key(p);
  }
  void Add(const void* p) {
    slots_[Slot(p)].store(Key(p), std::memory_order_relaxed);
  }

 private:
  static constexpr size_t kSlots = 256;
  static uintptr_t Key(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  // Device buffers are at least 256-byte aligned; mix in the higher bits.
  static size_t Slot(const void* p) {
    const uintptr_t k = Key(p);
    return ((k >> 8) ^ (k >> 20) ^ (k >> 32)) % kSlots;
  }
  std::atomic<uintptr_t> slots_[kSlots] = {};
};

// A ring edge's two-rank communicator (ring_edges.h), and the stream its
// part of a batch runs on when the batch also uses another communicator.
struct EdgeLink {
  ncclComm_t comm = nullptr;
  int peer = 0;  // The other end's rank in `comm`.
  cudaStream_t stream = nullptr;
  cudaEvent_t joined = nullptr;  // Recorded on `stream` after its part.
};

// What a transport shares with its requests and its watchdog.
struct Core {
  int rank = 0;
  int size = 1;
  int device = 0;
  ncclComm_t comm = nullptr;
  // Point-to-point's communicator (kDefaultP2pChannels): its own, split
  // from `comm`, or `comm` itself when RELAY_NCCL_P2P_CHANNELS is 0. Both
  // queue on `stream` (but native collectives with StreamOrder::kOnStream
  // on the caller's), so every rank runs their operations in the order it
  // posted them.
  ncclComm_t p2p_comm = nullptr;
  bool OwnsP2pComm() const { return p2p_comm != nullptr && p2p_comm != comm; }
  // The ring edges' communicators (RELAY_NCCL_RING_EDGES; none where it
  // is off): messages along the ring (to the next rank, from the previous)
  // run on them instead of p2p_comm, so a send gets twice its channels on
  // 4 ranks. A batch using several communicators forks from `stream` into
  // the links' streams (after `forked`) and joins back, so its parts run
  // at once.
  EdgeLink to_next, from_prev;
  cudaEvent_t forked = nullptr;
  // Smaller messages stay on p2p_comm (RELAY_NCCL_RING_EDGE_BYTES). Both
  // ends of a message decide alike: NCCL's counts match exactly.
  size_t edge_min_bytes = 0;
  bool HasEdges() const { return to_next.comm != nullptr; }
  // The link that carries `op`, or null for p2p_comm.
  EdgeLink* LinkFor(const PeerOp& op) {
    if (!HasEdges() || op.data.bytes() < edge_min_bytes) return nullptr;
    switch (RouteOf(rank, size, op.kind == PeerOp::Kind::kSend, op.peer)) {
      case EdgeRoute::kToNext: return &to_next;
      case EdgeRoute::kFromPrev: return &from_prev;
      case EdgeRoute::kNone: break;
    }
    return nullptr;
  }
  // Every NCCL communicator this core made (no allocation: the watchdog
  // asks on every look).
  absl::InlinedVector<ncclComm_t, 4> OwnedComms() const {
    absl::InlinedVector<ncclComm_t, 4> all;
    for (ncclComm_t c : {comm, OwnsP2pComm() ? p2p_comm : nullptr,
                         to_next.comm, from_prev.comm}) {
      if (c != nullptr) all.push_back(c);
    }
    return all;
  }
  cudaStream_t stream = nullptr;
  int32_t* barrier_scratch = nullptr;  // One device int for barriers.
  // Recorded on a caller's stream for `stream` to wait on; guarded by
  // enqueue_mu. One is enough: a stream waiting on an event captures its
  // state at cudaStreamWaitEvent, so it may be recorded again at once.
  cudaEvent_t ready = nullptr;
  // The stream and completion event of the operation queued last; guarded
  // by enqueue_mu. An operation queued on another stream (a caller's, with
  // StreamOrder::kOnStream) first waits for it, so this transport's NCCL
  // work runs one operation at a time in posting order, as NCCL requires
  // of one communicator and advises across communicators on one GPU
  // (kernels of two that run at once may not both progress). The event
  // may have gone back to the pool with its request: a wait captures its
  // last record, which only a later Launch, under the same lock, changes.
  // A stream destroyed and a new one at the same address compare equal,
  // but CUDA frees a stream only once its work has finished.
  cudaStream_t last_stream = nullptr;
  cudaEvent_t last_done = nullptr;
  EventPool events;
  CheckedPointers checked_pointers;

  // NCCL communicators are not thread-safe: one enqueue at a time. Timed, so
  // Abort can give up on a caller stuck inside NCCL (kAbortGrace).
  std::timed_mutex enqueue_mu;
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;
  absl::Status abort_reason;  // Guarded by abort_mu.
  bool comm_aborted = false;  // Guarded by abort_mu: ncclCommAbort ran.

  // Requests posted since the watchdog last took them (posted_list.h):
  // Watch pushes, the watchdog takes them all at each look
  // (TakePostedLocked).
  PostedList<NcclRequest> posted;
  // Requests not yet complete, oldest first, for the watchdog.
  std::mutex watch_mu;
  std::condition_variable watch_cv;
  std::deque<std::shared_ptr<NcclRequest>> pending;  // Guarded by watch_mu.
  bool stopping = false;                              // Guarded by watch_mu.
  // Guarded by watch_mu: no pending request's deadline is earlier (some
  // may be later: requests that finished leave it until the next scan), so
  // the watchdog scans the queue for an expired request only once `now`
  // passes it, not on every look.
  absl::Time earliest_deadline = absl::InfiniteFuture();
  // The watchdog sleeps with nothing pending, and the next Watch must wake
  // it (only then: a wake-up is a system call, and one per operation cost
  // the enqueueing thread more than any CUDA call). Set under watch_mu;
  // seq_cst, as `posted` is: either the watchdog sees the new request
  // before it sleeps, or the poster sees it asleep.
  std::atomic<bool> watchdog_idle{false};
  // The watchdog's scratch, kept to avoid allocating on every look.
  std::vector<cudaEvent_t> probe_events;
  std::vector<std::shared_ptr<NcclRequest>> completing;
#ifdef RELAY_NCCL_DIAG
  LaunchProfile profile;  // Written by the posting thread.
#endif

  ~Core() {
#ifdef RELAY_NCCL_DIAG
    if (Diag().profile) profile.Print(rank);
#endif
    if (!comm_aborted) {
      for (ncclComm_t c : OwnedComms()) ncclCommDestroy(c);
    }
    for (EdgeLink* link : {&to_next, &from_prev}) {
      if (link->joined != nullptr) cudaEventDestroy(link->joined);
      if (link->stream != nullptr) cudaStreamDestroy(link->stream);
    }
    if (forked != nullptr) cudaEventDestroy(forked);
    if (barrier_scratch != nullptr) cudaFree(barrier_scratch);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status AbortReason() {
    std::lock_guard<std::mutex> lock(abort_mu);
    return abort_reason;
  }
  // Aborts the NCCL communicator once and fails every pending request with
  // `why`. Safe from any thread, the watchdog included.
  void Abort(absl::Status why);
  // Fails every request posted or pending with `why` (after an abort).
  void FailPending(const absl::Status& why);
  void Watch(std::shared_ptr<NcclRequest> request);
  // Moves `posted` to the back of `pending`, oldest first. Holds watch_mu.
  void TakePostedLocked();
  void WatchdogLoop();
};

// One queued operation: done when its completion event has fired on the
// transport's stream.
class NcclRequest final : public RequestState {
 public:
  NcclRequest(std::shared_ptr<Core> core, cudaEvent_t done_event,
              absl::Time deadline, const char* what, uint64_t sequence)
      : RequestState(deadline),
        core_(std::move(core)),
        done_event_(done_event),
        what_(what),
        sequence_(sequence) {}
  ~NcclRequest() override { core_->events.Put(done_event_); }

  absl::Status StreamWait(void* cuda_stream) override {
    if (done() && !status().ok()) return status();
    return CudaStatus(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda_stream),
                                          done_event_, 0),
                      "cudaStreamWaitEvent");
  }

  // Completes the request if its GPU work has finished; true if done now.
  bool Check() {
    if (done()) return true;
    const cudaError_t q = cudaEventQuery(done_event_);
    if (q == cudaErrorNotReady) return false;
    Complete(CudaStatus(q, "cudaEventQuery"));
    return true;
  }

  cudaEvent_t event() const { return done_event_; }

  // Core::posted's, while this request is on it (posted_list.h).
  NcclRequest* next_posted = nullptr;
  std::shared_ptr<NcclRequest> posted_ref;

  std::string Describe() const {
    return sequence_ == kNoSequence ? std::string(what_)
                                    : absl::StrCat(what_, " #", sequence_);
  }

  static constexpr uint64_t kNoSequence = ~uint64_t{0};

 protected:
  // Wait keeps polling while this returns true: the GPU work is moving and
  // only a poll sees it finish (the watchdog would, a period later).
  bool Progress() override {
    if (Check()) return true;
    return !core_->aborted.load(std::memory_order_relaxed);
  }

 private:
  const std::shared_ptr<Core> core_;
  const cudaEvent_t done_event_;
  const char* const what_;
  const uint64_t sequence_;
};

void Core::Watch(std::shared_ptr<NcclRequest> request) {
  posted.Push(std::move(request));
  if (watchdog_idle.load(std::memory_order_seq_cst)) {
    // Under the lock, the watchdog is either before its predicate (which
    // sees the push) or asleep (and woken).
    { std::lock_guard<std::mutex> lock(watch_mu); }
    watch_cv.notify_one();
  }
  // An abort that drained `posted` before this push fails it too.
  if (aborted.load(std::memory_order_seq_cst)) FailPending(AbortReason());
}

void Core::TakePostedLocked() {
  posted.TakeAll([this](std::shared_ptr<NcclRequest> r) {
    earliest_deadline = std::min(earliest_deadline, r->deadline());
    pending.push_back(std::move(r));
  });
}

void Core::Abort(absl::Status why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu);
    if (!aborted.load(std::memory_order_relaxed)) {
      abort_reason = why;
      aborted.store(true, std::memory_order_seq_cst);
      // Wait briefly for an enqueue in progress; one that stays is blocked
      // on a peer inside NCCL, and only the abort below frees it.
      const bool idle = enqueue_mu.try_lock_for(kAbortGrace);
      for (ncclComm_t c : OwnedComms()) ncclCommAbort(c);
      comm_aborted = true;
      if (idle) enqueue_mu.unlock();
    }
  }
  FailPending(why);
}

void Core::FailPending(const absl::Status& why) {
  std::deque<std::shared_ptr<NcclRequest>> failing;
  {
    std::lock_guard<std::mutex> lock(watch_mu);
    TakePostedLocked();
    failing.swap(pending);
  }
  for (const std::shared_ptr<NcclRequest>& r : failing) r->Complete(why);
}

void Core::WatchdogLoop() {
  // How long to sleep between looks while requests are pending: short
  // right after one completed (work is flowing, and a request nobody waits
  // on completes soon after its GPU work), doubling up to the period while
  // none does. Never zero: a watchdog that looked again at once spun on
  // cudaEventQuery while anything was queued, and its driver calls slowed
  // the thread enqueueing the next operation.
  auto min_pause = kWatchdogMinPause;
#ifdef RELAY_NCCL_DIAG
  if (Diag().watchdog_min_pause.count() > 0) min_pause = Diag().watchdog_min_pause;
#endif
  auto pause = min_pause;
  while (true) {
    std::shared_ptr<NcclRequest> expired;
    {
      std::unique_lock<std::mutex> lock(watch_mu);
      TakePostedLocked();
      if (pending.empty()) {
        earliest_deadline = absl::InfiniteFuture();
        watchdog_idle.store(true, std::memory_order_seq_cst);
        watch_cv.wait_for(lock, kWatchdogPeriod,
                          [&] { return stopping || !posted.empty(); });
        watchdog_idle.store(false, std::memory_order_relaxed);
        pause = min_pause;
      } else {
        watch_cv.wait_for(lock, pause, [&] { return stopping; });
      }
      if (stopping) return;
      TakePostedLocked();
      // Requests finish in the order they were queued: on one stream, or
      // each after the one before it (Core::last_done). So the boundary
      // between finished and not is found by a binary search over their
      // completion events, a few cudaEventQuery calls per look whatever
      // the queue's length. (One call per request
      // kept this thread in the driver, whose lock the thread enqueueing the
      // next operation needs too: profiled on an H100, the watchdog took a
      // third as much CPU as the enqueueing thread.)
      probe_events.clear();
      const size_t probed = std::min(pending.size(), kWatchdogProbeBatch);
      for (size_t i = 0; i < probed; ++i) {
        probe_events.push_back(pending[i]->event());
      }
      lock.unlock();
      // Only Abort removes requests other than this thread, and it sets
      // `aborted` first: the events stay valid unless that is set.
      // A failed query is reported by Check() on that request.
      const FinishedPrefixResult found =
          FinishedPrefix(probe_events.size(), [&](size_t i) {
            const cudaError_t q = cudaEventQuery(probe_events[i]);
            return q == cudaSuccess         ? ProbeResult::kFinished
                   : q == cudaErrorNotReady ? ProbeResult::kRunning
                                            : ProbeResult::kFailed;
          });
      const size_t finished = found.finished;
      const bool query_failed = found.failed;
      lock.lock();
      if (aborted.load(std::memory_order_acquire)) continue;
      completing.clear();
      for (size_t i = 0; i < finished && !pending.empty(); ++i) {
        completing.push_back(std::move(pending.front()));
        pending.pop_front();
      }
      if (query_failed && !pending.empty()) completing.push_back(pending.front());
      lock.unlock();
      // In queue order, outside the lock: completion runs callbacks, which
      // may post work.
      for (size_t i = 0; i < completing.size(); ++i) {
        if (i < finished) {
          completing[i]->Complete(absl::OkStatus());
        } else {
          completing[i]->Check();
        }
      }
      completing.clear();  // Requests may die here, outside the lock.
      lock.lock();
      if (query_failed) {
        while (!pending.empty() && pending.front()->done()) pending.pop_front();
      }
      pause = finished > 0 ? min_pause
                           : std::clamp<std::chrono::microseconds>(
                                 2 * pause, min_pause,
                                 std::max(kWatchdogPeriod, min_pause));
      const absl::Time now = FastNow();
      if (now > earliest_deadline) {
        earliest_deadline = absl::InfiniteFuture();
        for (const std::shared_ptr<NcclRequest>& r : pending) {
          if (r->done()) continue;
          if (now > r->deadline()) {
            expired = r;
            break;
          }
          earliest_deadline = std::min(earliest_deadline, r->deadline());
        }
      }
    }
    if (aborted.load(std::memory_order_acquire)) continue;
    if (expired != nullptr) {
      Abort(absl::DeadlineExceededError(absl::StrCat(
          "nccl: ", expired->Describe(), " on rank ", rank,
          " did not complete within its timeout; the NCCL communicator was "
          "aborted (a peer stopped participating or is too slow)")));
      continue;
    }
    ncclResult_t async = ncclSuccess;
    ncclComm_t failed = nullptr;
    {
      // ncclCommGetAsyncError must not race ncclCommAbort.
      std::lock_guard<std::mutex> lock(abort_mu);
      for (ncclComm_t c : OwnedComms()) {
        if (comm_aborted || failed != nullptr) continue;
        if (ncclCommGetAsyncError(c, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          failed = c;
        }
      }
    }
    if (failed != nullptr) {
      absl::Status s = NcclStatus(async, "nccl (asynchronous error)", failed);
      Abort(absl::Status(
          absl::IsInvalidArgument(s) ? absl::StatusCode::kInternal : s.code(),
          absl::StrCat(s.message(), " on rank ", rank)));
    }
  }
}

// What a core needs besides its NCCL communicator: the transport's stream,
// the event it orders callers' streams with, and the barrier's scratch.
absl::Status PrepareCore(Core& core) {
  // Non-blocking: ordered with the callers' streams by events only.
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaStreamCreateWithFlags(&core.stream, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags"));
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&core.ready, cudaEventDisableTiming),
      "cudaEventCreateWithFlags"));
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(reinterpret_cast<void**>(&core.barrier_scratch),
                 sizeof(int32_t)),
      "cudaMalloc"));
  return CudaStatus(cudaMemset(core.barrier_scratch, 0, sizeof(int32_t)),
                    "cudaMemset");
}

// RELAY_NCCL_P2P_CHANNELS, else kDefaultP2pChannels (0: no communicator
// of its own); InvalidArgument for anything but a count of 0-1024.
absl::StatusOr<int> P2pChannelsFromEnvironment() {
  const char* value = std::getenv("RELAY_NCCL_P2P_CHANNELS");
  if (value == nullptr || *value == '\0') return kDefaultP2pChannels;
  int channels = 0;
  if (!absl::SimpleAtoi(value, &channels) || channels < 0 || channels > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELAY_NCCL_P2P_CHANNELS='", value,
        "' is not a channel count (0-1024; 0: point-to-point on the "
        "collectives' NCCL communicator)"));
  }
  return channels;
}

// Gives `core` (whose `comm` is made) its point-to-point communicator: a
// split of `comm` with every rank in it, asking NCCL for the channels
// RELAY_NCCL_P2P_CHANNELS says (ncclConfig_t::minCTAs and maxCTAs; NCCL
// caps them at its limit, 64 in 2.28). Collective over the ranks of
// `comm`, as making `comm` was.
absl::Status MakeP2pComm(Core& core) {
  RELAY_ASSIGN_OR_RETURN(const int channels, P2pChannelsFromEnvironment());
  if (channels == 0) {
    core.p2p_comm = core.comm;
    return absl::OkStatus();
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Both bounds: NCCL 2.28 refuses a minimum with the maximum left unset
  // (it compares the minimum with the unset marker).
  config.minCTAs = channels;
  config.maxCTAs = channels;
  config.commName = "relay point-to-point";
  absl::Status made = NcclStatus(
      ncclCommSplit(core.comm, 0, core.rank, &core.p2p_comm, &config),
      "ncclCommSplit (point-to-point communicator)", core.comm);
  if (!made.ok()) {
    return absl::Status(
        made.code(),
        absl::StrCat(made.message(), " (RELAY_NCCL_P2P_CHANNELS=0 runs "
                                     "point-to-point on the collectives' "
                                     "communicator instead)"));
  }
  return absl::OkStatus();
}

// RELAY_NCCL_RING_EDGES: whether a communicator of `size` ranks gets its
// ring edges' communicators. 1: from 2 ranks (on 2 a send already gets 32
// channels of the point-to-point communicator, so they gain most from 3).
// 0 or unset: never. Off by default: they speed up only relay's own
// algorithms over NCCL, which a caller asks for by name (kAuto picks NCCL's
// native collectives), and they cost every transport about 0.8 GB of GPU
// memory per edge on H100s (bench/gpu/edge_memory.sh: 1.7 GB more per GPU
// with both edges, bench/results/2026-11-26-nccl-ring-edges-h100) and
// about a second to connect. InvalidArgument for anything else.
absl::StatusOr<bool> RingEdgesFromEnvironment(int size) {
  absl::StatusOr<bool> wanted =
      ReadEnvSwitch("RELAY_NCCL_RING_EDGES", /*default_value=*/false,
                    "ring-edge communicators from 2 ranks");
  if (!wanted.ok()) return wanted.status();
  return *wanted && size >= 2;
}

// RELAY_NCCL_RING_EDGE_BYTES, else kDefaultRingEdgeBytes; InvalidArgument
// for anything but a byte count.
absl::StatusOr<size_t> RingEdgeBytesFromEnvironment() {
  const char* value = std::getenv("RELAY_NCCL_RING_EDGE_BYTES");
  if (value == nullptr || *value == '\0') return kDefaultRingEdgeBytes;
  uint64_t bytes = 0;
  if (!absl::SimpleAtoi(value, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RELAY_NCCL_RING_EDGE_BYTES='", value,
        "' is not a byte count (the smallest message a ring edge carries)"));
  }
  return static_cast<size_t>(bytes);
}

// Gives `core` (prepared, with `comm`) its ring edges' communicators where
// RELAY_NCCL_RING_EDGES asks for them: ncclCommSplit rounds as
// ring_edges.h plans them, each with the point-to-point communicator's
// channels, then one byte on every edge, in the ring's direction (the only
// one an edge carries). NCCL connects a peer's channels in the call that
// first uses them and waits there for the peer to connect too, so a first
// ring step of sends would wait around the ring (rank r on rank r+1, busy
// connecting to r+2); connected here, edge by edge in the rounds' order,
// both ends reach each edge together. Collective over the ranks of `comm`.
absl::Status MakeEdgeComms(Core& core) {
  // Both settings checked whatever the size, so a bad one shows at once.
  RELAY_ASSIGN_OR_RETURN(const bool wanted, RingEdgesFromEnvironment(core.size));
  RELAY_ASSIGN_OR_RETURN(core.edge_min_bytes, RingEdgeBytesFromEnvironment());
  if (!wanted) return absl::OkStatus();
  RELAY_ASSIGN_OR_RETURN(const int channels, P2pChannelsFromEnvironment());
  const auto failed = [](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(s.message(),
                                               " (RELAY_NCCL_RING_EDGES=0 runs "
                                               "without ring-edge communicators)"));
  };
  // This rank's edges in the rounds' order, and its end of each.
  absl::InlinedVector<std::pair<EdgeLink*, bool>, 2> joined_edges;  // sends?
  for (int round = 0; round < EdgeSplitRounds(core.size); ++round) {
    const EdgeSplit split = EdgeSplitFor(core.rank, core.size, round);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (channels > 0) {
      config.minCTAs = channels;
      config.maxCTAs = channels;
    }
    config.commName = "relay ring edge";
    ncclComm_t comm = nullptr;
    absl::Status made = NcclStatus(
        ncclCommSplit(core.comm, split.edge < 0 ? NCCL_SPLIT_NOCOLOR : split.edge,
                      split.key, &comm, &config),
        "ncclCommSplit (ring edge)", core.comm);
    if (!made.ok()) return failed(made);
    if (split.edge < 0) continue;
    EdgeLink& link = split.edge == core.rank ? core.to_next : core.from_prev;
    link.comm = comm;  // Destroyed with the core from here on.
    link.peer = 1 - split.key;
    // The lower end (key 0, this edge's "to next") sends.
    joined_edges.push_back({&link, split.key == 0});
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&link.stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags"));
    RELAY_RETURN_IF_ERROR(CudaStatus(
        cudaEventCreateWithFlags(&link.joined, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
  }
  RELAY_RETURN_IF_ERROR(CudaStatus(
      cudaEventCreateWithFlags(&core.forked, cudaEventDisableTiming),
      "cudaEventCreateWithFlags"));
  char* scratch = reinterpret_cast<char*>(core.barrier_scratch);
  for (const auto& [link, sends] : joined_edges) {
    const absl::Status s =
        sends ? NcclStatus(ncclSend(scratch, 1, ncclUint8, link->peer, link->comm, core.stream),
                           "ncclSend (connecting a ring edge)", link->comm)
              : NcclStatus(ncclRecv(scratch + 1, 1, ncclUint8, link->peer, link->comm,
                                    core.stream),
                           "ncclRecv (connecting a ring edge)", link->comm);
    if (!s.ok()) return failed(s);
  }
  return CudaStatus(cudaStreamSynchronize(core.stream),
                    "cudaStreamSynchronize (ring edges connected)");
}

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(std::shared_ptr<Core> core) : core_(std::move(core)) {
    watchdog_ = std::thread([core = core_.get()] { core->WatchdogLoop(); });
  }
  ~NcclTransport() override {
    {
      std::lock_guard<std::mutex> lock(core_->watch_mu);
      core_->stopping = true;
    }
    core_->watch_cv.notify_all();
    watchdog_.join();
    // Requests still pending are failed by the owner's Abort; the core lives
    // on with them.
  }

  absl::string_view name() const override { return "nccl"; }
  int rank() const override { return core_->rank; }
  int size() const override { return core_->size; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = false;
    caps.device_memory = true;
    caps.native_collectives = true;
    caps.matches_tags = false;
    caps.stream_ordered = true;
    caps.forward_ring_links = core_->HasEdges();
    caps.latency_us = 10;
    caps.bandwidth_gbps = 100;
    return caps;
  }

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    const PeerOp op{PeerOp::Kind::kSend, peer, tag,
                    Buffer{const_cast<void*>(data.data), data.count,
                           data.dtype, data.device}};
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    const PeerOp op{PeerOp::Kind::kRecv, peer, tag, data};
    return PostBatch({&op, 1}, nullptr, deadline);
  }
  absl::StatusOr<Request> PostBatch(absl::Span<const PeerOp> ops,
                                    void* cuda_stream,
                                    absl::Time deadline) override;
  absl::StatusOr<Request> Collective(const CollectiveArgs& args) override;
  absl::StatusOr<std::unique_ptr<Transport>> Split(int color,
                                                   int key) override;

  void Abort(absl::Status reason) override { core_->Abort(std::move(reason)); }

 private:
  absl::Status CheckMemory(const ConstBuffer& b,
                           absl::string_view what) const override;
  // The driver's verdict on one address (cudaPointerGetAttributes).
  absl::Status CheckPointer(const void* data, absl::string_view what) const;
  // Queues `enqueue(stream)` (NCCL calls on `stream`: the transport's, or
  // with kOnStream `user_stream` itself) after the work on `user_stream`,
  // and returns the request of what it queued.
  template <typename Enqueue>
  absl::StatusOr<Request> Launch(void* user_stream, StreamOrder order,
                                 absl::Time deadline,
                                 const char* what, uint64_t sequence,
                                 Enqueue&& enqueue);
  absl::Status EnqueueCollective(const CollectiveArgs& args,
                                 cudaStream_t stream);
  // A batch's sends and receives, on `stream` (PostBatch's Launch).
  absl::Status EnqueueBatch(absl::Span<const PeerOp> ops, cudaStream_t stream);
  // The ops of `ops` whose route (routes[k], as Core::LinkFor gives it)
  // is `link`, in one NCCL group on `stream`.
  absl::Status EnqueueGroup(absl::Span<const PeerOp> ops,
                            absl::Span<EdgeLink* const> routes, EdgeLink* link,
                            cudaStream_t stream);

  std::shared_ptr<Core> core_;
  std::thread watchdog_;
};

absl::Status NcclTransport::CheckMemory(const ConstBuffer& b,
                                        absl::string_view what) const {
  if (b.count == 0) return absl::OkStatus();
  if (b.device != Device::Cuda(core_->device)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ", what, " is declared on ", b.device.ToString(),
        ", but this rank's communicator runs on cuda:", core_->device));
  }
#ifdef RELAY_NCCL_DIAG
  if (Diag().no_pointer_check) return absl::OkStatus();
#endif
  if (core_->checked_pointers.Contains(b.data)) return absl::OkStatus();
  RELAY_RETURN_IF_ERROR(CheckPointer(b.data, what));
  core_->checked_pointers.Add(b.data);
  return absl::OkStatus();
}

absl::Status NcclTransport::CheckPointer(const void* data,
                                         absl::string_view what) const {
  cudaPointerAttributes attr;
  const cudaError_t e = cudaPointerGetAttributes(&attr, data);
  if (e != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky-free error state.
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ", what, " (", absl::StrFormat("%p", data), ") is not memory CUDA knows: ",
        cudaGetErrorString(e)));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ", what, " (", absl::StrFormat("%p", data), ") is declared as ", Device::Cuda(core_->device).ToString(),
        " but is host memory"));
  }
  if (attr.device != core_->device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: ", what, " (", absl::StrFormat("%p", data), ") lives on cuda:", attr.device,
        ", but this rank's communicator runs on cuda:", core_->device));
  }
  return absl::OkStatus();
}

template <typename Enqueue>
absl::StatusOr<Request> NcclTransport::Launch(void* user_stream,
                                              StreamOrder order,
                                              absl::Time deadline,
                                              const char* what,
                                              uint64_t sequence,
                                              Enqueue&& enqueue) {
  Core& c = *core_;
#ifdef RELAY_NCCL_DIAG
  const bool profiling = Diag().profile;
  auto mark = [&](int part) {
    if (profiling) c.profile.Mark(part);
  };
  if (profiling) {
    c.profile.Start();
    ++c.profile.calls;
  }
#else
  auto mark = [](int) {};
#endif
  // Events and stream belong to the communicator's GPU; the calling thread
  // may have another one current.
  device_runtime::ScopedDevice on_device(c.device);
  mark(0);
  cudaEvent_t done = nullptr;
  absl::Status queued;
  absl::Status aborted;  // The abort's reason, once aborted.
  {
    std::lock_guard<std::timed_mutex> lock(c.enqueue_mu);
    mark(1);
    if (c.aborted.load(std::memory_order_acquire)) {
      // Transport::Abort's contract: a later post completes at once with
      // the abort's reason (a peer's loss stays a loss), not a misuse error.
      aborted = c.AbortReason();
    } else if (absl::StatusOr<cudaEvent_t> event = c.events.Get(); !event.ok()) {
      queued = event.status();
    } else {
      done = *event;
      // Ordered after the caller's stream by an event, the legacy default
      // stream included: the transport's stream is non-blocking, so work
      // queued later on the caller's stream does not wait for this
      // operation (that is StreamWait's job). A blocking stream saved the
      // event on the legacy stream, but then every later kernel there waited
      // for communication: no overlap, and a host copy from pageable memory
      // (which waits for the legacy stream) blocked while a receive waited
      // for its peer (seen in torch, whose default stream is the legacy one).
      cudaStream_t caller = user_stream == nullptr
                                ? cudaStreamLegacy
                                : static_cast<cudaStream_t>(user_stream);
      // Always an event and a wait, even when the caller's stream has
      // nothing left to run. Asking first (cudaStreamIsCapturing and
      // cudaStreamQuery, then no event when idle) cost more than it saved:
      // on 2 H100s, 2-3 us a call against the event's 0.4 us
      // (bench/results/2026-11-26-nccl-latency-h100).
      // StreamOrder::kOnStream: on the caller's stream itself, as bare NCCL
      // is called; it still runs after this transport's previous operation
      // (Core::last_done, below).
      cudaStream_t stream = order == StreamOrder::kOnStream ? caller : c.stream;
      if (stream != caller) {
        queued = CudaStatus(cudaEventRecord(c.ready, caller),
                            "cudaEventRecord (caller's stream)");
        if (queued.ok()) {
          queued = CudaStatus(cudaStreamWaitEvent(stream, c.ready, 0),
                              "cudaStreamWaitEvent");
        }
      }
      if (queued.ok() && c.last_done != nullptr && c.last_stream != stream) {
        queued = CudaStatus(cudaStreamWaitEvent(stream, c.last_done, 0),
                            "cudaStreamWaitEvent (the previous operation)");
      }
      if (queued.ok()) queued = enqueue(stream);
      mark(2);
      if (queued.ok()) {
        queued = CudaStatus(cudaEventRecord(done, stream), "cudaEventRecord");
      }
      mark(3);
      if (queued.ok()) {
        c.last_stream = stream;
        c.last_done = done;
      }
    }
  }
  if (!aborted.ok()) return Request::Completed(std::move(aborted));
  if (!queued.ok()) {
    if (done != nullptr) c.events.Put(done);
    return queued;
  }
  auto request =
      std::make_shared<NcclRequest>(core_, done, deadline, what, sequence);
  mark(4);
#ifdef RELAY_NCCL_DIAG
  if (Diag().no_watch) return Request(std::move(request));
#endif
  c.Watch(request);
  mark(5);
  return Request(std::move(request));
}

absl::StatusOr<Request> NcclTransport::PostBatch(absl::Span<const PeerOp> ops,
                                                 void* cuda_stream,
                                                 absl::Time deadline) {
  for (const PeerOp& op : ops) {
    if (op.peer < 0 || op.peer >= core_->size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl: peer ", op.peer, " is out of range [0, ", core_->size, ")"));
    }
    RELAY_RETURN_IF_ERROR(CheckMemory(
        op.data, op.kind == PeerOp::Kind::kSend ? "send buffer" : "recv buffer"));
  }
  const char* what = ops.size() == 1
                         ? (ops[0].kind == PeerOp::Kind::kSend ? "send" : "recv")
                         : "batched send/recv";
  return Launch(cuda_stream, StreamOrder::kAfterStream, deadline, what,
                NcclRequest::kNoSequence,
                [&](cudaStream_t stream) { return EnqueueBatch(ops, stream); });
}

// One NCCL group on `stream` of the ops whose route is `link` (null: the
// point-to-point communicator); an edge's peer is its rank in the edge's
// communicator.
absl::Status NcclTransport::EnqueueGroup(absl::Span<const PeerOp> ops,
                                         absl::Span<EdgeLink* const> routes,
                                         EdgeLink* link, cudaStream_t stream) {
  Core& c = *core_;
  ncclComm_t comm = link != nullptr ? link->comm : c.p2p_comm;
  RELAY_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart", comm));
  absl::Status s;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (routes[k] != link) continue;
    const PeerOp& op = ops[k];
    // An empty message is still a message (a barrier's token): NCCL would
    // skip a 0-byte send, so it moves one byte of the barrier scratch
    // instead.
    void* data = op.data.bytes() > 0 ? op.data.data : c.barrier_scratch;
    const size_t bytes = std::max<size_t>(op.data.bytes(), 1);
    const int peer = link != nullptr ? link->peer : op.peer;
    const ncclResult_t r =
        op.kind == PeerOp::Kind::kSend
            ? ncclSend(data, bytes, ncclUint8, peer, comm, stream)
            : ncclRecv(data, bytes, ncclUint8, peer, comm, stream);
    if (s.ok()) {
      s = NcclStatus(r, op.kind == PeerOp::Kind::kSend ? "ncclSend" : "ncclRecv",
                     comm);
    }
  }
  // A group is always closed, even after a failed call.
  const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd", comm);
  return s.ok() ? end : s;
}

absl::Status NcclTransport::EnqueueBatch(absl::Span<const PeerOp> ops,
                                         cudaStream_t stream) {
  Core& c = *core_;
  // Each op's communicator (null: the point-to-point one), and which of
  // them the batch uses.
  absl::InlinedVector<EdgeLink*, 8> routes(ops.size());
  bool uses_p2p = false;
  EdgeLink* const links[] = {&c.to_next, &c.from_prev};
  bool uses_link[] = {false, false};
  for (size_t k = 0; k < ops.size(); ++k) {
    routes[k] = c.LinkFor(ops[k]);
    uses_p2p |= routes[k] == nullptr;
    for (int i = 0; i < 2; ++i) uses_link[i] |= routes[k] == links[i];
  }
  if (uses_p2p + uses_link[0] + uses_link[1] <= 1) {
    // One communicator: on `stream` itself, no fork, no join.
    return EnqueueGroup(ops, routes, ops.empty() ? nullptr : routes[0], stream);
  }
  // Several communicators: each edge's part on its link's stream, so the
  // parts run at once. They must: a ring step's send finishes only once the
  // next rank's receive runs, and one stream would queue each rank's
  // receive behind its own send, all around the ring. So both kernels must
  // be resident at once: with 64-channel edges they take at most 128 of an
  // H100's 132 multiprocessors. The join puts `stream`, and so the batch's
  // completion event, after all of it.
  RELAY_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(c.forked, stream),
                                   "cudaEventRecord (fork)"));
  for (int i = 0; i < 2; ++i) {
    if (!uses_link[i]) continue;
    EdgeLink* link = links[i];
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(link->stream, c.forked, 0),
                                     "cudaStreamWaitEvent (fork)"));
    RELAY_RETURN_IF_ERROR(EnqueueGroup(ops, routes, link, link->stream));
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(link->joined, link->stream),
                                     "cudaEventRecord (join)"));
  }
  if (uses_p2p) {
    RELAY_RETURN_IF_ERROR(EnqueueGroup(ops, routes, nullptr, stream));
  }
  for (int i = 0; i < 2; ++i) {
    if (!uses_link[i]) continue;
    RELAY_RETURN_IF_ERROR(CudaStatus(cudaStreamWaitEvent(stream, links[i]->joined, 0),
                                     "cudaStreamWaitEvent (join)"));
  }
  return absl::OkStatus();
}

absl::Status NcclTransport::EnqueueCollective(const CollectiveArgs& args,
                                              cudaStream_t stream) {
  Core& c = *core_;
  const DataType dtype =
      args.send.count > 0 ? args.send.dtype : args.recv.dtype;
  RELAY_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
  ncclRedOp_t op = ncclSum;
  if (IsReduction(args.kind)) {
    RELAY_ASSIGN_OR_RETURN(op, NcclOp(args.op));
  }
  const size_t esize = DataTypeSize(dtype);
  const int n = c.size;
  // all_to_all, gather and scatter are grouped sends and receives on
  // `comm`. all_to_all runs on the point-to-point communicator, whose sends
  // get twice the channels (RELAY_NCCL_P2P_CHANNELS): 1.06-1.16x the
  // algbw from 4 MB on 2 H100s. gather (and so scatter) came out mixed there
  // (0.87-0.95x at 4-16 MB, 1.02-1.03x from 64 MB) and stays on the
  // collectives' communicator
  // (bench/results/2026-11-26-nccl-p2p-comm-collectives-h100).
  auto grouped = [&](ncclComm_t comm, auto&& body) -> absl::Status {
    RELAY_RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart", comm));
    absl::Status s = body();
    const absl::Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd", comm);
    return s.ok() ? end : s;
  };
  // Keeps the first failure of a sequence of calls inside a group.
  auto first = [](absl::Status* s, absl::Status next) {
    if (s->ok()) *s = std::move(next);
  };
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      return NcclStatus(ncclAllReduce(args.send.data, args.recv.data,
                                      args.recv.count, type, op, c.comm,
                                      stream),
                        "ncclAllReduce", c.comm);
    case CollectiveKind::kBroadcast:
      return NcclStatus(ncclBroadcast(args.send.data, args.recv.data,
                                      args.recv.count, type, args.root, c.comm,
                                      stream),
                        "ncclBroadcast", c.comm);
    case CollectiveKind::kReduce:
      return NcclStatus(ncclReduce(args.send.data, args.recv.data,
                                   args.send.count, type, op, args.root, c.comm,
                                   stream),
                        "ncclReduce", c.comm);
    case CollectiveKind::kAllGather:
      return NcclStatus(ncclAllGather(args.send.data, args.recv.data,
                                      args.send.count, type, c.comm, stream),
                        "ncclAllGather", c.comm);
    case CollectiveKind::kReduceScatter:
      return NcclStatus(ncclReduceScatter(args.send.data, args.recv.data,
                                          args.recv.count, type, op, c.comm,
                                          stream),
                        "ncclReduceScatter", c.comm);
    case CollectiveKind::kAllToAll: {
      const size_t block = args.send.count / n;
      return grouped(c.p2p_comm, [&] {
        absl::Status s;
        for (int j = 0; j < n; ++j) {
          first(&s, NcclStatus(ncclSend(static_cast<const char*>(args.send.data) +
                                            j * block * esize,
                                        block, type, j, c.p2p_comm, stream),
                               "ncclSend", c.p2p_comm));
          first(&s, NcclStatus(ncclRecv(static_cast<char*>(args.recv.data) +
                                            j * block * esize,
                                        block, type, j, c.p2p_comm, stream),
                               "ncclRecv", c.p2p_comm));
        }
        return s;
      });
    }
    case CollectiveKind::kGather: {
      const size_t block = args.send.count;
      return grouped(c.comm, [&] {
        absl::Status s;
        if (c.rank != args.root) {
          return NcclStatus(ncclSend(args.send.data, block, type, args.root,
                                     c.comm, stream),
                            "ncclSend", c.comm);
        }
        for (int j = 0; j < n; ++j) {
          char* slot = static_cast<char*>(args.recv.data) + j * block * esize;
          if (j != c.rank) {
            first(&s, NcclStatus(ncclRecv(slot, block, type, j, c.comm, stream),
                                 "ncclRecv", c.comm));
          } else if (slot != args.send.data && block > 0) {
            first(&s, CudaStatus(cudaMemcpyAsync(slot, args.send.data,
                                                 block * esize,
                                                 cudaMemcpyDeviceToDevice,
                                                 stream),
                                 "cudaMemcpyAsync"));
          }
        }
        return s;
      });
    }
    case CollectiveKind::kScatter: {
      const size_t block = args.recv.count;
      return grouped(c.comm, [&] {
        absl::Status s;
        if (c.rank != args.root) {
          return NcclStatus(ncclRecv(args.recv.data, block, type, args.root,
                                     c.comm, stream),
                            "ncclRecv", c.comm);
        }
        for (int j = 0; j < n; ++j) {
          const char* slot =
              static_cast<const char*>(args.send.data) + j * block * esize;
          if (j != c.rank) {
            first(&s, NcclStatus(ncclSend(slot, block, type, j, c.comm, stream),
                                 "ncclSend", c.comm));
          } else if (slot != args.recv.data && block > 0) {
            first(&s, CudaStatus(cudaMemcpyAsync(args.recv.data, slot,
                                                 block * esize,
                                                 cudaMemcpyDeviceToDevice,
                                                 stream),
                                 "cudaMemcpyAsync"));
          }
        }
        return s;
      });
    }
    case CollectiveKind::kBarrier:
      return NcclStatus(ncclAllReduce(c.barrier_scratch, c.barrier_scratch, 1,
                                      ncclInt32, ncclSum, c.comm, stream),
                        "ncclAllReduce (barrier)", c.comm);
  }
  return absl::InvalidArgumentError("nccl: unknown collective kind");
}

absl::StatusOr<Request> NcclTransport::Collective(const CollectiveArgs& args) {
  // The communicator checked the buffers (CheckMemory) before calling.
  const char* what = CollectiveName(args.kind).data();  // NUL-terminated.
  return Launch(args.stream, args.stream_order, args.deadline, what,
                args.sequence,
                [&](cudaStream_t stream) {
                  return EnqueueCollective(args, stream);
                });
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Split(int color,
                                                                int key) {
  Core& c = *core_;
  device_runtime::ScopedDevice on_device(c.device);
  ncclComm_t comm = nullptr;
  {
    // The parent's communicator is not thread-safe either; an Abort gives
    // up on this lock after kAbortGrace and its ncclCommAbort unblocks a
    // split stuck on a rank that never came.
    std::lock_guard<std::timed_mutex> lock(c.enqueue_mu);
    if (c.aborted.load(std::memory_order_acquire)) return c.AbortReason();
    RELAY_RETURN_IF_ERROR(NcclStatus(
        ncclCommSplit(c.comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                      &comm, nullptr),
        "ncclCommSplit", c.comm));
  }
  if (color < 0) return std::unique_ptr<Transport>();
  auto child = std::make_shared<Core>();
  child->device = c.device;
  child->comm = comm;  // Destroyed with the core, whatever fails below.
  RELAY_RETURN_IF_ERROR(
      NcclStatus(ncclCommUserRank(comm, &child->rank), "ncclCommUserRank"));
  RELAY_RETURN_IF_ERROR(
      NcclStatus(ncclCommCount(comm, &child->size), "ncclCommCount"));
  RELAY_RETURN_IF_ERROR(MakeP2pComm(*child));
  RELAY_RETURN_IF_ERROR(PrepareCore(*child));
  RELAY_RETURN_IF_ERROR(MakeEdgeComms(*child));
  return std::unique_ptr<Transport>(new NcclTransport(std::move(child)));
}

int VisibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace

bool NcclTransportFactory::IsViable() const {
  static const bool viable = VisibleDevices() > 0;
  return viable;
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransportFactory::Connect(
    const TransportConfig& config) {
  if (!IsViable()) {
    return absl::FailedPreconditionError(
        "nccl: no CUDA device is visible (cudaGetDeviceCount)");
  }
  auto core = std::make_shared<Core>();
  core->rank = config.rank;
  core->size = config.size;
  RELAY_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&core->device), "cudaGetDevice"));

  ncclUniqueId id;
  if (config.rank == 0) {
    RELAY_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    RELAY_RETURN_IF_ERROR(config.store->Set(
        kUniqueIdKey,
        absl::string_view(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    RELAY_ASSIGN_OR_RETURN(std::string bytes,
                           config.store->Get(kUniqueIdKey, config.timeout));
    if (bytes.size() != sizeof(id)) {
      return absl::InternalError(absl::StrCat(
          "nccl: the unique id in the store has ", bytes.size(),
          " bytes, expected ", sizeof(id), " (a different NCCL version?)"));
    }
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  RELAY_RETURN_IF_ERROR(PrepareCore(*core));
  RELAY_RETURN_IF_ERROR(NcclStatus(
      ncclCommInitRank(&core->comm, config.size, id, config.rank),
      "ncclCommInitRank"));
  RELAY_RETURN_IF_ERROR(MakeP2pComm(*core));
  RELAY_RETURN_IF_ERROR(MakeEdgeComms(*core));
  return std::unique_ptr<Transport>(new NcclTransport(std::move(core)));
}

}  // namespace relay
