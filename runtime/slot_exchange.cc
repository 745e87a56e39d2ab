#include "runtime/slot_exchange.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "runtime/fast_clock.h"
#include "runtime/fingerprint.h"
#include "runtime/futex.h"
#include "runtime/wait_phases.h"

namespace relay {
namespace {

constexpr size_t kLine = 64;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Memory for exchange ops, recycled: a small collective makes one op per
// call, and malloc and free of it (often on different threads: the caller
// allocates, whoever drops the last reference frees) are a tenth of a
// small all_reduce's instructions. Blocks of one size, a few dozen kept
// per thread; anything larger, or past that, goes to the heap.
//
// Per thread, not per process: on loopback the ranks are threads of one
// process, and one shared free list (its lock and its count) would be a
// cache line that every rank's every call takes from the other core
// (docs/design/tuning-history.md). A block freed on another thread than the one that took it joins
// the freeing thread's list.
class ThreadBlocks {
 public:
  static constexpr size_t kBlockBytes = 512;

  void* Take() {
    if (count_ > 0) return free_[--count_];
    return ::operator new(kBlockBytes);
  }
  // False when the list is full: the caller frees the block.
  bool Keep(void* block) {
    if (count_ == kKept) return false;
    free_[count_++] = block;
    return true;
  }
  void FreeAll() {
    while (count_ > 0) ::operator delete(free_[--count_]);
  }

 private:
  static constexpr size_t kKept = 64;
  void* free_[kKept];
  size_t count_ = 0;
};

// True once this thread's list has been freed (the thread is ending): an
// op freed after that goes to the heap. Trivially destructible, so it can
// be read at any point of the thread's exit.
thread_local bool thread_blocks_gone = false;

struct ThreadBlocksOwner {
  ThreadBlocks blocks;
  ~ThreadBlocksOwner() {
    thread_blocks_gone = true;
    blocks.FreeAll();
  }
};

// This thread's list, or null once the thread has freed it.
ThreadBlocks* Blocks() {
  if (thread_blocks_gone) return nullptr;
  thread_local ThreadBlocksOwner owner;
  return &owner.blocks;
}

void* TakeBlock(size_t bytes) {
  if (bytes <= ThreadBlocks::kBlockBytes) {
    if (ThreadBlocks* blocks = Blocks()) return blocks->Take();
    return ::operator new(ThreadBlocks::kBlockBytes);
  }
  return ::operator new(bytes);
}

void GiveBlock(void* block, size_t bytes) {
  if (bytes <= ThreadBlocks::kBlockBytes) {
    ThreadBlocks* blocks = Blocks();
    if (blocks != nullptr && blocks->Keep(block)) return;
  }
  ::operator delete(block);
}

// std::allocate_shared's allocator for ops (the op and its reference
// counts in one recycled block).
template <class T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}  // NOLINT: rebinding.
  T* allocate(size_t n) {
    return static_cast<T*>(TakeBlock(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { GiveBlock(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const RecyclingAllocator<U>&) const { return false; }
};

}  // namespace

// The head of a slot; the contribution follows it, so a small one shares
// the stamp's cache line and a peer's read of it costs one line transfer.
// Only the owner writes a slot; `tag` and `bytes` are plain fields, ordered
// by the stamp's release and acquire.
struct SlotExchange::SlotHeader {
  std::atomic<uint64_t> stamp;  // k + 1 once exchange k's data is in place.
  uint64_t tag;
  uint64_t signature;  // ExchangeCall::signature.
  uint64_t bytes;
  char* data() { return reinterpret_cast<char*>(this + 1); }
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the stamp is shared between processes");

// Per rank, on a line of its own: read by peers only while they wait.
struct SlotExchange::RankFlags {
  std::atomic<uint32_t> aborted;
  // Once aborted: the first exchange the rank did not finish. Its slot for
  // that exchange may be written already; peers must not complete from it.
  std::atomic<uint64_t> abandoned_from;
};

// The group's one wake-up line, first in the region. A rank that stops
// polling (more ranks than cores: it must give its core away) counts
// itself in `sleepers` and sleeps on `generation`, a futex shared by every
// process that maps the region; a rank that writes a slot or its aborted
// flag, seeing sleepers, bumps the generation and wakes them. Nobody
// sleeping costs a writer a read of a line that stays cached (its write
// is a seq_cst exchange either way: see WakeSleepers).
struct SlotExchange::Wake {
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> sleepers;
};

class SlotExchange::Op final : public RequestState {
 public:
  Op(absl::Time deadline, SlotExchange* exchange)
      : RequestState(deadline), owner(exchange) {}
  using RequestState::CompleteUnshared;  // For Start, on an op it just made.
  // SlotExchange::Abort fails the queued ones, and a transport's Abort
  // calls it.
  bool CancelledByTransportAbort() const override { return true; }

  SlotExchange* const owner;
  uint64_t exchange = 0;
  uint64_t tag = 0;
  uint64_t signature = 0;
  ExchangeInput input;
  ExchangeFinishFn finish = nullptr;
  int first_missing = 0;  // Ranks below it have been seen ready.
  alignas(16) char context[kMaxContextBytes];

 protected:
  bool Progress() override {
    return owner->driver_ != nullptr ? owner->driver_->DriveExchange()
                                     : owner->Progress();
  }
  void StoppedPolling() override {
    if (owner->driver_ != nullptr) owner->driver_->ExchangeWaiterSleeping();
  }
  // A waiter polls the whole queue (or sleeps until a slot is written), so
  // while one is in Wait the peers need not drive it (attended()).
  void StartedPolling() override {
    owner->attending_.fetch_add(1, std::memory_order_seq_cst);
  }
  void FinishedPolling() override {
    owner->attending_.fetch_sub(1, std::memory_order_seq_cst);
    // A slot written while this waiter attended, after its last look, was
    // left to it: look once more (waiting for the lock, whose holder may
    // have looked before that write) now that peers drive the rest.
    owner->Drive();
  }
  std::chrono::nanoseconds SpinBudget() const override { return owner->spin_; }
  void Sleep(std::chrono::nanoseconds timeout) override {
    owner->waiters_asleep_.fetch_add(1, std::memory_order_relaxed);
    owner->SleepUntilWritten(timeout);
    owner->waiters_asleep_.fetch_sub(1, std::memory_order_relaxed);
  }
};

size_t SlotExchange::RegionBytes(int size, size_t slot_bytes) {
  static_assert(sizeof(SlotHeader) == 32, "an 8 B contribution shares the "
                "stamp's cache line");
  const size_t n = static_cast<size_t>(size);
  return kLine + n * kLine +
         n * 2 * RoundUp(sizeof(SlotHeader) + slot_bytes, kLine);
}

SlotExchange::SlotExchange(void* region, int rank, int size,
                           size_t slot_bytes, std::chrono::nanoseconds spin,
                           ExchangeDriver* driver, PublishHook on_publish)
    : region_(static_cast<char*>(region)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      slot_stride_(RoundUp(sizeof(SlotHeader) + slot_bytes, kLine)),
      spin_(spin),
      driver_(driver),
      on_publish_(on_publish),
      slots_(2 * static_cast<size_t>(size)) {
  // Every slot's address, by parity then rank: the polls read them for
  // every rank on every call.
  char* first = region_ + kLine + static_cast<size_t>(size) * kLine;
  for (int r = 0; r < size; ++r) {
    for (size_t parity = 0; parity < 2; ++parity) {
      slots_[parity * static_cast<size_t>(size) + static_cast<size_t>(r)] =
          reinterpret_cast<SlotHeader*>(
              first + (static_cast<size_t>(r) * 2 + parity) * slot_stride_);
    }
  }
}

SlotExchange::~SlotExchange() {
  Abort(absl::CancelledError("the exchange was destroyed"));
}

SlotExchange::Wake* SlotExchange::wake() const {
  return reinterpret_cast<Wake*>(region_);
}

SlotExchange::RankFlags* SlotExchange::FlagsOf(int rank) const {
  return reinterpret_cast<RankFlags*>(region_ + kLine +
                                      static_cast<size_t>(rank) * kLine);
}

// TSAN does not model fences, so a TSAN build stamps Run's slots with a
// seq_cst exchange too, and its FullBarrier does nothing more.
#if defined(__SANITIZE_THREAD__)
constexpr bool kReleaseStamps = false;
#else
constexpr bool kReleaseStamps = true;
#endif

// A full barrier (StoreLoad included). On x86 a locked add to the stack,
// as the Linux kernel's smp_mb(): GCC's seq_cst fence is an mfence, which
// also waits for earlier loads and costs more on AMD cores.
inline void FullBarrier() {
#if defined(__x86_64__)
  asm volatile("lock; orl $0, -4(%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void SlotExchange::WakeSleepers() {
  // The write before this (a stamp or an aborted flag) is a seq_cst
  // exchange, and a sleeper counts itself (seq_cst) before its last look
  // at the stamps and flags (seq_cst loads): one of the two sees the
  // other. (A fence would say it more directly, but TSAN rejects fences;
  // on x86 the exchange is the barrier either way and the loads are plain
  // moves.)
  if (wake()->sleepers.load(std::memory_order_seq_cst) == 0) return;
  wake()->generation.fetch_add(1, std::memory_order_seq_cst);
  FutexWakeAll(&wake()->generation, FutexScope::kShared);
}

void SlotExchange::WakeSleepersAfterReleaseStamp() {
  // The stamp was a release store: the barrier orders it before the load
  // of the sleepers' count, as the seq_cst exchange does in WakeSleepers
  // (the store-buffering pattern, a full barrier on this side, seq_cst
  // operations on the sleeper's).
  if (kReleaseStamps) FullBarrier();
  WakeSleepers();
}

template <class Look>
void SlotExchange::SleepUnless(std::chrono::nanoseconds timeout, Look look) {
  wake()->sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t generation =
      wake()->generation.load(std::memory_order_seq_cst);
  // A last look after counting in: a write before the count is seen here,
  // a write after it sees the count and bumps the generation.
  if (!look()) {
    FutexWait(&wake()->generation, generation, timeout, FutexScope::kShared);
  }
  wake()->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void SlotExchange::SleepUntilWritten(std::chrono::nanoseconds timeout) {
  SleepUnless(timeout, [this] { return Progress(); });
}

absl::Status SlotExchange::BadInput(const ExchangeCall& call) const {
  const ExchangeInput& input = call.input;
  if (input.bytes > slot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange of ", input.bytes, " bytes; slots hold ",
                     slot_bytes_));
  }
  if (input.bytes > 0 && (input.data == nullptr) == (input.fill == nullptr)) {
    return absl::InvalidArgumentError(
        "exchange: bytes need either data or a fill function, not both");
  }
  if (call.finish == nullptr) {
    return absl::InvalidArgumentError("exchange: null finish function");
  }
  if (call.context_bytes > kMaxContextBytes ||
      (call.context == nullptr && call.context_bytes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange: context of ", call.context_bytes,
                     " bytes (at most ", kMaxContextBytes, ", not null)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Request> SlotExchange::Start(const ExchangeCall& call) {
  if (!InputOk(call)) return BadInput(call);
  std::shared_ptr<Op> op;
  Completions done;
  bool finished_here = false;
  bool published = false;
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (!aborted_.ok()) {
      op = std::allocate_shared<Op>(RecyclingAllocator<Op>(), call.deadline,
                                    this);
      op->Complete(aborted_);
      return Request(std::move(op));
    }
    const uint64_t exchange = next_exchange_++;
    // Nothing ahead of it (the usual case): the slot is written first,
    // straight from the caller's input, and the op that tracks the
    // exchange is made while the peers read it. Every instruction before
    // the write is on the critical path of a small exchange (a peer waits
    // for it); the ones after overlap the line's way to the peer.
    const bool first_in_line = queue_.empty() && !running_;
    if (first_in_line) {
      Publish(exchange, call.tag, call.signature, call.input, call.context,
              /*release=*/false);
    }
    op =
        std::allocate_shared<Op>(RecyclingAllocator<Op>(), call.deadline, this);
    op->exchange = exchange;
    op->tag = call.tag;
    op->signature = call.signature;
    op->input = call.input;
    op->finish = call.finish;
    if (call.context_bytes > 0) {
      std::memcpy(op->context, call.context, call.context_bytes);
    }
    if (first_in_line) {
      // Finished at once, without the queue, if the peers are there
      // already. Half the calls of a 2-rank group finish here.
      absl::Status failure;  // AdvanceLocked finds it again and acts on it.
      finished_here = Ready(*op, &failure);
      if (finished_here) Finish(*op);
    }
    if (!finished_here) {
      queue_.push_back(op);
      pending_.store(true, std::memory_order_seq_cst);
      const uint64_t published_before = published_;
      AdvanceLocked(&done);
      published = published_ != published_before;
    }
    published |= first_in_line;
  }
  if (published) Published();
  if (finished_here) {
    // Never queued nor handed out: no other thread has seen it.
    op->CompleteUnshared(absl::OkStatus());
  } else {
    Complete(done);
  }
  return Request(std::move(op));
}

absl::Status SlotExchange::Run(const ExchangeCall& call) {
  if (!InputOk(call)) return BadInput(call);
  uint64_t exchange = 0;
  {
    std::unique_lock<SpinLock> lock(mu_);
    if (!aborted_.ok()) return aborted_;
    if (!queue_.empty() || running_) {
      // Exchanges ahead of it (started, or another thread's Run): it
      // queues behind them as Start's would.
      lock.unlock();
      absl::StatusOr<Request> started = Start(call);
      if (!started.ok()) return started.status();
      absl::Status waited = started->Wait();
      if (absl::IsDeadlineExceeded(waited)) Abort(waited);
      return waited;
    }
    exchange = next_exchange_++;
    // The slot first: every instruction before it delays the peers.
    // AwaitRun wakes sleepers.
    Publish(exchange, call.tag, call.signature, call.input, call.context,
            /*release=*/true);
    running_ = true;
    running_exchange_ = exchange;
  }
  // Outside the lock: a Start meanwhile queues (AdvanceLocked publishes
  // nothing while running_), and Abort can fail this exchange (it marks
  // this rank aborted, which AwaitRun watches).
  absl::Status waited =
      AwaitRun(exchange, call.tag, call.signature, call.deadline);
  const bool ready = waited.ok() && !FlagsOf(rank_)->aborted.load(
                                        std::memory_order_acquire);
  if (ready) Finish(exchange, call.input, call.finish, call.context);
  Completions done;
  // The peers are driven once this Run is over (its slot is written and
  // mu_'s lock below is the barrier the hook needs): a peer whose exchange
  // this one completed is finished then, not before this rank's own.
  bool published = true;
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (waited.ok() && (!ready || !aborted_.ok())) {
      // Aborted meanwhile, by Abort or a failed Start: the peers were told
      // this exchange is abandoned (MarkAbortedLocked), so it fails here
      // too, even if its finish ran.
      waited = aborted_;
    } else if (!waited.ok() && aborted_.ok()) {
      // Out of step, a peer aborted, or the deadline: nothing can finish
      // this exchange, and its slot is published.
      FailLocked(waited, &done);  // While running_: it names this exchange.
    }
    running_ = false;
    // What queued behind it, if anything did (usually nothing).
    if (aborted_.ok() && !queue_.empty()) AdvanceLocked(&done);
  }
  if (published) Published();
  if (!done.finished.empty() || !done.failed.empty()) Complete(done);
  return waited;
}

absl::Status SlotExchange::AwaitRun(uint64_t exchange, uint64_t tag,
                                    uint64_t signature, absl::Time deadline) {
  int first_missing = 0;
  absl::Status failure;
  const std::atomic<uint32_t>& self_aborted = FlagsOf(rank_)->aborted;
  // True once there is nothing more to wait for.
  auto settled = [&] {
    return Ready(exchange, tag, signature, &first_missing, &failure) ||
           !failure.ok() ||
           self_aborted.load(std::memory_order_relaxed) != 0;
  };
  // As RequestState::Wait (wait_phases.h): polls, then sleep until a slot
  // is written.
  // Run published this rank's slot without waking sleepers (Publish): that
  // happens after the first few polls, by when the stamp has left the
  // store buffer and the fence costs little, and before any long wait, so
  // a peer asleep on this rank's stamp is woken within a few polls of it.
  // (Waking after the finish instead, when the peers were there within
  // those polls, measured no different.)
  auto poll = [&] { return settled() ? WaitPoll::kDone : WaitPoll::kIdle; };
  if (PollBeforeSleeping(poll, [this] { WakeSleepersAfterReleaseStamp(); },
                         spin_, deadline)) {
    return failure;
  }
  waiters_asleep_.fetch_add(1, std::memory_order_relaxed);
  while (true) {
    const absl::Duration left = deadline - FastNow();
    if (left <= absl::ZeroDuration()) {
      waiters_asleep_.fetch_sub(1, std::memory_order_relaxed);
      return absl::DeadlineExceededError(absl::StrCat(
          "shared-memory exchange ", exchange, " (tag ", tag,
          ") did not complete before its deadline; waiting for rank ",
          first_missing));
    }
    SleepUnless(
        absl::ToChronoNanoseconds(std::min(left, absl::Milliseconds(1))),
        settled);
    if (settled()) break;
  }
  waiters_asleep_.fetch_sub(1, std::memory_order_relaxed);
  return failure;
}

void SlotExchange::Publish(uint64_t exchange, uint64_t tag,
                           uint64_t signature, const ExchangeInput& input,
                           const void* context, bool release) {
  SlotHeader* slot = SlotOf(rank_, exchange);
  slot->tag = tag;
  slot->signature = signature;
  slot->bytes = input.bytes;
  if (input.bytes > 0) {
    if (input.fill != nullptr) {
      input.fill(slot->data(), input.bytes, context);
    } else {
      std::memcpy(slot->data(), input.data, input.bytes);
    }
  }
  if (release && kReleaseStamps) {
    // Run's: a release store, not a seq_cst exchange. A locked
    // instruction waits until the line is this core's, a full transfer
    // from the peer that polls it, where the store lets this core go on to
    // its look at the peers' slots, whose lines travel meanwhile (docs/design/tuning-history.md).
    slot->stamp.store(exchange + 1, std::memory_order_release);
  } else {
    slot->stamp.exchange(exchange + 1, std::memory_order_seq_cst);
  }
  published_ = exchange + 1;
  if (!release) WakeSleepers();
}

bool SlotExchange::Ready(Op& op, absl::Status* failure) const {
  return Ready(op.exchange, op.tag, op.signature, &op.first_missing, failure);
}

void SlotExchange::PreferMismatch(uint64_t exchange, uint64_t tag,
                                  uint64_t signature,
                                  absl::Status* failure) const {
  for (int r = 0; r < size_; ++r) {
    const SlotHeader* slot = SlotOf(r, exchange);
    if (slot->stamp.load(std::memory_order_acquire) == exchange + 1 &&
        slot->tag == tag && slot->signature != signature) {
      *failure = PackedMismatch(
          absl::StrCat("shared-memory exchange ", exchange), rank_, signature,
          r, slot->signature);
      return;
    }
  }
}

bool SlotExchange::Ready(uint64_t exchange, uint64_t tag, uint64_t signature,
                         int* first_missing, absl::Status* failure) const {
  for (int r = *first_missing; r < size_; ++r) {
    const SlotHeader* slot = SlotOf(r, exchange);
    uint64_t stamp = slot->stamp.load(std::memory_order_seq_cst);
    bool aborted = false;
    if (stamp != exchange + 1) {
      aborted = FlagsOf(r)->aborted.load(std::memory_order_seq_cst) != 0;
      // Rank r may have written this exchange's slot, finished and left
      // (its communicator destroyed, which aborts it) since the load
      // above. It writes its stamp before its aborted flag, so a second
      // look after seeing the flag tells the two apart. (Without it, the
      // conformance suite under tsan failed now and then with "rank 1
      // aborted" on a rank whose peers had all succeeded.)
      if (aborted) stamp = slot->stamp.load(std::memory_order_seq_cst);
    }
    if (stamp == exchange + 1) {
      if (slot->tag != tag) {
        *failure = absl::InternalError(absl::StrCat(
            "shared-memory exchange ", exchange, ": rank ", r,
            " is in operation ", slot->tag, ", rank ", rank_, " in ", tag,
            " (the ranks called collectives in different orders, or chose "
            "different algorithms: every rank needs the same "
            "RELAY_ALGORITHM)"));
        return false;
      }
      if (slot->signature != signature) {
        *failure = PackedMismatch(
            absl::StrCat("shared-memory exchange ", exchange), rank_,
            signature, r, slot->signature);
        return false;
      }
      // A rank that wrote its slot and then aborted before finishing this
      // exchange has left it: its own request failed, so the peers' must.
      const RankFlags& flags = *FlagsOf(r);
      if (flags.aborted.load(std::memory_order_acquire) != 0 &&
          flags.abandoned_from.load(std::memory_order_relaxed) <= exchange) {
        // Rank r may have aborted because a rank that never came did (its
        // transport fails on a peer's abort): name that rank, the cause,
        // where there is one.
        int cause = -1;
        for (int q = 0; q < size_ && cause < 0; ++q) {
          if (q != rank_ && q != r &&
              SlotOf(q, exchange)->stamp.load(std::memory_order_seq_cst) != exchange + 1 &&
              FlagsOf(q)->aborted.load(std::memory_order_seq_cst) != 0) {
            cause = q;
          }
        }
        *failure = absl::UnavailableError(
            cause < 0 ? absl::StrCat("rank ", r,
                                     " aborted before finishing shared-memory exchange ",
                                     exchange)
                      : absl::StrCat("rank ", cause, " aborted (shared-memory exchange ",
                                     exchange, ")"));
        PreferMismatch(exchange, tag, signature, failure);
        return false;
      }
      *first_missing = r + 1;
      continue;
    }
    if (stamp > exchange + 1) {
      *failure = absl::InternalError(absl::StrCat(
          "shared-memory exchange ", exchange, ": rank ", r,
          " is already at exchange ", stamp - 1));
      return false;
    }
    // Rank r is not there yet; if it aborted, it never will be. Only the
    // missing rank counts: a rank that contributed and then left (its
    // communicator destroyed once its own request completed, which aborts
    // it) has done its part of this exchange, and a later exchange that
    // needs it finds it missing then.
    if (aborted) {
      *failure = absl::UnavailableError(absl::StrCat(
          "rank ", r, " aborted (shared-memory exchange ", exchange, ")"));
      PreferMismatch(exchange, tag, signature, failure);
    }
    return false;
  }
  return true;
}

void SlotExchange::Finish(uint64_t exchange, const ExchangeInput& own,
                          ExchangeFinishFn finish, const void* context) const {
  absl::InlinedVector<Contribution, 16> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    SlotHeader* slot = SlotOf(r, exchange);
    all[static_cast<size_t>(r)] = {slot->data(),
                                   static_cast<size_t>(slot->bytes)};
    if (r == rank_) {
      // Read where the rank copied it from (ExchangeFinishFn says why).
      if (own.data != nullptr) all[static_cast<size_t>(r)].data = own.data;
      continue;
    }
    // The peers' lines past the stamp's, all asked for at once, before the
    // finish reads them one after another: each is a cross-core transfer
    // (docs/design/tuning-history.md). The first 16 lines: past them the reads stream.
    const char* data = slot->data();
    const size_t bytes = std::min<size_t>(slot->bytes, 16 * kLine);
    for (size_t at = kLine - sizeof(SlotHeader); at < bytes; at += kLine) {
      __builtin_prefetch(data + at);
    }
  }
  finish(absl::MakeConstSpan(all), context);
}

void SlotExchange::Finish(Op& op) {
  Finish(op.exchange, op.input, op.finish, op.context);
}

void SlotExchange::MarkAbortedLocked() {
  uint64_t abandoned_from = next_exchange_;
  if (running_) abandoned_from = running_exchange_;
  if (!queue_.empty()) {
    abandoned_from = std::min(abandoned_from, queue_.front()->exchange);
  }
  RankFlags& flags = *FlagsOf(rank_);
  flags.abandoned_from.store(abandoned_from, std::memory_order_relaxed);
  flags.aborted.exchange(1, std::memory_order_seq_cst);
  WakeSleepers();
}

void SlotExchange::FailLocked(absl::Status failure, Completions* done) {
  aborted_ = failure;
  done->failure = std::move(failure);
  MarkAbortedLocked();
  for (auto& op : queue_) done->failed.push_back(std::move(op));
  queue_.clear();
  pending_.store(false, std::memory_order_relaxed);
}

void SlotExchange::AdvanceLocked(Completions* done) {
  // A Run's exchange is ahead of everything queued; it advances the queue
  // itself once it has finished.
  if (running_) return;
  while (!queue_.empty()) {
    Op& op = *queue_.front();
    if (published_ == op.exchange) {
      Publish(op.exchange, op.tag, op.signature, op.input, op.context,
              /*release=*/false);
    }
    if (!Ready(op, &done->failure)) break;
    Finish(op);
    done->finished.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  if (!done->failure.ok()) {
    // The exchanges are out of step for good: nothing queued or later can
    // finish either.
    FailLocked(done->failure, done);
  }
  // Written only when it changes: peers' threads read its line after every
  // slot they write (PublishHook), and a waiter advances on every poll.
  const bool pending = !queue_.empty();
  if (pending_.load(std::memory_order_relaxed) != pending) {
    pending_.store(pending, std::memory_order_relaxed);
  }
}

void SlotExchange::Complete(Completions& done) {
  for (auto& op : done.finished) op->Complete(absl::OkStatus());
  for (auto& op : done.failed) op->Complete(done.failure);
  // A waiter on one of them sleeps on slot writes (Op::Sleep), not on the
  // request: when another thread finished it, nothing else would wake it.
  if ((!done.finished.empty() || !done.failed.empty()) &&
      waiters_asleep_.load(std::memory_order_seq_cst) > 0) {
    wake()->generation.fetch_add(1, std::memory_order_seq_cst);
    FutexWakeAll(&wake()->generation, FutexScope::kShared);
  }
}

bool SlotExchange::Progress() {
  if (!pending_.load(std::memory_order_relaxed)) return false;
  std::unique_lock<SpinLock> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  return AdvanceAndUnlock(lock);
}

bool SlotExchange::Drive() {
  if (!pending_.load(std::memory_order_seq_cst)) return false;
  std::unique_lock<SpinLock> lock(mu_);
  return AdvanceAndUnlock(lock);
}

bool SlotExchange::AdvanceAndUnlock(std::unique_lock<SpinLock>& lock) {
  Completions done;
  const uint64_t published_before = published_;
  AdvanceLocked(&done);
  const bool published = published_ != published_before;
  lock.unlock();
  if (published) Published();
  Complete(done);
  return !done.finished.empty();
}

void SlotExchange::Abort(absl::Status reason) {
  if (reason.ok()) reason = absl::CancelledError("aborted");
  std::deque<std::shared_ptr<Op>> queued;
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (!aborted_.ok()) return;
    aborted_ = reason;
    MarkAbortedLocked();
    queued.swap(queue_);
    pending_.store(false, std::memory_order_relaxed);
  }
  for (auto& op : queued) op->Complete(reason);
}

}  // namespace relay
