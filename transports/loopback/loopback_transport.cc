#include "transports/loopback/loopback_transport.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/fixed_array.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/fingerprint.h"
#include "runtime/spin_lock.h"
#include "runtime/status_macros.h"
#include "transports/loopback/device_messages.h"

namespace relay {
namespace {

// Large messages are copied by the receiving rank's own thread when it is
// waiting anyway (a hand-off), so that in an exchange each rank does its
// own copy or reduction and the two run in parallel; otherwise whichever
// rank arrives second would do both. Small ones are copied at once by
// whichever side matches: a hand-off would only add latency. Waiting means
// a thread inside Wait on the rank's operations that polled recently; the
// last such thread to leave does what was handed over meanwhile
// (docs/design/progress-without-waiters.md).
constexpr size_t kHandoffBytes = 64 << 10;
// A rank counts as waiting if it polled this recently.
constexpr int64_t kPollWindowNs = 20'000;
// A hand-off its receiver has not picked up in this long is taken back and
// done by its sender (the receiver may have stopped waiting).
constexpr int64_t kStaleHandoffNs = 50'000;
// A waiting rank's Progress reads the clock on one poll in this many.
constexpr uint32_t kPollsPerClockRead = 16;
// Each rank's exchange slot (the shm algorithm), as over UCX's segment.
// 64 KB: the conformance matrix's all_to_all on 16 ranks contributes 38 KB.
constexpr size_t kLoopbackExchangeBytes = 64 << 10;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

namespace {

// A loopback request: waiting on it lets its rank do the copies handed to
// it, and complete its own rendezvous (Ready).
class LoopbackRequest final : public RequestState {
 public:
  LoopbackRequest(absl::Time deadline,
                  std::shared_ptr<const LoopbackRankEnd> end)
      : RequestState(deadline), end_(std::move(end)) {}

  // A rendezvous's work for this request is over (its outputs are written;
  // released to whoever completes it). Returns true when the caller is to
  // complete it, false when its rank's thread, which is polling it, will:
  // the request's callbacks (telemetry, the flight record) then run on that
  // rank's own core, and the completing thread touches no more of it than
  // this word.
  bool Ready() {
    if (hand_over_.fetch_or(kReady, std::memory_order_acq_rel) & kPolling) {
      return false;
    }
    return Claim();
  }

 protected:
  bool Progress() override;
  void StartedPolling() override;
  void FinishedPolling() override;
  std::chrono::nanoseconds SpinBudget() const override {
    return end_->spin_budget;
  }
  void StoppedPolling() override {
    // Ready may have seen the flag and left the completion to this thread.
    if ((hand_over_.fetch_and(~kPolling, std::memory_order_acq_rel) &
         kReady) != 0 &&
        Claim()) {
      Complete(absl::OkStatus());
    }
  }

 private:
  static constexpr uint32_t kPolling = 1, kReady = 2, kClaimed = 4;
  // Exactly one of Ready's caller and this request's rank completes it.
  bool Claim() {
    return (hand_over_.fetch_or(kClaimed, std::memory_order_acq_rel) &
            kClaimed) == 0;
  }
  // Ready's completion is the only one left to the polling rank.
  bool CompleteIfReady() {
    if ((hand_over_.load(std::memory_order_acquire) & kReady) == 0 ||
        !Claim()) {
      return false;
    }
    Complete(absl::OkStatus());
    return true;
  }

  const std::shared_ptr<const LoopbackRankEnd> end_;
  // kPolling: a thread waits on this request (Wait, between StartedPolling
  // and StoppedPolling); kReady: its rendezvous is over; kClaimed: someone
  // is completing it. Every change is a read-modify-write, so Ready and the
  // polling thread agree on who sees whom.
  std::atomic<uint32_t> hand_over_{0};
};

// LoopbackFabric::DriveExchanges under way on this thread, innermost first
// (a callback it runs may write a slot of another fabric).
struct DriveFrame {
  const void* fabric;
  bool again;
  DriveFrame* outer;
};
thread_local DriveFrame* drive_frames = nullptr;

}  // namespace

// The wiring shared by the ranks of one group: one mailbox per destination
// rank, holding the sends that arrived before their receive and the receives
// posted before their send, both in FIFO order per (source, tag).
class LoopbackFabric {
  struct Gathering;  // One Rendezvous in progress (below).

 public:
  // A device operation's request is its batch (device_messages.h), and
  // `op` its index there; -1 for host memory.
  struct PendingSend {
    ConstBuffer data;
    std::shared_ptr<RequestState> request;
    int op = -1;
  };
  struct PendingRecv {
    ConstBuffer local;  // The reduce operand; unused when reduce is null.
    Buffer dst;
    ReduceFn reduce;
    std::shared_ptr<RequestState> request;
    int op = -1;
  };

  explicit LoopbackFabric(int size)
      : size_(size),
        mailboxes_(MakeEach<Mailbox>(size)),
        lost_(MakeEach<LostRank>(size)),
        copy_lanes_(MakeEach<loopback_device::CopyLane>(size)),
        exchange_region_bytes_(
            SlotExchange::RegionBytes(size, kLoopbackExchangeBytes)),
        // Anonymous memory: zeroed, page-aligned, and only the pages the
        // shm algorithm touches are ever backed (most groups never use it).
        exchange_region_(mmap(nullptr, exchange_region_bytes_,
                              PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
        exchanges_(static_cast<size_t>(size)) {
    for (std::atomic<SlotExchange*>& at : exchanges_) at.store(nullptr);
  }

  ~LoopbackFabric() {
    if (exchange_region_ != MAP_FAILED) {
      munmap(exchange_region_, exchange_region_bytes_);
    }
  }

  int size() const { return size_; }
  // The stream `rank`'s incoming device messages are copied on.
  loopback_device::CopyLane& copy_lane(int rank) { return *copy_lanes_[rank]; }
  // The slots every rank's SlotExchange shares; null if it could not be
  // mapped (then Exchange is not offered).
  void* exchange_region() const {
    return exchange_region_ == MAP_FAILED ? nullptr : exchange_region_;
  }

  // `rank`'s SlotExchange over exchange_region(), made by its transport
  // once and kept until the fabric goes: a peer's thread may be inside it
  // (DriveExchanges) while that transport is destroyed, which aborts it.
  SlotExchange* MakeExchange(int rank, std::chrono::nanoseconds spin) {
    auto exchange = std::make_unique<SlotExchange>(
        exchange_region(), rank, size_, kLoopbackExchangeBytes, spin,
        /*driver=*/nullptr, PublishHook{&DriveExchangesOf, this});
    SlotExchange* made = exchange.get();
    std::lock_guard<std::mutex> lock(exchanges_mu_);
    owned_exchanges_.push_back(std::move(exchange));
    exchanges_[static_cast<size_t>(rank)].store(made,
                                                std::memory_order_release);
    return made;
  }

  // A rank wrote its slot: advances every rank's queued exchanges that no
  // waiter attends, on this thread, until none moves. No rank has a
  // progress thread, so without this an exchange whose rank does not wait
  // on it (it registered an OnDone callback, or waits on another request)
  // would never finish; with it the last contribution to arrive finishes
  // such exchanges, as the direct algorithm's last arrival runs its
  // combine. Callbacks it runs may start exchanges, whose hook only asks the
  // loop here to go round again.
  void DriveExchanges() {
    for (DriveFrame* f = drive_frames; f != nullptr; f = f->outer) {
      if (f->fabric == this) {
        f->again = true;
        return;
      }
    }
    DriveFrame frame{this, false, drive_frames};
    drive_frames = &frame;
    do {
      frame.again = false;
      for (std::atomic<SlotExchange*>& at : exchanges_) {
        SlotExchange* exchange = at.load(std::memory_order_acquire);
        // A queue with a waiter is its waiter's to advance (it polls, or
        // wakes on the slot just written): driving it too would contend for
        // its lock and run its rank's finish on this thread.
        if (exchange != nullptr && exchange->pending() &&
            !exchange->attended()) {
          exchange->Drive();
        }
      }
    } while (frame.again);
    drive_frames = frame.outer;
  }

  // Sender side: match the oldest receive `dst` posted for (src, tag), or
  // queue the send.
  void Send(int src, int dst, Tag tag, PendingSend send) {
    Mailbox& box = *mailboxes_[dst];
    PendingRecv recv;
    absl::Status lost;  // Completed outside the lock (callbacks may abort).
    {
      std::lock_guard<SpinLock> lock(box.mu);
      lost = LostStatus(/*self=*/src, /*peer=*/dst);
      if (lost.ok()) {
        auto it = box.recvs.find(Key{src, tag});
        if (it == box.recvs.end()) {
          box.sends[Key{src, tag}].push_back(std::move(send));
          return;
        }
        recv = std::move(it->second.front());
        it->second.erase(it->second.begin());
        if (it->second.empty()) box.recvs.erase(it);
        BeginDelivery(src, dst);
        if (send.op < 0 && send.data.bytes() >= kHandoffBytes) {
          const int64_t now = NowNs();
          if (box.waiting > 0 &&
              now - box.last_poll_ns.load(std::memory_order_relaxed) <
                  kPollWindowNs) {
            box.handoffs.push_back(
                {src, std::move(send), std::move(recv), now});
            box.handoff_count.fetch_add(1, std::memory_order_release);
            lost_[src]->handoffs_out.fetch_add(1, std::memory_order_relaxed);
            return;
          }
        }
      }
    }
    if (!lost.ok()) {
      send.request->Complete(std::move(lost));
      return;
    }
    Deliver(src, dst, send, recv);
  }

  // Transport::Rendezvous for `rank`. Once every rank has arrived, a
  // single part runs on the last arrival's thread at once; several are put
  // in working_, where they run (RunPart) on the last arrival's thread and
  // on those of waiting ranks (Progress), and whoever finishes the last
  // part completes every request (or hands it to its polling rank). The
  // work counts in rendezvous_running_, so an Abort waits until it is over.
  void Rendezvous(int rank, Tag tag, const void* record, size_t record_bytes,
                  uint64_t signature, Transport::CombineFn combine,
                  size_t parts, std::shared_ptr<LoopbackRequest> request) {
    std::unique_ptr<Gathering> single;  // All arrived, one part.
    Gathering* split = nullptr;         // All arrived, in working_.
    std::unique_ptr<Gathering> mismatched;  // All arrived, calls differ.
    absl::Status mismatch;
    absl::Status lost;  // Completed outside the lock (callbacks may abort).
    {
      // One critical section for the check and the arrival, so an Abort's
      // sweep either sees this arrival or this arrival sees the loss.
      std::lock_guard<SpinLock> lock(rendezvous_mu_);
      if (any_lost_.load(std::memory_order_acquire)) {
        for (int r = 0; r < size() && lost.ok(); ++r) lost = LostStatus(rank, r);
      }
      if (lost.ok()) {
        // Usually one or two gatherings are open (ranks run at most a few
        // collectives ahead), so a scan beats a hash map.
        auto open = std::find_if(
            gatherings_.begin(), gatherings_.end(),
            [&](const std::unique_ptr<Gathering>& g) { return g->tag == tag; });
        if (open == gatherings_.end()) {
          if (spare_gatherings_.empty()) {
            gatherings_.push_back(std::make_unique<Gathering>(size()));
          } else {
            gatherings_.push_back(std::move(spare_gatherings_.back()));
            spare_gatherings_.pop_back();
          }
          open = gatherings_.end() - 1;
          (*open)->tag = tag;
        }
        Gathering& g = **open;
        Gathering::Arrival& a = g.arrivals[rank];
        std::memcpy(a.record, record, record_bytes);
        a.signature = signature;
        a.request = std::move(request);
        if (++g.arrived < size()) return;
        // The records meet here anyway: ranks that disagree on the call
        // fail before anything reads past a shorter buffer.
        mismatch = g.Mismatch();
        if (!mismatch.ok()) {
          mismatched = std::move(*open);
        } else {
          g.combine = combine;
          g.parts = parts;
          g.next_part = 0;
          g.parts_done.store(0, std::memory_order_relaxed);
          if (parts == 1) {
            // Small collectives: no list, no claims, no other thread
            // involved.
            single = std::move(*open);
          } else {
            split = open->get();
            working_.push_back(std::move(*open));
            working_count_.fetch_add(1, std::memory_order_release);
          }
          // On this lock's cache line, which this thread holds now.
          rendezvous_running_.fetch_add(1, std::memory_order_relaxed);
        }
        *open = std::move(gatherings_.back());
        gatherings_.pop_back();
      }
    }
    if (!lost.ok()) {
      request->Complete(std::move(lost));
      return;
    }
    if (mismatched != nullptr) {
      for (Gathering::Arrival& a : mismatched->arrivals) {
        a.request->Complete(mismatch);
      }
      mismatched->Clear();
      std::lock_guard<SpinLock> lock(rendezvous_mu_);
      if (spare_gatherings_.size() < kSpareGatherings) {
        spare_gatherings_.push_back(std::move(mismatched));
      }
      return;
    }
    if (single != nullptr) {
      single->combine(absl::MakeConstSpan(single->records), 0, 1);
      CompleteGathering(std::move(single));
      return;
    }
    // The last arrival runs parts until none is left, so the rendezvous
    // completes even if no other rank ever waits.
    while (RunPart(split)) {
    }
  }

  // Runs one unclaimed part of `only` (or, when null, of any worked
  // gathering); false if there was none. Claims go through working_ under
  // the lock: a gathering whose parts are all claimed may be finished and
  // recycled by another thread at any moment.
  bool RunPart(Gathering* only) {
    Gathering* g = nullptr;
    size_t part = 0;
    {
      std::lock_guard<SpinLock> lock(rendezvous_mu_);
      for (const std::unique_ptr<Gathering>& w : working_) {
        if ((only == nullptr || w.get() == only) && w->next_part < w->parts) {
          g = w.get();
          part = g->next_part++;
          break;
        }
      }
    }
    if (g == nullptr) return false;
    // Alive until parts_done reaches parts, which needs this part; so read
    // nothing of it after the increment (another thread may finish the
    // last part meanwhile, and recycle or free it: tsan caught a read of
    // g->parts there).
    const size_t parts = g->parts;
    g->combine(absl::MakeConstSpan(g->records), part, parts);
    if (g->parts_done.fetch_add(1, std::memory_order_acq_rel) + 1 == parts) {
      std::unique_ptr<Gathering> done;
      {
        std::lock_guard<SpinLock> lock(rendezvous_mu_);
        auto it = std::find_if(
            working_.begin(), working_.end(),
            [&](const std::unique_ptr<Gathering>& w) { return w.get() == g; });
        done = std::move(*it);
        *it = std::move(working_.back());
        working_.pop_back();
        working_count_.fetch_sub(1, std::memory_order_relaxed);
      }
      CompleteGathering(std::move(done));
    }
    return true;
  }

  // Completes every rank's request of `done`, whose parts have all run
  // (or leaves it to its rank's polling thread: LoopbackRequest::Ready),
  // and recycles it.
  void CompleteGathering(std::unique_ptr<Gathering> done) {
    for (Gathering::Arrival& a : done->arrivals) {
      if (a.request->Ready()) a.request->MarkDone(absl::OkStatus(), &a.callbacks);
    }
    rendezvous_running_.fetch_sub(1, std::memory_order_release);
    for (Gathering::Arrival& a : done->arrivals) {
      for (DoneCallback& cb : a.callbacks) std::move(cb)(absl::OkStatus());
    }
    // Recycled: a rendezvous per small collective would otherwise allocate
    // and free its records every time.
    done->Clear();
    std::lock_guard<SpinLock> lock(rendezvous_mu_);
    if (spare_gatherings_.size() < kSpareGatherings) {
      spare_gatherings_.push_back(std::move(done));
    }
  }

  // A thread of `rank` waits (RequestState::Wait) and will poll until
  // FinishedWaiting: hand-offs go only to a rank with one (a Test() polls
  // once and may never come back).
  void StartedWaiting(int rank) {
    Mailbox& box = *mailboxes_[rank];
    std::lock_guard<SpinLock> lock(box.mu);
    ++box.waiting;
  }

  // A waiting thread of `rank` is done. If it was the last, it does what
  // was handed to the rank meanwhile: nobody else may come to do it (both
  // sides of a message may be finished by OnDone alone).
  void FinishedWaiting(int rank) {
    Mailbox& box = *mailboxes_[rank];
    std::vector<Handoff> left;
    {
      std::lock_guard<SpinLock> lock(box.mu);
      if (--box.waiting == 0 && !box.handoffs.empty()) {
        left.swap(box.handoffs);
        box.handoff_count.store(0, std::memory_order_relaxed);
      }
    }
    for (Handoff& h : left) RunHandoff(h, rank);
  }

  // Runs on a thread of `rank` that is waiting: does the copies handed to
  // it, and takes back its own hand-offs that their receivers left alone.
  bool Progress(int rank) {
    Mailbox& box = *mailboxes_[rank];
    // The poll time only tells senders of large messages (kPollWindowNs,
    // 20 us) that this rank is waiting, so it is refreshed every few polls:
    // a clock read costs 30 ns on a 2-core VM, about what one poll does.
    const uint32_t polls = box.polls.load(std::memory_order_relaxed);
    box.polls.store(polls + 1, std::memory_order_relaxed);
    if (polls % kPollsPerClockRead == 0) {
      box.last_poll_ns.store(NowNs(), std::memory_order_relaxed);
    }
    bool worked = false;
    if (box.handoff_count.load(std::memory_order_acquire) > 0) {
      std::vector<Handoff> mine;
      {
        std::lock_guard<SpinLock> lock(box.mu);
        mine.swap(box.handoffs);
        box.handoff_count.store(0, std::memory_order_relaxed);
      }
      for (Handoff& h : mine) RunHandoff(h, rank);
      worked = !mine.empty();
    }
    if (lost_[rank]->handoffs_out.load(std::memory_order_relaxed) > 0) {
      worked |= ReclaimStaleHandoffs(rank);
    }
    // A rendezvous split into parts: a waiting rank takes one.
    if (working_count_.load(std::memory_order_acquire) > 0) {
      worked |= RunPart(nullptr);
    }
    return worked;
  }

  // Receiver side: match the oldest send from `src` on `tag`, or post.
  void Recv(int src, int dst, Tag tag, PendingRecv recv) {
    Mailbox& box = *mailboxes_[dst];
    PendingSend send;
    absl::Status lost;  // Completed outside the lock (callbacks may abort).
    {
      std::lock_guard<SpinLock> lock(box.mu);
      auto it = box.sends.find(Key{src, tag});
      if (it == box.sends.end()) {
        lost = LostStatus(/*self=*/dst, /*peer=*/src);
        if (lost.ok()) {
          box.recvs[Key{src, tag}].push_back(std::move(recv));
          return;
        }
      }
      if (lost.ok()) {
        send = std::move(it->second.front());
        it->second.erase(it->second.begin());
        if (it->second.empty()) box.sends.erase(it);
        BeginDelivery(src, dst);
      }
    }
    if (!lost.ok()) {
      recv.request->Complete(std::move(lost));
      return;
    }
    Deliver(src, dst, send, recv);
  }

  // Marks `rank` lost and fails everything that involves it: its own
  // pending operations with `reason`, its peers' with Unavailable.
  void Abort(int rank, const absl::Status& reason) {
    {
      std::lock_guard<std::mutex> lock(lost_[rank]->mu);
      if (lost_[rank]->lost.load()) return;
      lost_[rank]->reason = reason;
      lost_[rank]->lost.store(true);
      any_lost_.store(true);
    }
    const absl::Status peer_error = absl::UnavailableError(absl::StrCat(
        "rank ", rank, " left the group: ", reason.message()));
    std::vector<std::pair<std::shared_ptr<RequestState>, absl::Status>> failed;
    std::vector<Handoff> dropped;  // Matched, not yet copied: never will be.
    for (int dst = 0; dst < size(); ++dst) {
      Mailbox& box = *mailboxes_[dst];
      std::lock_guard<SpinLock> lock(box.mu);
      for (auto it = box.handoffs.begin(); it != box.handoffs.end();) {
        if (dst == rank || it->src == rank) {
          it->dst = dst;
          dropped.push_back(std::move(*it));
          it = box.handoffs.erase(it);
          box.handoff_count.fetch_sub(1, std::memory_order_relaxed);
        } else {
          ++it;
        }
      }
      for (auto it = box.recvs.begin(); it != box.recvs.end();) {
        const bool mine = dst == rank, from_lost = it->first.src == rank;
        if (mine || from_lost) {
          for (PendingRecv& r : it->second) {
            failed.emplace_back(r.request, mine ? reason : peer_error);
          }
          box.recvs.erase(it++);
        } else {
          ++it;
        }
      }
      for (auto it = box.sends.begin(); it != box.sends.end();) {
        const bool mine = it->first.src == rank, to_lost = dst == rank;
        if (mine || to_lost) {
          for (PendingSend& s : it->second) {
            failed.emplace_back(s.request, mine ? reason : peer_error);
          }
          box.sends.erase(it++);
        } else {
          ++it;
        }
      }
    }
    // A rendezvous cannot complete without this rank: fail every one.
    {
      std::lock_guard<SpinLock> lock(rendezvous_mu_);
      for (std::unique_ptr<Gathering>& g : gatherings_) {
        for (size_t r = 0; r < g->arrivals.size(); ++r) {
          if (g->arrivals[r].request == nullptr) continue;
          failed.emplace_back(std::move(g->arrivals[r].request),
                              static_cast<int>(r) == rank ? reason : peer_error);
        }
      }
      gatherings_.clear();
    }
    // Hand-offs dropped above will never be copied: stop counting them now
    // (this rank's wait below counts them too), complete them with the rest.
    for (Handoff& h : dropped) {
      failed.emplace_back(h.recv.request, h.dst == rank ? reason : peer_error);
      failed.emplace_back(h.send.request, h.src == rank ? reason : peer_error);
      lost_[h.src]->handoffs_out.fetch_sub(1, std::memory_order_relaxed);
      EndDelivery(h.src);
      EndDelivery(h.dst);
    }
    // Matches made before the sweep may still be copying into or out of
    // this rank's buffers, outside every mailbox lock. Wait for those copies
    // (short, and never blocking) so that once Abort returns nothing touches
    // the rank's buffers. No new match can involve the rank now: Send checks
    // LostStatus, and the sweep above removed every queued send from or to
    // it. The delivering thread marks their requests done before it stops
    // counting, so they are complete when this returns.
    {
      LostRank& me = *lost_[rank];
      std::unique_lock<std::mutex> lock(me.mu);
      me.drained.wait(lock, [&] { return me.deliveries.load() == 0; });
    }
    // Likewise rendezvous whose every rank arrived before the sweep: they
    // may still be combining. No new one can start (arrivals check the
    // lost flags under rendezvous_mu_), so this ends. Their requests are
    // then done, or ready and left to a rank polling them, which completes
    // them OK on its next poll: their outputs are written either way.
    // A hand-rolled wait rather than a LostRank's condition variable: the
    // count belongs to no rank, and a combine is short.
    for (int polls = 0;
         rendezvous_running_.load(std::memory_order_acquire) != 0; ++polls) {
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    // Only now, with no copy left in flight, do requests complete: a caller
    // whose request is done may free its buffers, and a callback may abort
    // another rank in turn (a failed collective aborts its communicator),
    // which needs this thread to hold no delivery count.
    for (auto& [request, status] : failed) request->Complete(status);
  }

  // Non-OK if `self` (the caller's rank) or `peer` has left: the caller's
  // own rank gets its abort reason back, a peer's loss is Unavailable.
  absl::Status LostStatus(int self, int peer) {
    if (lost_[self]->lost.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(lost_[self]->mu);
      return lost_[self]->reason;
    }
    if (lost_[peer]->lost.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(lost_[peer]->mu);
      return absl::UnavailableError(absl::StrCat(
          "rank ", peer, " left the group: ", lost_[peer]->reason.message()));
    }
    return absl::OkStatus();
  }

  bool IsLost(int rank) const {
    return lost_[rank]->lost.load(std::memory_order_acquire);
  }

 private:
  struct Key {
    int src;
    Tag tag;
    friend bool operator==(const Key& a, const Key& b) {
      return a.src == b.src && a.tag == b.tag;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.src, k.tag);
    }
  };
  struct Handoff {
    int src;
    PendingSend send;
    PendingRecv recv;
    int64_t since_ns;
    int dst = -1;  // Filled in when dropped by Abort.
  };
  // One Rendezvous in progress: what each rank has brought so far.
  struct Gathering {
    // One rank's part, together so that the combining thread reads it in a
    // cache line or two.
    struct Arrival {
      alignas(16) char record[Transport::kMaxRendezvousRecord];
      uint64_t signature = 0;  // Rendezvous's.
      std::shared_ptr<LoopbackRequest> request;
      DoneCallbacks callbacks;  // Filled when it completes.
    };
    // InvalidArgument naming two ranks whose signatures differ, if any.
    absl::Status Mismatch() const {
      for (size_t r = 1; r < arrivals.size(); ++r) {
        if (arrivals[r].signature != arrivals[0].signature) {
          return PackedMismatch("direct rendezvous", 0, arrivals[0].signature,
                                static_cast<int>(r), arrivals[r].signature);
        }
      }
      return absl::OkStatus();
    }
    explicit Gathering(int size) : arrivals(size), records(size) {
      for (int r = 0; r < size; ++r) records[r] = arrivals[r].record;
    }
    void Clear() {
      arrived = 0;
      for (Arrival& a : arrivals) {
        a.request.reset();
        a.callbacks.clear();
      }
    }
    Tag tag = 0;
    int arrived = 0;
    // Set when the last rank arrives; next_part is guarded by the fabric's
    // rendezvous_mu_.
    Transport::CombineFn combine = nullptr;
    size_t parts = 1;
    size_t next_part = 0;
    std::atomic<size_t> parts_done{0};
    std::vector<Arrival> arrivals;      // By rank.
    std::vector<const void*> records;   // arrivals[r].record, by rank.
  };
  // Completed gatherings kept for reuse; a few cover ranks that run ahead.
  static constexpr size_t kSpareGatherings = 8;
  struct Mailbox {
    SpinLock mu;
    // Matched pairs whose copy waits for this rank's thread (see Progress).
    std::vector<Handoff> handoffs;  // Guarded by mu.
    std::atomic<int> handoff_count{0};
    int waiting = 0;  // Threads in Wait (StartedWaiting); guarded by mu.
    std::atomic<int64_t> last_poll_ns{std::numeric_limits<int64_t>::min() / 2};
    std::atomic<uint32_t> polls{0};  // Progress calls; written by its rank.
    absl::flat_hash_map<Key, absl::InlinedVector<PendingSend, 1>> sends
       ;
    absl::flat_hash_map<Key, absl::InlinedVector<PendingRecv, 1>> recvs
       ;
  };
  // A rank's standing in the group (the name is for its main use).
  struct LostRank {
    std::atomic<bool> lost{false};
    // Copies into or out of this rank's buffers now running or handed off.
    std::atomic<int> deliveries{0};
    // Hand-offs this rank made as a sender that are not yet done.
    std::atomic<int> handoffs_out{0};
    std::mutex mu;
    std::condition_variable drained;  // Signalled when deliveries hits 0.
    absl::Status reason;              // Guarded by mu.
  };

  template <typename T>
  static std::vector<std::unique_ptr<T>> MakeEach(int size) {
    std::vector<std::unique_ptr<T>> v(size);
    for (auto& e : v) e = std::make_unique<T>();
    return v;
  }

  void RunHandoff(Handoff& h, int dst) {
    lost_[h.src]->handoffs_out.fetch_sub(1, std::memory_order_relaxed);
    Deliver(h.src, dst, h.send, h.recv);
  }

  bool ReclaimStaleHandoffs(int rank) {
    const int64_t now = NowNs();
    bool worked = false;
    for (int dst = 0; dst < size(); ++dst) {
      Mailbox& box = *mailboxes_[dst];
      if (dst == rank || box.handoff_count.load(std::memory_order_acquire) == 0) {
        continue;
      }
      std::vector<Handoff> stale;
      {
        std::lock_guard<SpinLock> lock(box.mu);
        for (auto it = box.handoffs.begin(); it != box.handoffs.end();) {
          if (it->src == rank && now - it->since_ns > kStaleHandoffNs) {
            stale.push_back(std::move(*it));
            it = box.handoffs.erase(it);
            box.handoff_count.fetch_sub(1, std::memory_order_relaxed);
          } else {
            ++it;
          }
        }
      }
      for (Handoff& h : stale) RunHandoff(h, dst);
      worked |= !stale.empty();
    }
    return worked;
  }

  // Counts a matched pair's copy against both ranks; called with the
  // mailbox lock held, so a concurrent Abort's sweep of that mailbox, which
  // follows, sees the count.
  void BeginDelivery(int src, int dst) {
    lost_[src]->deliveries.fetch_add(1, std::memory_order_relaxed);
    lost_[dst]->deliveries.fetch_add(1, std::memory_order_relaxed);
  }

  void EndDelivery(int rank) {
    LostRank& r = *lost_[rank];
    if (r.deliveries.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
        r.lost.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> lock(r.mu);
      r.drained.notify_all();
    }
  }

  // A send and its receive must have the same size (transport.h).
  static absl::Status SizesMatch(size_t sent, size_t room) {
    if (sent == room) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("message size mismatch: a send of ", sent,
                     " bytes matched a receive of ", room, " bytes"));
  }

  // The one copy (or reduce) of a matched pair, outside every mailbox lock.
  void Deliver(int src, int dst, const PendingSend& send,
               const PendingRecv& recv) {
    if (send.op >= 0 || recv.op >= 0) {
      DeliverOnDevice(src, dst, send, recv);
      return;
    }
    const size_t bytes = send.data.bytes();
    const absl::Status status = SizesMatch(bytes, recv.dst.bytes());
    if (status.ok() && recv.reduce != nullptr) {
      recv.reduce(recv.local.data, send.data.data, recv.dst.data,
                  recv.dst.count);
    } else if (status.ok() && bytes > 0) {
      std::memcpy(recv.dst.data, send.data.data, bytes);
    }
    // Both requests are done before the copy stops counting, so an Abort
    // that waited for it finds them complete; their callbacks (which may
    // post more work, or Abort) run after, outside the count.
    DoneCallbacks recv_callbacks, send_callbacks;
    recv.request->MarkDone(status, &recv_callbacks);
    send.request->MarkDone(status, &send_callbacks);
    EndDelivery(src);
    EndDelivery(dst);
    for (DoneCallback& cb : recv_callbacks) std::move(cb)(status);
    for (DoneCallback& cb : send_callbacks) std::move(cb)(status);
  }

  // A matched pair of which one side or both are device operations: the
  // copy is queued on the receiver's copy lane, and the batches complete
  // when it has run (device_messages.h). Mixing host and device memory in
  // one message is refused, except for an empty one.
  void DeliverOnDevice(int src, int dst, const PendingSend& send,
                       const PendingRecv& recv) {
    const size_t bytes = send.data.bytes();
    absl::Status status = SizesMatch(bytes, recv.dst.bytes());
    if (status.ok() && (send.op < 0 || recv.op < 0) && bytes > 0) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "a message of ", bytes, " bytes from ",
          send.op < 0 ? "host" : "device", " memory to ",
          recv.op < 0 ? "host" : "device", " memory: loopback moves device "
          "memory between device buffers only"));
    }
    auto batch_of = [](const std::shared_ptr<RequestState>& r) {
      return std::static_pointer_cast<loopback_device::DeviceBatch>(r);
    };
    loopback_device::SharedEvent done;
    if (status.ok()) {
      if (send.op >= 0 && recv.op >= 0) {
        auto from = batch_of(send.request), into = batch_of(recv.request);
        absl::StatusOr<loopback_device::SharedEvent> queued =
            copy_lane(dst).Queue(from->ready(), into->ready(), send.data,
                                 recv.dst);
        if (queued.ok()) {
          done = *std::move(queued);
        } else {
          status = queued.status();
        }
      }
      // Else empty, one side on the host: nothing to copy or wait for
      // (`done` stays null).
    }
    DoneCallbacks recv_callbacks, send_callbacks;
    if (!status.ok()) {
      recv.request->MarkDone(status, &recv_callbacks);
      send.request->MarkDone(status, &send_callbacks);
    } else {
      if (recv.op < 0) recv.request->MarkDone(status, &recv_callbacks);
      if (send.op < 0) send.request->MarkDone(status, &send_callbacks);
    }
    EndDelivery(src);
    EndDelivery(dst);
    for (DoneCallback& cb : recv_callbacks) std::move(cb)(status);
    for (DoneCallback& cb : send_callbacks) std::move(cb)(status);
    if (status.ok()) {
      if (recv.op >= 0) {
        batch_of(recv.request)->Matched(batch_of(recv.request), recv.op, done);
      }
      if (send.op >= 0) {
        batch_of(send.request)->Matched(batch_of(send.request), send.op, done);
      }
    }
  }

  // Read-only after construction, read by every call of every rank: kept
  // off the cache lines that the rendezvous writes (on a 2-core VM the
  // false sharing with rendezvous_mu_ showed as 3% of an 8 B all_reduce's
  // profile, in size()).
  const int size_;
  const std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // By destination rank.
  const std::vector<std::unique_ptr<LostRank>> lost_;
  const std::vector<std::unique_ptr<loopback_device::CopyLane>> copy_lanes_;
  // Set with the first rank's lost flag: until then, arrivals skip the check
  // of every rank's flag.
  alignas(64) std::atomic<bool> any_lost_{false};
  // Polled by every waiting rank; written only when a split gathering
  // starts or ends, so it gets a line of its own.
  alignas(64) std::atomic<int> working_count_{0};
  alignas(64) SpinLock rendezvous_mu_;
  // Rendezvous every rank has reached whose combine or completion is still
  // running. A rendezvous involves every rank, so one count serves them all
  // (Abort waits for it, as for a rank's deliveries), and it shares the
  // lock's cache line, which the arriving thread holds anyway: counting
  // each rank's deliveries instead cost an 8 B all_reduce on 2 ranks two
  // atomic updates on lines of the other rank's.
  std::atomic<int> rendezvous_running_{0};
  // Guarded by rendezvous_mu_: open gatherings, in no order.
  std::vector<std::unique_ptr<Gathering>> gatherings_;
  // Guarded by rendezvous_mu_: gatherings every rank has reached, whose
  // parts are running; working_count_ is its size, for Progress to check
  // without the lock.
  std::vector<std::unique_ptr<Gathering>> working_;
  std::vector<std::unique_ptr<Gathering>> spare_gatherings_;
  const size_t exchange_region_bytes_;
  void* const exchange_region_;
  // By rank, null until its transport made it (MakeExchange).
  absl::FixedArray<std::atomic<SlotExchange*>> exchanges_;
  std::mutex exchanges_mu_;
  std::vector<std::unique_ptr<SlotExchange>> owned_exchanges_;
  static void DriveExchangesOf(void* fabric) {
    static_cast<LoopbackFabric*>(fabric)->DriveExchanges();
  }
  // Lock order: a mailbox's mu, then a LostRank's mu.
};

bool LoopbackRequest::Progress() {
  return CompleteIfReady() || end_->fabric->Progress(end_->rank);
}

void LoopbackRequest::StartedPolling() {
  hand_over_.fetch_or(kPolling, std::memory_order_relaxed);
  end_->fabric->StartedWaiting(end_->rank);
}

void LoopbackRequest::FinishedPolling() {
  end_->fabric->FinishedWaiting(end_->rank);
}

bool LoopbackTransport::Progress() {
  const bool moved = fabric_->Progress(rank_);
  return (exchange_ != nullptr && exchange_->Progress()) || moved;
}

void LoopbackTransport::StartedPolling() { fabric_->StartedWaiting(rank_); }

void LoopbackTransport::FinishedPolling() { fabric_->FinishedWaiting(rank_); }

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric,
                                     int rank, LoopbackOptions options)
    : fabric_(fabric),
      rank_(rank),
      end_(std::make_shared<const LoopbackRankEnd>(LoopbackRankEnd{
          fabric, rank, RequestState::SpinBudgetFor(fabric->size())})),
      options_(options),
      exchange_(fabric->exchange_region() == nullptr
                    ? nullptr
                    : fabric->MakeExchange(rank, end_->spin_budget)) {}

LoopbackTransport::~LoopbackTransport() {
  if (exchange_ != nullptr) {
    exchange_->Abort(absl::CancelledError("the exchange was destroyed"));
  }
  fabric_->Abort(rank_, absl::CancelledError("loopback transport destroyed"));
}

int LoopbackTransport::size() const { return fabric_->size(); }

TransportCapabilities LoopbackTransport::capabilities() const {
  TransportCapabilities caps;
  caps.host_memory = true;
  caps.fused_recv_reduce = options_.fused_recv_reduce;
  caps.shared_address_space = options_.shared_address_space;
  // What one step of a scheduled algorithm costs: a send and a receive
  // matched across threads, one memory copy, and the executor's work (docs/design/tuning-history.md).
  caps.latency_us = 2.5;
  caps.bandwidth_gbps = 10.0;
  caps.wait_spin = end_->spin_budget;
  caps.exchange_bytes = exchange_ != nullptr ? kLoopbackExchangeBytes : 0;
  // Device memory where CUDA can queue the copies (device_messages.h).
  caps.device_memory = caps.stream_ordered = loopback_device::Available();
  return caps;
}

namespace {

absl::Status CheckPeer(int peer, int size) {
  if (peer < 0 || peer >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is out of range [0, ", size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Request> LoopbackTransport::Isend(int peer, Tag tag,
                                                 ConstBuffer data,
                                                 absl::Time deadline) {
  if (!data.device.is_host()) {
    return PostDevice({{P2POp::Kind::kSend, peer, tag,
                        Buffer{const_cast<void*>(data.data), data.count,
                               data.dtype, data.device}}},
                      /*stream=*/nullptr, deadline);
  }
  if (absl::Status s = CheckPeer(peer, size()); !s.ok()) return s;
  auto request = std::make_shared<LoopbackRequest>(deadline, end_);
  fabric_->Send(rank_, peer, tag, {data, request});
  return Request(std::move(request));
}

absl::StatusOr<Request> LoopbackTransport::Irecv(int peer, Tag tag,
                                                 Buffer data,
                                                 absl::Time deadline) {
  if (!data.device.is_host()) {
    return PostDevice({{P2POp::Kind::kRecv, peer, tag, data}},
                      /*stream=*/nullptr, deadline);
  }
  return PostRecv(peer, tag, ConstBuffer{}, data, nullptr, deadline);
}

absl::StatusOr<Request> LoopbackTransport::IrecvReduce(int peer, Tag tag,
                                                       ConstBuffer local,
                                                       Buffer dst,
                                                       ReduceFn reduce,
                                                       absl::Time deadline) {
  if (!options_.fused_recv_reduce) {
    return Transport::IrecvReduce(peer, tag, local, dst, reduce, deadline);
  }
  if (reduce == nullptr) {
    return absl::InvalidArgumentError("IrecvReduce: null reduce function");
  }
  if (!local.device.is_host() || !dst.device.is_host()) {
    return absl::InvalidArgumentError(
        "IrecvReduce: its reduce function runs on the host; loopback "
        "receives device memory with Irecv only");
  }
  if (local.count != dst.count) {
    return absl::InvalidArgumentError(
        "IrecvReduce: local and dst differ in count");
  }
  return PostRecv(peer, tag, local, dst, reduce, deadline);
}

absl::StatusOr<Request> LoopbackTransport::PostRecv(int peer, Tag tag,
                                                    ConstBuffer local,
                                                    Buffer dst,
                                                    ReduceFn reduce,
                                                    absl::Time deadline) {
  if (absl::Status s = CheckPeer(peer, size()); !s.ok()) return s;
  auto request = std::make_shared<LoopbackRequest>(deadline, end_);
  fabric_->Recv(peer, rank_, tag, {local, dst, reduce, request});
  return Request(std::move(request));
}

absl::StatusOr<Request> LoopbackTransport::PostBatch(
    absl::Span<const P2POp> ops, void* cuda_stream, absl::Time deadline) {
  const bool device = std::any_of(ops.begin(), ops.end(), [](const P2POp& op) {
    return !op.data.device.is_host();
  });
  if (!device) return Transport::PostBatch(ops, cuda_stream, deadline);
  return PostDevice(ops, cuda_stream, deadline);
}

absl::StatusOr<Request> LoopbackTransport::PostDevice(
    absl::Span<const P2POp> ops, void* cuda_stream, absl::Time deadline) {
  if (!loopback_device::Available()) {
    return absl::InvalidArgumentError(
        "loopback: device memory, but this build has no CUDA or no GPU is "
        "visible");
  }
  bool receives = false;
  for (const P2POp& op : ops) {
    RELAY_RETURN_IF_ERROR(CheckPeer(op.peer, size()));
    if (op.data.device.is_host() && op.data.count > 0) {
      return absl::InvalidArgumentError(
          "loopback: a batch mixes host and device memory; post them "
          "separately");
    }
    receives |= op.kind == P2POp::Kind::kRecv;
  }
  if (receives) RELAY_RETURN_IF_ERROR(fabric_->copy_lane(rank_).Ensure());
  RELAY_ASSIGN_OR_RETURN(
      std::shared_ptr<loopback_device::DeviceBatch> batch,
      loopback_device::DeviceBatch::Post(ops.size(), cuda_stream, deadline));
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.kind == P2POp::Kind::kSend) {
      fabric_->Send(rank_, op.peer, op.tag,
                    {ConstBuffer{op.data.data, op.data.count, op.data.dtype,
                                 op.data.device},
                     batch, static_cast<int>(i)});
    } else {
      fabric_->Recv(op.peer, rank_, op.tag,
                    {ConstBuffer{}, op.data, nullptr, batch,
                     static_cast<int>(i)});
    }
  }
  // Returns once the peers have posted their side, with `cuda_stream`
  // ordered after the copies (device_messages.h says why the host waits).
  if (absl::Status ordered = batch->StreamWait(cuda_stream); !ordered.ok()) {
    batch->Complete(ordered);  // Already failed, or a CUDA error now.
  }
  return Request(std::move(batch));
}

absl::Status LoopbackTransport::CheckMemory(const ConstBuffer& data,
                                            absl::string_view what) const {
  // The host path's every call: no work beyond this test.
  if (data.device.is_host() || data.count == 0) return absl::OkStatus();
  return loopback_device::CheckDeviceMemory(data, what);
}

absl::StatusOr<Request> LoopbackTransport::Rendezvous(Tag tag,
                                                      const void* record,
                                                      size_t record_bytes,
                                                      CombineFn combine,
                                                      size_t parts,
                                                      absl::Time deadline,
                                                      uint64_t signature) {
  if (!options_.shared_address_space) {
    return Transport::Rendezvous(tag, record, record_bytes, combine, parts,
                                 deadline, signature);
  }
  if (combine == nullptr) {
    return absl::InvalidArgumentError("Rendezvous: null combine function");
  }
  if (parts < 1 || parts > kMaxRendezvousParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("Rendezvous: ", parts, " parts (1 to ",
                     kMaxRendezvousParts, ")"));
  }
  if (record_bytes > kMaxRendezvousRecord ||
      (record == nullptr && record_bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Rendezvous: a record of ", record_bytes, " bytes",
        record == nullptr ? " at null" : "", " (at most ",
        kMaxRendezvousRecord, " bytes, not null)"));
  }
  auto request = std::make_shared<LoopbackRequest>(deadline, end_);
  fabric_->Rendezvous(rank_, tag, record, record_bytes, signature, combine,
                      parts, request);
  return Request(std::move(request));
}

absl::StatusOr<Request> LoopbackTransport::Exchange(const ExchangeCall& call) {
  if (exchange_ == nullptr) return Transport::Exchange(call);
  return exchange_->Start(call);
}

absl::Status LoopbackTransport::RunExchange(const ExchangeCall& call) {
  if (exchange_ == nullptr) return Transport::RunExchange(call);
  return exchange_->Run(call);
}

void LoopbackTransport::Abort(absl::Status reason) {
  if (exchange_ != nullptr) exchange_->Abort(reason);
  fabric_->Abort(rank_, reason);
}

namespace {

// Fabrics by id, so ranks that meet through a Store find the same object.
// The table keeps a fabric alive until every rank has joined (rank 0 may
// finish and leave before the last rank connects); then its transports own
// it.
struct FabricTable {
  struct Entry {
    std::shared_ptr<LoopbackFabric> fabric;
    int joined = 0;
  };
  std::mutex mu;
  absl::flat_hash_map<std::string, Entry> fabrics;
  uint64_t next_id = 0;
};

FabricTable& Fabrics() {
  static auto* table = new FabricTable();
  return *table;
}

constexpr char kFabricKey[] = "loopback/fabric";

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>>
LoopbackTransportFactory::Connect(const TransportConfig& config) {
  if (config.store == nullptr) {
    return absl::InvalidArgumentError("loopback Connect: null store");
  }
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loopback Connect: rank ", config.rank, " of size ", config.size));
  }
  FabricTable& table = Fabrics();
  std::shared_ptr<LoopbackFabric> fabric;
  if (config.rank == 0) {
    fabric = std::make_shared<LoopbackFabric>(config.size);
    std::string id;
    {
      std::lock_guard<std::mutex> lock(table.mu);
      id = absl::StrCat(getpid(), ".", table.next_id++);
      if (config.size > 1) table.fabrics[id] = {fabric, 1};
    }
    absl::Status s =
        config.store->Set(kFabricKey, absl::StrCat(id, "/", config.size));
    if (!s.ok()) return s;
  } else {
    absl::StatusOr<std::string> value =
        config.store->Get(kFabricKey, config.timeout);
    if (!value.ok()) {
      return absl::Status(value.status().code(),
                          absl::StrCat("loopback Connect: rank 0 never "
                                       "published the fabric: ",
                                       value.status().message()));
    }
    std::pair<std::string, std::string> parts = absl::StrSplit(*value, '/');
    int size = 0;
    if (!absl::SimpleAtoi(parts.second, &size) || size != config.size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loopback Connect: rank 0 created a group of size '", parts.second,
          "', this rank expects ", config.size));
    }
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.fabrics.find(parts.first);
    if (it != table.fabrics.end()) {
      fabric = it->second.fabric;
      if (++it->second.joined == config.size) table.fabrics.erase(it);
    }
    if (fabric == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "loopback Connect: fabric ", parts.first,
          " is not in this process; the loopback transport connects ranks "
          "that are threads of one process"));
    }
  }
  return std::unique_ptr<Transport>(
      std::make_unique<LoopbackTransport>(std::move(fabric), config.rank,
                                          options_));
}

}  // namespace relay
