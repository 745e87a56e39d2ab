#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "runtime/config.h"
#include "runtime/status_macros.h"
#include "runtime/fast_clock.h"
#include "runtime/shared_segment.h"
#include "runtime/slot_exchange.h"
#include "runtime/thread_name.h"
#include "transports/ucx/stand_aside.h"
#include "transports/ucx/ucx_status.h"

namespace relay {
namespace {

constexpr int kTagBits = 64 - kUcxRankBits;  // 44: relay's tag, folded.
constexpr uint64_t kFoldedCollectiveBit = uint64_t{1} << (kTagBits - 1);
constexpr uint64_t kFoldedTagMask = kFoldedCollectiveBit - 1;
constexpr uint64_t kFullMask = ~uint64_t{0};

// The UCX tag for a message from `sender` with relay tag `tag` (layout in the
// header). False if a user tag does not fit.
bool FoldTag(int sender, Tag tag, uint64_t* out) {
  uint64_t folded;
  if (tag & kCollectiveTagBit) {
    // Low 27 bits of the sequence and the 16-bit lane: a sequence number
    // repeats only 2^27 collectives later, long after its messages are gone.
    folded = kFoldedCollectiveBit | (tag & kFoldedTagMask);
  } else {
    if (tag > static_cast<uint64_t>(kUcxMaxUserTag)) return false;
    folded = tag;
  }
  *out = (static_cast<uint64_t>(sender) << kTagBits) | folded;
  return true;
}

struct ContextDeleter {
  void operator()(ucp_context* c) const { ucp_cleanup(c); }
};
using ContextPtr = std::unique_ptr<ucp_context, ContextDeleter>;

// `wakeup`: ask for UCP_FEATURE_WAKEUP (an event fd the progress thread can
// sleep on, see UcxWait::kBlock).
absl::StatusOr<ContextPtr> CreateContext(int ranks, bool wakeup = false) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG | (wakeup ? UCP_FEATURE_WAKEUP : 0);
  params.estimated_num_eps = static_cast<size_t>(ranks);
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("ucp_init", s);
  return ContextPtr(context);
}

// Each rank's slot in the shared-memory exchange (the shm algorithm): the
// largest contribution it carries, and the chunk of shm's all_reduce
// pipeline. Every chunk costs two exchanges, which with more ranks than
// cores means a round of sleeps and wake-ups, so large chunks pay (docs/design/tuning-history.md).
// The segment holds two slots per rank and lives in /dev/shm, which
// containers often keep small (Docker: 64 MB), so a group takes at most
// 8 MB up to 64 ranks: 1 MB slots up to 4 ranks, smaller ones above, never
// below 64 KB.
size_t UcxExchangeBytes(int size) {
  constexpr size_t kMost = size_t{1} << 20, kLeast = size_t{64} << 10;
  return std::clamp((size_t{4} << 20) / static_cast<size_t>(size), kLeast,
                    kMost);
}

// Whether UCX_TLS (the user's choice of wires, `tls`; null if unset)
// allows shared memory between processes. The shm algorithm's exchange is
// shared memory too, so it follows the same choice: a job told to use TCP
// (UCX_TLS=tcp, or the two-host test's namespaces on one machine) does not
// take it behind the user's back.
bool TlsAllowSharedMemory(const char* tls) {
  if (tls == nullptr || *tls == '\0') return true;  // UCX picks: it would.
  absl::string_view list(tls);
  const bool excluding = absl::ConsumePrefix(&list, "^");
  bool named = false;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name == "shm" || name == "sm" || name == "posix" || name == "sysv" ||
        name == "cma" || name == "xpmem" || name == "knem" ||
        (!excluding && name == "all")) {
      named = true;
    }
  }
  return excluding ? !named : named;
}

// How a rank waits for UCX (RELAY_UCX_WAIT).
enum class UcxWait {
  // Callers and the progress thread poll, yielding the core between polls:
  // the lowest latency while every rank has a core.
  kPoll,
  // Callers poll only while operations complete, then sleep; the progress
  // thread then sleeps on the worker's event fd until UCX has something for
  // it. For more ranks than cores on a host, where a polling rank takes the
  // core a rank with work needs (four processes on two cores).
  kBlock,
  // kBlock when this host runs more ranks of the job than this process may
  // use cores, kPoll otherwise.
  kAuto,
};

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

class UcxTransport;

// One send or receive. Lives while UCX holds it (`self`) and while any
// Request handle does.
class UcxOp final : public RequestState {
 public:
  UcxOp(absl::Time deadline, UcxTransport* transport, int peer, bool is_recv,
        size_t bytes)
      : RequestState(deadline),
        transport(transport),
        peer(peer),
        is_recv(is_recv),
        bytes(bytes) {}
  // For a post that UCX completed at once: no other thread saw the op.
  using RequestState::CompleteUnshared;
  using RequestState::CompleteIfNothingToRun;

  UcxTransport* const transport;
  const int peer;
  const bool is_recv;
  const size_t bytes;
  // Guarded by the transport's worker lock:
  bool in_flight = false;            // Posted, callback not yet run.
  void* ucx_request = nullptr;       // UCX's handle, once the post returned.
  absl::Status cancel_reason;        // Why we cancelled it, if we did.
  std::shared_ptr<UcxOp> self;       // Keeps it alive while UCX holds it.
  // Its links in the transport's PendingOps, where it is listed exactly
  // while in_flight.
  UcxOp* prev = nullptr;
  UcxOp* next = nullptr;

 protected:
  bool Progress() override;
  void StoppedPolling() override;
  std::chrono::nanoseconds SpinBudget() const override;
};

// The operations UCX holds, linked through the ops themselves: adding and
// removing one is a few stores, where a hash set of them cost about 160
// instructions per message (callgrind, 8 B all_reduce over UCX shm).
// Guarded by the transport's worker lock. The transport adds an op when it
// sets in_flight and removes it when it clears it, so no op is added or
// removed twice.
class PendingOps {
 public:
  bool empty() const { return head_ == nullptr; }
  void Add(UcxOp* op) {
    op->prev = nullptr;
    op->next = head_;
    if (head_ != nullptr) head_->prev = op;
    head_ = op;
  }
  void Remove(UcxOp* op) {
    if (op->prev != nullptr) op->prev->next = op->next; else head_ = op->next;
    if (op->next != nullptr) op->next->prev = op->prev;
    op->prev = op->next = nullptr;
  }
  // The ops listed now, so the caller may remove them as it goes.
  std::vector<UcxOp*> List() const {
    std::vector<UcxOp*> out;
    for (UcxOp* op = head_; op != nullptr; op = op->next) out.push_back(op);
    return out;
  }

 private:
  UcxOp* head_ = nullptr;
};

class UcxTransport final : public Transport, public ExchangeDriver {
 public:
  UcxTransport(int rank, int size, ContextPtr context, bool peer_errors,
               bool progress_thread, UcxWait wait)
      : rank_(rank),
        size_(size),
        peer_errors_(peer_errors),
        progress_thread_enabled_(progress_thread),
        wait_(wait),
        context_(std::move(context)),
        peers_(static_cast<size_t>(size)) {}

  ~UcxTransport() override {
    Abort(absl::CancelledError("ucx transport destroyed"));
    {
      std::lock_guard<std::mutex> lock(idle_mu_);
      stop_ = true;
    }
    idle_cv_.notify_all();
    stand_aside_cv_.notify_all();
    if (blocking_) ucp_worker_signal(worker_);  // Out of its poll().
    if (progress_thread_.joinable()) progress_thread_.join();
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    // Operations UCX never gave back (see Abort) die with the worker.
    abandoned_.clear();
  }

  absl::Status Init(const TransportConfig& config) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // One lock of ours serialises every call on the worker.
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucs_status_t s = ucp_worker_create(context_.get(), &wp, &worker_);
    if (s != UCS_OK) return UcxError("ucp_worker_create", s);

    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context_.get(), &attr) == UCS_OK) {
      device_memory_ =
          (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
    }

    ucp_address_t* address = nullptr;
    size_t address_size = 0;
    s = ucp_worker_get_address(worker_, &address, &address_size);
    if (s != UCS_OK) return UcxError("ucp_worker_get_address", s);
    const std::string mine(reinterpret_cast<const char*>(address),
                           address_size);
    ucp_worker_release_address(worker_, address);
    // Each rank's host name beside its address: how many ranks share this
    // host decides how they wait (UcxWait::kAuto).
    const std::string host = HostName();
    if (absl::Status st = config.store->Set(absl::StrCat("ucx/", rank_), mine);
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            config.store->Set(absl::StrCat("ucx/host/", rank_), host);
        !st.ok()) {
      return st;
    }
    // Whether this rank's UCX_TLS allows the shared-memory exchange: every
    // rank must agree before any of them sets up the segment, or the ones
    // that want it wait for the others until the timeout.
    const std::optional<std::string> tls = GetEnv("UCX_TLS");
    const bool want_exchange =
        TlsAllowSharedMemory(tls.has_value() ? tls->c_str() : nullptr);
    if (absl::Status st = config.store->Set(
            absl::StrCat("ucx/shm_wanted/", rank_), want_exchange ? "1" : "0");
        !st.ok()) {
      return st;
    }
    std::vector<std::string> keys;
    keys.reserve(static_cast<size_t>(3 * size_));
    for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("ucx/", r));
    for (int r = 0; r < size_; ++r) {
      keys.push_back(absl::StrCat("ucx/host/", r));
    }
    for (int r = 0; r < size_; ++r) {
      keys.push_back(absl::StrCat("ucx/shm_wanted/", r));
    }
    absl::StatusOr<std::vector<std::string>> addresses =
        config.store->MultiGet(keys, config.timeout);
    if (!addresses.ok()) {
      return absl::Status(addresses.status().code(),
                          absl::StrCat("ucx Connect: waiting for every rank's "
                                       "worker address: ",
                                       addresses.status().message()));
    }
    int local_ranks = 0;
    for (int r = 0; r < size_; ++r) {
      if ((*addresses)[static_cast<size_t>(size_ + r)] == host) ++local_ranks;
    }
    const bool want_blocking =
        wait_ == UcxWait::kBlock ||
        (wait_ == UcxWait::kAuto && local_ranks > UsableCores());
    wait_spin_ = RequestState::SpinBudgetFor(local_ranks);
    // Where this host's callers and progress threads outnumber its cores,
    // each stand-aside check preempts a polling caller (stand_aside.h).
    stand_aside_.SetCrowded(2 * local_ranks > UsableCores());
    std::vector<int> unwilling;  // Ranks whose UCX_TLS excludes shm.
    for (int r = 0; r < size_; ++r) {
      if ((*addresses)[static_cast<size_t>(2 * size_ + r)] != "1") {
        unwilling.push_back(r);
      }
    }
    if (local_ranks == size_ && !unwilling.empty() && want_exchange &&
        rank_ == 0) {
      std::fprintf(stderr, "relay: ucx: no shared-memory exchange, small "
                   "collectives use messages: UCX_TLS excludes shared "
                   "memory on rank(s) %s but not here (give every rank the "
                   "same UCX_TLS)\n",
                   absl::StrJoin(unwilling, ",").c_str());
    }
    if (local_ranks == size_ && unwilling.empty()) {
      // Every rank on this host: small collectives go through a shared-
      // memory exchange (the shm algorithm) instead of messages. Every rank
      // learns the same verdict; without a segment they use messages.
      absl::StatusOr<std::unique_ptr<SharedSegment>> segment =
          SharedSegment::Create(*config.store, "ucx/shm", rank_, size_,
                                SlotExchange::RegionBytes(
                                    size_, UcxExchangeBytes(size_)),
                                config.timeout);
      if (segment.ok()) {
        segment_ = *std::move(segment);
        exchange_ = std::make_unique<SlotExchange>(
            segment_->data(), rank_, size_, UcxExchangeBytes(size_),
            wait_spin_, this);
      } else if (rank_ == 0) {
        std::fprintf(stderr, "relay: ucx: no shared-memory exchange, small "
                     "collectives use messages: %s\n",
                     std::string(segment.status().message()).c_str());
      }
    }
    if (want_blocking && progress_thread_enabled_) {
      // Without the wakeup feature (a build or transport that lacks it)
      // the rank polls, as it would with enough cores.
      blocking_ = ucp_worker_get_efd(worker_, &event_fd_) == UCS_OK;
    }
    for (int r = 0; r < size_; ++r) {
      Peer& peer = peers_[r];
      peer.transport = this;
      peer.rank = r;
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address =
          reinterpret_cast<const ucp_address_t*>((*addresses)[r].data());
      ep.err_mode = peer_errors_ ? UCP_ERR_HANDLING_MODE_PEER
                                 : UCP_ERR_HANDLING_MODE_NONE;
      ep.err_handler.cb = &UcxTransport::OnEndpointError;
      ep.err_handler.arg = &peer;
      s = ucp_ep_create(worker_, &ep, &peer.ep);
      if (s != UCS_OK) {
        return UcxPeerError("ucp_ep_create", r, s);
      }
    }
    if (progress_thread_enabled_) {
      progress_thread_ = std::thread([this] {
        NameThisThread("relay-ucx-prog");
        ProgressLoop();
      });
    }
    return absl::OkStatus();
  }

  absl::string_view name() const override { return "ucx"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // RequestState::SpinBudget of this rank's operations.
  std::chrono::nanoseconds wait_spin() const { return wait_spin_; }

  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.host_memory = true;
    caps.device_memory = device_memory_;
    // Shared memory on one host, by default; the cost model only needs the
    // order of magnitude. Blocking ranks pay a wake-up per hand-off, tens
    // to hundreds of microseconds on an oversubscribed host, so the engine
    // pipelines over them in fewer, larger segments.
    caps.latency_us = blocking_ ? 100.0 : 2.0;
    caps.bandwidth_gbps = 5.0;
    caps.max_user_tag = kUcxMaxUserTag;
    caps.wait_spin = wait_spin_;
    caps.exchange_bytes =
        exchange_ != nullptr ? exchange_->slot_bytes() : 0;
    return caps;
  }

  absl::StatusOr<Request> Exchange(const ExchangeCall& call) override {
    if (exchange_ == nullptr) return Transport::Exchange(call);
    absl::StatusOr<Request> started = exchange_->Start(call);
    // A caller may never wait (a future completed by OnDone): the progress
    // thread drives a pending exchange too, and must be woken for it if it
    // went idle. pending() and thread_idle_ are seq_cst on both sides.
    if (thread_idle_.load(std::memory_order_seq_cst) && exchange_->pending()) {
      { std::lock_guard<std::mutex> lock(idle_mu_); }
      idle_cv_.notify_one();
    }
    return started;
  }

  // On the calling thread: the progress thread has nothing to drive for
  // it (no op is queued, so pending() stays false), and UCX operations in
  // flight meanwhile keep moving on that thread as they do for any caller
  // that does not poll.
  absl::Status RunExchange(const ExchangeCall& call) override {
    if (exchange_ == nullptr) return Transport::RunExchange(call);
    // Its fallback (exchanges queued ahead of it) waits on a request,
    // which drives the queue itself; a Start by another thread meanwhile
    // wakes the progress thread as Exchange does.
    return exchange_->Run(call);
  }

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    return Post(peer, tag, const_cast<void*>(data.data), data.bytes(),
                /*is_recv=*/false, deadline);
  }

  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    return Post(peer, tag, data.data, data.bytes(), /*is_recv=*/true, deadline);
  }

  // Called by waiting or testing callers. While they poll, the progress
  // thread stands aside (see ProgressLoop), so the two do not fight over
  // the worker lock and the cores.
  //
  // Returns true (keep polling me, do not sleep) while requests are in
  // flight and the worker saw activity in the last kBusyNs: a rendezvous
  // transfer can run for milliseconds inside the peer's progress (a 16 MB
  // copy) with nothing to do here, and a caller that slept through it would
  // add its wake-up latency to every large message. RequestState::Wait
  // still yields the core every few polls, so ranks that outnumber the
  // cores get their turn.
  bool Progress() override {
    if (exchange_ != nullptr && exchange_->Progress()) return true;
    const int64_t now = NowNanos();
    stand_aside_.CallerPolled(now, [this] { return Busy(); });
    if (Poll(now)) return true;
    // Blocking: keep the caller polling only while work arrives, so it
    // soon sleeps and leaves the core to a rank that has work; the progress
    // thread sleeps on the event fd meanwhile.
    if (blocking_) return false;
    return outstanding_.load(std::memory_order_relaxed) > 0 &&
           Within(now - last_activity_ns_.load(std::memory_order_relaxed),
                  kBusyNs);
  }

  // An exchange's waiter polls like any caller, so the progress thread
  // stands aside for it instead of fighting it for the exchange (and the
  // cores).
  // It polls UCX only while UCX operations are in flight: an exchange's
  // waiter otherwise paid a worker poll (a mutex and UCX's own progress,
  // about 600 instructions per 8 B all_reduce on 2 processes) per look at
  // the slots.
  bool DriveExchange() override {
    const int64_t now = NowNanos();
    stand_aside_.CallerPolled(now, [this] { return Busy(); });
    if (exchange_->Progress()) return true;
    return outstanding_.load(std::memory_order_relaxed) > 0 && Poll(now);
  }
  void ExchangeWaiterSleeping() override { StoppedPolling(); }

  // The caller that was polling goes to sleep: wake the progress thread
  // from its stand-aside wait (ProgressLoop) so transfers keep moving.
  void StoppedPolling() override {
    if (!stand_aside_.CallerStopped()) {
      return;  // Nobody was polling: the thread is not standing aside.
    }
    { std::lock_guard<std::mutex> lock(idle_mu_); }  // No lost wake-up.
    stand_aside_cv_.notify_one();
  }

  void Abort(absl::Status reason) override {
    if (exchange_ != nullptr) exchange_->Abort(reason);
    std::unique_lock<std::mutex> lock(worker_mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    const bool quiet = pending_.empty();
    CancelPending(
        [&](const UcxOp&) { return true; }, reason);
    // Close every endpoint: peers learn this rank is gone. With nothing
    // pending, flush first so messages already sent still arrive.
    std::vector<void*> closing;
    for (Peer& peer : peers_) {
      if (peer.ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = quiet ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      void* r = ucp_ep_close_nbx(peer.ep, &param);
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
      peer.ep = nullptr;
    }
    // Bounded: a peer that vanished must not hold up the abort. A flush
    // needs the peers' progress (slow under sanitizers or oversubscribed
    // cores), so a quiet close gets longer than a forced one. A forced
    // close with operations to a dead peer never finishes them (without
    // peer error handling UCX cannot tell the peer is gone), and every
    // survivor's requests complete only after this wait: it was 2 s, which
    // made a loss reach the callers 2 s after the failure monitor had
    // found it (bench/ucx_kill_sweep.sh). What is left after it is
    // abandoned below, as before.
    const absl::Time until =
        absl::Now() + (quiet ? absl::Seconds(10) : absl::Milliseconds(200));
    auto unfinished = [&] {
      if (!pending_.empty()) return true;
      for (void* r : closing) {
        if (ucp_request_check_status(r) == UCS_INPROGRESS) return true;
      }
      return false;
    };
    while (unfinished() && absl::Now() < until) ucp_worker_progress(worker_);
    // Every close request goes back to UCX, finished or not (ucp_request_free
    // takes a request in any state; UCX finishes it internally). One kept
    // back because it was still in progress made ucp_worker_destroy assert
    // (ucp_ep.c: `req->flags & UCP_REQUEST_FLAG_RELEASED`) once its flush
    // failed with "Endpoint timeout": ucx_transport_test under ubsan, after
    // the 10 s wait ran out.
    for (void* r : closing) ucp_request_free(r);
    // Whatever UCX still holds completes now, with the reason; the op is
    // kept (abandoned_) until the worker is destroyed, since UCX may still
    // call back with it.
    for (UcxOp* op : pending_.List()) {
      pending_.Remove(op);
      op->in_flight = false;  // Finish() ignores a late callback.
      op->ucx_request = nullptr;
      completions_.push_back({op->self, reason});
      // Moved, not copied: an op holding itself would outlive the worker
      // (a leak LeakSanitizer reports when a peer froze with sends queued).
      abandoned_.push_back(std::move(op->self));
    }
    outstanding_.store(0);
    Completions done;
    TakeCompletions(&done);
    lock.unlock();
    RunCompletions(done);
  }

 private:
  // For the activity window and the stand-aside policy only. FastNowNanos
  // reads the TSC (about 10 ns) where steady_clock went through the vDSO
  // (25-30 ns on these VMs), and every poll of a waiting caller reads it: in a
  // 32 KB ping-pong, clock_gettime was 18% of the samples. A wall-clock
  // step only lengthens or shortens one busy window.
  static int64_t NowNanos() { return FastNowNanos(); }
  // Whether `elapsed` (two NowNanos readings apart) is within `window`. A
  // negative one, the wall clock stepped back between them, is not: a
  // caller would otherwise keep polling for as long as the step (the
  // stand-aside policy reads its stamps the same way).
  static bool Within(int64_t elapsed, int64_t window) {
    return elapsed >= 0 && elapsed < window;
  }

  // UCX operations in flight, or shared-memory exchanges queued.
  bool Busy() const {
    return outstanding_.load(std::memory_order_relaxed) > 0 ||
           (exchange_ != nullptr && exchange_->pending());
  }

  // Drives the worker once, if no other thread is; `now` (NowNanos) stamps
  // any activity, so a caller's poll reads the clock once.
  bool Poll(int64_t now) {
    std::unique_lock<std::mutex> lock(worker_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    bool worked = false;
    // Until UCX runs out of work or Finish completed an operation: the
    // waiter this poll is for may be the one, and it sees so as soon as this
    // returns (another lap polls every interface again, with cold caches
    // after a rendezvous copy). The progress thread, or the next poll,
    // takes the rest. Operations queued to complete after the lock (those
    // with callbacks: a collective's steps) do not end the loop, as before:
    // the change was measured on point-to-point messages only.
    const uint64_t completed_before = completed_here_;
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
      worked = true;
      if (completed_here_ != completed_before) break;
    }
    const bool finished = completed_here_ != completed_before;
    Completions done;
    TakeCompletions(&done);
    lock.unlock();
    RunCompletions(done);
    worked = worked || finished || !done.empty();
    if (worked) last_activity_ns_.store(now, std::memory_order_relaxed);
    return worked;
  }


  struct Peer {
    UcxTransport* transport = nullptr;
    int rank = 0;
    ucp_ep_h ep = nullptr;
    absl::Status lost;  // Set once the peer failed. Guarded by worker_mu_.
  };
  struct Completion {
    std::shared_ptr<UcxOp> op;
    absl::Status status;
  };

  absl::StatusOr<Request> Post(int peer, Tag tag, void* data, size_t bytes,
                               bool is_recv, absl::Time deadline) {
    if (peer < 0 || peer >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ucx: peer ", peer, " is out of range [0, ", size_, ")"));
    }
    uint64_t ucx_tag = 0;
    if (!FoldTag(is_recv ? peer : rank_, tag, &ucx_tag)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ucx: user tag ", tag, " exceeds ", kUcxMaxUserTag));
    }
    auto op = std::make_shared<UcxOp>(deadline, this, peer, is_recv, bytes);
    absl::Status immediate;
    bool completed = false;
    bool still_in_flight = false;  // UCX holds it after the post returned.
    Completions inline_done;
    {
      std::lock_guard<std::mutex> lock(worker_mu_);
      // Posted after Abort: done at once with its reason, as the pending
      // ones were (Transport::Abort). A collective still running when a
      // peer's loss aborted the transport then fails with that loss.
      if (aborted_) return Request::Completed(abort_reason_);
      if (!peers_[peer].lost.ok()) return Request::Completed(peers_[peer].lost);
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                           UCP_OP_ATTR_FIELD_USER_DATA |
                           UCP_OP_ATTR_FIELD_DATATYPE;
      param.datatype = ucp_dt_make_contig(1);
      param.user_data = op.get();
      // In flight from here: the callback may run inside the post call.
      op->in_flight = true;
      op->self = op;
      pending_.Add(op.get());
      void* r;
      if (is_recv) {
        // Always through the callback: UCX 1.13 leaves recv_info unfilled
        // when a receive completes immediately (openucx/ucx#9425), and the
        // callback is where the received length is checked.
        param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        param.cb.recv = &UcxTransport::OnRecvDone;
        r = ucp_tag_recv_nbx(worker_, data, bytes, ucx_tag, kFullMask, &param);
      } else {
        param.cb.send = &UcxTransport::OnSendDone;
        r = ucp_tag_send_nbx(peers_[peer].ep, data, bytes, ucx_tag, &param);
      }
      if (r == nullptr || UCS_PTR_IS_ERR(r)) {  // Done (or failed) already.
        op->in_flight = false;
        op->self.reset();
        pending_.Remove(op.get());
        completed = true;
        immediate = r == nullptr ? absl::OkStatus()
                                 : UcxPeerError(is_recv ? "receive" : "send",
                                                peer, UCS_PTR_STATUS(r));
      } else if (op->in_flight) {
        op->ucx_request = r;
        still_in_flight = true;
        outstanding_.fetch_add(1, std::memory_order_relaxed);
        last_activity_ns_.store(NowNanos(), std::memory_order_relaxed);
      } else {
        // The callback ran inside the post, and completed the op or queued
        // its completion. Run what it queued now: nothing else may call
        // Progress() for this rank (a waiter on a WhenAll of requests does
        // not), and the progress thread sleeps while nothing is outstanding.
        TakeCompletions(&inline_done);
      }
    }
    if (completed) {
      // Out of pending_ again before the worker lock was released, and not
      // yet returned: nobody else has seen it.
      op->CompleteUnshared(std::move(immediate));
    } else if (still_in_flight) {
      idle_cv_.notify_one();  // The progress thread has work.
    } else {
      RunCompletions(inline_done);
    }
    return Request(std::move(op));
  }

  static absl::Status RecvStatus(const UcxOp& op, ucs_status_t s,
                                 const ucp_tag_recv_info_t& info) {
    if (s != UCS_OK) return UcxPeerError("receive", op.peer, s);
    if (info.length != op.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ucx: received ", info.length, " bytes from rank ", op.peer,
          " into a receive of ", op.bytes, " bytes; sizes must match"));
    }
    return absl::OkStatus();
  }

  // UCX callbacks: run inside ucp_worker_progress (or a cancel), under
  // worker_mu_. They complete a request that has nothing registered to run
  // (Finish); others' completions are queued and run once the lock is
  // dropped.
  static void OnSendDone(void* request, ucs_status_t s, void* user_data) {
    auto* op = static_cast<UcxOp*>(user_data);
    op->transport->Finish(op, request,
                          UcxPeerError("send", op->peer, s));
  }

  static void OnRecvDone(void* request, ucs_status_t s,
                         const ucp_tag_recv_info_t* info, void* user_data) {
    auto* op = static_cast<UcxOp*>(user_data);
    ucp_tag_recv_info_t none{};
    op->transport->Finish(op, request,
                          RecvStatus(*op, s, info != nullptr ? *info : none));
  }

  void Finish(UcxOp* op, void* request, absl::Status status) {
    ucp_request_free(request);
    if (!op->in_flight) return;  // Already given up on (Abort).
    op->in_flight = false;
    // Null if the callback runs inside the post call, before it returned.
    if (op->ucx_request != nullptr) {
      op->ucx_request = nullptr;
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (!op->cancel_reason.ok()) status = op->cancel_reason;
    pending_.Remove(op);
    // Done here when nothing waits to run, as UCX's own loop would see it:
    // queueing the completion to run after the lock was most of what relay
    // added to UCX's own latency (docs/design/tuning-history.md).
    if (op->CompleteIfNothingToRun(status)) {
      // UCX's reference goes now; the last one (nobody kept the Request)
      // takes the op with it, which touches nothing of the transport.
      std::shared_ptr<UcxOp> released = std::move(op->self);
      ++completed_here_;
      return;
    }
    completions_.push_back({std::move(op->self), std::move(status)});
  }

  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t s) {
    (void)ep;
    auto* peer = static_cast<Peer*>(arg);
    peer->transport->PeerFailed(*peer, s);
  }

  // Under worker_mu_.
  void PeerFailed(Peer& peer, ucs_status_t s) {
    if (!peer.lost.ok()) return;
    peer.lost = absl::UnavailableError(absl::StrCat(
        "ucx: rank ", peer.rank, " was lost (", ucs_status_string(s), ")"));
    // Receives are not tied to an endpoint: cancel the ones from this peer
    // ourselves. Sends on the failed endpoint fail through UCX.
    CancelPending([&](const UcxOp& op) { return op.peer == peer.rank; },
                  peer.lost);
  }

  // Under worker_mu_: cancels every pending op `which` selects, to complete
  // with `reason`.
  template <typename Pred>
  void CancelPending(Pred which, const absl::Status& reason) {
    std::vector<UcxOp*> victims;
    for (UcxOp* op : pending_.List()) {
      if (which(*op) && op->cancel_reason.ok()) victims.push_back(op);
    }
    for (UcxOp* op : victims) {
      op->cancel_reason = reason;
      // May call back synchronously, which erases it from pending_.
      if (op->ucx_request != nullptr) {
        ucp_request_cancel(worker_, op->ucx_request);
      }
    }
  }

  // Under worker_mu_: the completions recorded so far, moved out into
  // inline storage (completions_ keeps its buffer: moving the vector out
  // made every poll with a completion free it and the next one allocate).
  using Completions = absl::InlinedVector<Completion, 4>;
  // (Appended to `out`, not returned: GCC 12 under -fsanitize=thread
  // warned that a moved-into InlinedVector may be used uninitialized.)
  void TakeCompletions(Completions* out) {
    for (Completion& c : completions_) out->push_back(std::move(c));
    completions_.clear();
  }

  void RunCompletions(Completions& done) {
    for (Completion& c : done) c.op->Complete(std::move(c.status));
  }

  // Drives the worker while requests are outstanding, so transfers progress
  // while the caller computes, and for a while after the last one finished:
  // UCX may still owe protocol messages (a rendezvous acknowledgement) that
  // no request of ours waits for, but a peer does. Sleeps otherwise.
  void ProgressLoop() {
    using Clock = std::chrono::steady_clock;
    auto idle_for = std::chrono::microseconds(1);
    Clock::time_point last_busy = Clock::now();
    for (;;) {
      if (Busy()) {
        last_busy = Clock::now();
      } else if (Clock::now() - last_busy > kLinger) {
        std::unique_lock<std::mutex> lock(idle_mu_);
        thread_idle_.store(true, std::memory_order_seq_cst);
        idle_cv_.wait(lock, [&] {
          return stop_ || Busy();
        });
        thread_idle_.store(false, std::memory_order_relaxed);
        last_busy = Clock::now();
        stand_aside_.Restart();
      }
      {
        std::lock_guard<std::mutex> lock(idle_mu_);
        if (stop_) return;
      }
      // A caller is polling: let it drive the worker alone until it says
      // it stopped (StoppedPolling, when its Wait goes to sleep) or has not
      // polled for the stand-aside interval (stand_aside.h: why, and how
      // the interval backs off and restarts).
      const int64_t last_poll = stand_aside_.last_caller_poll();
      const int64_t now = NowNanos();
      if (const int64_t wait = stand_aside_.StandAsideFor(last_poll, now)) {
        std::unique_lock<std::mutex> lock(idle_mu_);
        stand_aside_cv_.wait_for(lock, std::chrono::nanoseconds(wait), [&] {
          return stop_ || stand_aside_.last_caller_poll() == 0;
        });
        lock.unlock();
        const int64_t polled = stand_aside_.last_caller_poll();
        stand_aside_.AfterStandingAside(polled, NowNanos());
        continue;
      }
      stand_aside_.TakingOver(last_poll, now, [this] { return Busy(); });
      const bool exchanged = exchange_ != nullptr && exchange_->Progress();
      if (Poll(now) || exchanged) {
        idle_for = std::chrono::microseconds(1);
      } else if (exchange_ != nullptr && exchange_->pending()) {
        // An exchange waits for a peer's slot write, which raises no UCX
        // event: sleep on the exchange's own wake-up when blocking (bounded,
        // for UCX work that may be in flight too), else yield between polls.
        if (blocking_ && exchange_->waiter_asleep() &&
            outstanding_.load(std::memory_order_relaxed) == 0) {
          // A caller's Wait sleeps on the exchange and drives it when
          // woken: standing by on a timer, not on the same wake-up, halves
          // the threads every slot write wakes (docs/design/tuning-history.md). The timer
          // covers a caller that stops waiting with exchanges still
          // queued (a Wait that timed out): this loop drives them each
          // time round.
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        } else if (blocking_) {
          exchange_->WaitForWrite(std::chrono::microseconds(100));
        } else {
          std::this_thread::yield();
        }
      } else if (outstanding_.load(std::memory_order_relaxed) > 0) {
        // Requests in flight and no caller polling: keep them moving, but
        // give the core away between polls (or sleep until UCX has an
        // event for this worker).
        if (blocking_) {
          SleepOnEvents();
        } else {
          std::this_thread::yield();
        }
      } else if (blocking_) {
        // Lingering, blocking: UCX raises an event for what it still owes
        // (a peer's acknowledgement arriving), so sleep on that rather
        // than waking on a timer.
        SleepOnEvents();
      } else {
        // Lingering: back off up to 100 us.
        std::this_thread::sleep_for(idle_for);
        idle_for = std::min(idle_for * 2, std::chrono::microseconds(100));
      }
    }
  }

  // Blocking mode: arms the worker and sleeps on its event fd until an
  // event comes, a signal (destruction) or 1 ms passes. The bound covers
  // work UCX may hold that raises no event; arming says BUSY when events
  // are already waiting, and the loop polls again.
  void SleepOnEvents() {
    ucs_status_t armed;
    {
      std::lock_guard<std::mutex> lock(worker_mu_);
      armed = aborted_ ? UCS_ERR_CANCELED : ucp_worker_arm(worker_);
    }
    if (armed == UCS_ERR_CANCELED) {
      // Aborted: nothing will raise an event; do not spin while lingering.
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      return;
    }
    if (armed != UCS_OK) return;
    pollfd fd{};
    fd.fd = event_fd_;
    fd.events = POLLIN;
    poll(&fd, 1, /*timeout_ms=*/1);
  }

  const int rank_;
  const int size_;
  const bool peer_errors_;
  const bool progress_thread_enabled_;
  const UcxWait wait_;
  bool blocking_ = false;  // Set by Init, read-only after.
  // RequestState::SpinBudget of this rank's operations. Set by Init.
  std::chrono::nanoseconds wait_spin_ = RequestState::kDefaultSpinBudget;
  int event_fd_ = -1;      // The worker's, when blocking_.
  ContextPtr context_;
  ucp_worker_h worker_ = nullptr;
  bool device_memory_ = false;

  std::mutex worker_mu_;  // Serialises the worker and guards what follows.
  std::vector<Peer> peers_;
  PendingOps pending_;
  std::vector<Completion> completions_;
  // Operations Finish() completed on the spot (CompleteIfNothingToRun).
  uint64_t completed_here_ = 0;
  std::vector<std::shared_ptr<UcxOp>> abandoned_;
  bool aborted_ = false;
  absl::Status abort_reason_;

  std::atomic<int> outstanding_{0};
  // When callers last polled, and the progress thread's stand-aside
  // interval (stand_aside.h).
  StandAside stand_aside_;
  // When the worker last did something (a completion or protocol work).
  std::atomic<int64_t> last_activity_ns_{0};
  static constexpr int64_t kBusyNs = 10'000'000;
  static constexpr std::chrono::milliseconds kLinger{20};
  std::mutex idle_mu_;
  std::condition_variable idle_cv_;
  std::condition_variable stand_aside_cv_;  // See ProgressLoop.
  bool stop_ = false;  // Guarded by idle_mu_.
  // The progress thread waits on idle_cv_ with nothing to do; Exchange
  // then wakes it for an exchange left pending.
  std::atomic<bool> thread_idle_{false};
  std::thread progress_thread_;
  // When every rank is on this host (Init): the segment, and the exchange
  // in it, which goes first.
  std::unique_ptr<SharedSegment> segment_;
  std::unique_ptr<SlotExchange> exchange_;
};

bool UcxOp::Progress() { return transport->Progress(); }
void UcxOp::StoppedPolling() { transport->StoppedPolling(); }
std::chrono::nanoseconds UcxOp::SpinBudget() const {
  return transport->wait_spin();
}

}  // namespace

bool UcxTransportFactory::IsViable() const {
  static const bool viable = CreateContext(1).ok();
  return viable;
}

absl::StatusOr<std::unique_ptr<Transport>> UcxTransportFactory::Connect(
    const TransportConfig& config) {
  if (config.store == nullptr) {
    return absl::InvalidArgumentError("ucx Connect: null store");
  }
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ucx Connect: rank ", config.rank, " of ", config.size));
  }
  if (config.size > (1 << kUcxRankBits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ucx Connect: ", config.size, " ranks exceed the ",
        1 << kUcxRankBits, " the tag layout carries"));
  }
  RELAY_ASSIGN_OR_RETURN(const std::string error_mode,
                         ReadChoice("RELAY_UCX_ERROR_MODE", "none"));
  const bool peer_errors = error_mode == "peer";
  const absl::StatusOr<bool> progress_thread =
      ReadSwitch("RELAY_UCX_PROGRESS_THREAD", /*default_value=*/true);
  if (!progress_thread.ok()) return progress_thread.status();
  RELAY_ASSIGN_OR_RETURN(const std::string wait_mode,
                         ReadChoice("RELAY_UCX_WAIT", "auto"));
  const UcxWait wait = wait_mode == "poll"    ? UcxWait::kPoll
                       : wait_mode == "block" ? UcxWait::kBlock
                                              : UcxWait::kAuto;
  // The wakeup feature is asked for whenever blocking may be chosen; a UCX
  // that cannot provide it still runs, polling.
  absl::StatusOr<ContextPtr> context =
      CreateContext(config.size, /*wakeup=*/wait != UcxWait::kPoll);
  if (!context.ok() && wait != UcxWait::kPoll) {
    context = CreateContext(config.size);
  }
  if (!context.ok()) return context.status();
  auto transport = std::make_unique<UcxTransport>(
      config.rank, config.size, *std::move(context), peer_errors,
      *progress_thread, wait);
  if (absl::Status s = transport->Init(config); !s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace relay
