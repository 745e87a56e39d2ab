// File: runtime/slot_exchange.h
//
// SlotExchange: small all-to-all hand-offs through memory every rank of a
// group maps (the heap for ranks that are threads of one process, a POSIX
// shared-memory segment for processes on one host: runtime/shared_segment.h).
// Transports build their Exchange() on it (runtime/transport.h), and relay's
// `shm` algorithm runs every small collective as one exchange
// (collectives/shm.h): each rank copies its contribution into its slot,
// waits until every rank's slot holds the same exchange, and computes its
// own output from them on its own thread. There is no message, no tag
// matching and no request per peer: an 8 B all_reduce between two processes
// costs one cache line each way (Open MPI's shared-memory collectives work
// the same way).
//
// Protocol. Each rank owns two slots (a double buffer); exchange k uses slot
// k % 2 and, once written, stamps it with k + 1 (a seq_cst exchange: the
// data needs only release and acquire, the sleepers below need the rest;
// Run's stamp is a release store, and it looks for sleepers a few polls
// later, after a full barrier).
// A rank finishes exchange k when every slot k % 2 carries k + 1, then
// reads them.
// A rank starts exchange k + 1 only after finishing k, so a rank that
// writes slot k % 2 again (exchange k + 2) has seen every peer's stamp for
// k + 1, which each peer wrote after it finished reading exchange k: no
// slot is overwritten while anyone still reads it, without any
// acknowledgement traffic. Exchanges therefore finish in order on each rank;
// a rank may start several (Start returns at once) and they queue.
//
// Each slot also carries the caller's tag (a collective's sequence), so
// ranks that disagree on the order of their exchanges fail with Internal
// naming the rank instead of reading the wrong data, and an aborted flag
// per rank, so a rank that aborts fails its peers' waiting exchanges at
// once with Unavailable naming it (a process that dies without aborting is
// found by the communicator's failure monitor, or the caller's deadline).
//
// Progress. A posted exchange completes whether or not anyone waits on it
// (a caller may only register an OnDone callback: torch's DDP does, and so
// may the C API's users). Exchanges move when this rank polls (its
// requests' Wait and Test, the transport's Progress()), and otherwise by
// one of two means the transport provides: a progress thread that keeps
// polling while pending() (UCX), or, for ranks that are threads of one
// process, a PublishHook that advances the peers' queues on the thread
// that wrote a slot (loopback), for queues that no waiter attends
// (attended()): the last contribution to arrive then finishes them, as the
// direct algorithm's last arrival runs its combine. A Wait that stops
// polling (more ranks than cores) sleeps on a futex in the region, which a rank writing
// its slot wakes, so a rank that waits for a descheduled peer neither
// burns the core that peer needs nor oversleeps once it has written.
// Thread-safe: any thread may call any method; one internal lock
// serialises them.
//
// Example (two threads, ranks 0 and 1, sharing `region`):
//   SlotExchange ex(region, rank, 2, 1024, spin);
//   RELAY_ASSIGN_OR_RETURN(
//       Request r, ex.Start({.tag = tag, .input = {&x, sizeof(x)},
//                            .finish = &Sum, .context = &out_ptr,
//                            .context_bytes = sizeof(out_ptr),
//                            .deadline = deadline}));
//   RELAY_RETURN_IF_ERROR(r.Wait());
#ifndef RELAY_RUNTIME_SLOT_EXCHANGE_H_
#define RELAY_RUNTIME_SLOT_EXCHANGE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "absl/container/fixed_array.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/exchange_call.h"
#include "runtime/request.h"
#include "runtime/spin_lock.h"

namespace relay {

// What a waiter on an exchange drives, when a transport wants to see it:
// the UCX transport's progress thread stands aside while a caller polls,
// and takes over when the caller's Wait goes to sleep.
class ExchangeDriver {
 public:
  virtual ~ExchangeDriver() = default;
  // Called instead of SlotExchange::Progress by a waiting request; must
  // call it. True if it did some work.
  virtual bool DriveExchange() = 0;
  // The waiter stopped polling (it is going to sleep).
  virtual void ExchangeWaiterSleeping() = 0;
};

// Runs on the thread that wrote this rank's slot, after a full barrier that
// follows the write, once the exchange's lock is released (it may drive
// other ranks' exchanges, whose callbacks may start new ones here).
struct PublishHook {
  void (*fn)(void* context) = nullptr;
  void* context = nullptr;
};

class SlotExchange {
 public:
  // The largest context Start copies.
  static constexpr size_t kMaxContextBytes = kMaxExchangeContextBytes;
  // Bytes of shared memory a group of `size` ranks with slots of
  // `slot_bytes` needs; the region must be that large, zeroed, aligned to
  // 64 bytes, and mapped by every rank before any of them starts.
  static size_t RegionBytes(int size, size_t slot_bytes);

  // `region` outlives this object. `spin` is how long a waiter on an
  // exchange polls before yielding its core (RequestState::SpinBudget).
  // `driver`, if not null, outlives this object; waiters poll through it.
  // `on_publish`, if set, runs after each write of this rank's slot.
  SlotExchange(void* region, int rank, int size, size_t slot_bytes,
               std::chrono::nanoseconds spin,
               ExchangeDriver* driver = nullptr, PublishHook on_publish = {});
  ~SlotExchange();
  SlotExchange(const SlotExchange&) = delete;
  SlotExchange& operator=(const SlotExchange&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }

  // Queues this rank's next exchange (ExchangeCall): its contribution
  // `input` (written into the slot at once if nothing is queued ahead, else
  // when the exchanges ahead have finished), `finish` and a copy of
  // `context`. The
  // request completes after `finish` ran on this rank; with Internal if a
  // peer's slot holds another tag, InvalidArgument if it holds another
  // signature, Unavailable if a peer aborted before finishing this
  // exchange, or the abort's reason. InvalidArgument, before anything is written, for more
  // than slot_bytes(), bytes with neither data nor fill (or both), a null
  // `finish`, or a context too large.
  absl::StatusOr<Request> Start(const ExchangeCall& call);

  // Start's blocking form: the same exchange, with the same arguments
  // (`context` is read, not copied: the caller's stays valid throughout),
  // and returns when `finish` has run on this rank, with what the request
  // would have completed with. With nothing queued ahead (the usual case:
  // a caller that waits for each collective at once) it makes no op and no
  // request: it writes the slot, polls the peers' slots on the calling
  // thread (spinning, then yielding, then asleep, as Request::Wait does)
  // and finishes there, about a third of Start-and-Wait's instructions for
  // an 8 B exchange, every one of them on the critical path of a small
  // collective. Exchanges this rank starts meanwhile queue behind it.
  // DeadlineExceeded when `deadline` passes first; the exchange is then
  // aborted (as Abort(that status) would), since nothing may write into
  // the caller's memory once this returns.
  absl::Status Run(const ExchangeCall& call);

  // Advances the queued exchanges as far as the peers allow; never blocks
  // (returns false at once if another thread is inside). True if an
  // exchange finished. A waiter polls with it.
  bool Progress();

  // The same from a thread that must not miss a slot written before the
  // call (a PublishHook driving a peer's queue, a waiter that leaves): it
  // waits for the lock instead of leaving the look to the thread inside,
  // which may have looked before that write.
  bool Drive();

  // Whether exchanges are queued (a progress thread's cue to keep calling
  // Progress). Sequentially consistent with Start's queueing, so a thread
  // that announces it goes idle and then checks this cannot miss one.
  bool pending() const { return pending_.load(std::memory_order_seq_cst); }

  // Whether a request's Wait on this rank is under way (polling, or asleep
  // until a slot is written): it advances the whole queue itself, so a
  // PublishHook need not. Sequentially consistent with the waiter's last
  // look as it leaves, so a slot written after a seq_cst store (Start's
  // publication) is seen by one side or the other.
  bool attended() const {
    return attending_.load(std::memory_order_seq_cst) > 0;
  }

  // Sleeps until a rank writes a slot or aborts, or `timeout` (a progress
  // thread with nothing else to do; the requests' Wait sleeps here too).
  void WaitForWrite(std::chrono::nanoseconds timeout) {
    SleepUntilWritten(timeout);
  }

  // Whether a request's Wait on this rank is asleep on an exchange (it
  // wakes on the next slot write and drives the queue itself): a progress
  // thread then has no reason to sleep on the same wake-up too, where
  // every write would wake both (more ranks than cores: each wake-up is a
  // context switch the ranks with work pay for).
  bool waiter_asleep() const {
    return waiters_asleep_.load(std::memory_order_relaxed) > 0;
  }

  // Fails every queued exchange, and every later Start, with `reason`, and
  // marks this rank aborted in the shared region so that peers waiting for
  // it fail with Unavailable. Idempotent. A transport that owns an exchange
  // calls this from its Transport::Abort: the exchange's requests say so
  // (RequestState::CancelledByTransportAbort), and a communicator relies on
  // it instead of tracking them.
  void Abort(absl::Status reason);

 private:
  class Op;
  struct SlotHeader;
  struct RankFlags;
  struct Wake;

  Wake* wake() const;
  SlotHeader* SlotOf(int rank, uint64_t exchange) const {
    return slots_[(exchange & 1) * static_cast<size_t>(size_) +
                  static_cast<size_t>(rank)];
  }
  RankFlags* FlagsOf(int rank) const;
  // After this rank wrote a slot or its aborted flag: wakes the ranks
  // asleep in SleepUntilWritten, if any.
  void WakeSleepers();
  // An Op's Request::Wait sleeps here once it stops polling: until a rank
  // writes a slot or aborts, or `timeout`.
  void SleepUntilWritten(std::chrono::nanoseconds timeout);
  // The same, for any waiter: `look` is its last check for what it waits
  // for, made once it counts as a sleeper (a write before that is seen by
  // the look, one after it wakes the sleeper); true skips the sleep.
  template <class Look>
  void SleepUnless(std::chrono::nanoseconds timeout, Look look);
  // Whether Start and Run take this call (inline: every call asks); where
  // not, BadInput says why (InvalidArgument).
  bool InputOk(const ExchangeCall& call) const {
    const ExchangeInput& input = call.input;
    return input.bytes <= slot_bytes_ &&
           (input.bytes == 0 ||
            (input.data == nullptr) != (input.fill == nullptr)) &&
           call.finish != nullptr && call.context_bytes <= kMaxContextBytes &&
           (call.context != nullptr || call.context_bytes == 0);
  }
  absl::Status BadInput(const ExchangeCall& call) const;
  // Run's wait for its exchange's slots; OK once every rank's holds
  // `exchange` (or this rank has been aborted: the caller asks aborted_).
  // Wakes sleepers for Run's stamp after its first few polls.
  absl::Status AwaitRun(uint64_t exchange, uint64_t tag, uint64_t signature,
                        absl::Time deadline);
  // After this rank's slot was written, with mu_ released.
  void Published() {
    if (on_publish_.fn != nullptr) on_publish_.fn(on_publish_.context);
  }
  // AdvanceLocked with mu_ held by `lock`, which it releases before
  // running the hook and completing what finished.
  bool AdvanceAndUnlock(std::unique_lock<SpinLock>& lock);
  // Writes this rank's slot for `exchange` (the next one to publish).
  // `context` is what `input.fill` reads. The stamp is a seq_cst exchange
  // and sleepers are woken at once; or, with `release` (Run), a release
  // store, and the caller wakes them soon after with
  // WakeSleepersAfterReleaseStamp (a peer may sleep on this stamp).
  void Publish(uint64_t exchange, uint64_t tag, uint64_t signature,
               const ExchangeInput& input, const void* context, bool release);
  void WakeSleepersAfterReleaseStamp();
  // Exchanges AdvanceLocked ended, completed after mu_ is released (a
  // completion callback may start the next exchange).
  struct Completions {
    absl::InlinedVector<std::shared_ptr<Op>, 2> finished;
    absl::InlinedVector<std::shared_ptr<Op>, 1> failed;
    absl::Status failure;
  };
  // With mu_ held: publishes and finishes queued exchanges, oldest first,
  // as far as the peers allow.
  void AdvanceLocked(Completions* done);
  void Complete(Completions& done);
  // True when every rank's slot holds exchange `exchange` (tagged `tag`).
  // False while some rank's does not yet, and then `*failure` is set if it
  // never will (the rank aborted, or is out of step). Ranks below
  // `*first_missing` were seen ready already; it moves past those seen now.
  bool Ready(uint64_t exchange, uint64_t tag, uint64_t signature,
             int* first_missing, absl::Status* failure) const;
  bool Ready(Op& op, absl::Status* failure) const;
  // Ready found a peer aborted: if some rank's slot for `exchange` carries
  // another signature, that is the cause (the aborted peer saw it too and
  // failed on it), and `*failure` becomes the mismatch.
  void PreferMismatch(uint64_t exchange, uint64_t tag, uint64_t signature,
                      absl::Status* failure) const;
  // Runs `finish` on every rank's contribution to `exchange`, this rank's
  // from `own` where it has data (ExchangeFinishFn says why).
  void Finish(uint64_t exchange, const ExchangeInput& own,
              ExchangeFinishFn finish, const void* context) const;
  void Finish(Op& op);
  // With mu_ held: the exchanges are out of step for good (`failure`):
  // marks this rank aborted for its peers and fails every queued exchange
  // into `done`.
  void FailLocked(absl::Status failure, Completions* done);
  // With mu_ held: tells the peers this rank stops here (its aborted flag,
  // and the first exchange it leaves unfinished, which then fails for them
  // too rather than completing from the slot it already wrote).
  void MarkAbortedLocked();

  char* const region_;
  const int rank_;
  const int size_;
  const size_t slot_bytes_;
  const size_t slot_stride_;
  const std::chrono::nanoseconds spin_;
  ExchangeDriver* const driver_;
  const PublishHook on_publish_;
  // SlotOf's answers: parity * size + rank.
  absl::FixedArray<SlotHeader*> slots_;

  SpinLock mu_;
  // Guarded by mu_:
  std::deque<std::shared_ptr<Op>> queue_;  // Oldest first.
  uint64_t next_exchange_ = 0;             // Number of the next Start.
  uint64_t published_ = 0;  // Exchanges whose slot this rank has written.
  // A Run's exchange is published and not yet finished: nothing queued
  // may be published until it is (AdvanceLocked waits), and another Run
  // queues as Start would.
  bool running_ = false;
  uint64_t running_exchange_ = 0;  // The Run's exchange, while running_.
  absl::Status aborted_;    // Not OK once Abort ran.
  // Lock-free hint for Progress(): queue_ is not empty. A line of its own:
  // peers' threads read it after every slot they write (PublishHook), and
  // mu_'s line changes hands on every call.
  alignas(64) std::atomic<bool> pending_{false};
  // Requests' Waits under way (attended()); on pending_'s line, which a
  // peer's PublishHook reads with it.
  std::atomic<int> attending_{0};

  // Requests' Waits asleep in SleepUntilWritten (waiter_asleep()).
  alignas(64) std::atomic<int> waiters_asleep_{0};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_SLOT_EXCHANGE_H_
