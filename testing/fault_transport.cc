#include "testing/fault_transport.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <queue>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

// A request handed to the caller before its operation reaches the wrapped
// transport; completed by the wrapped request. Waiting on it drives the
// wrapped transport's progress (polling transports need that).
class ProxyState final : public RequestState {
 public:
  ProxyState(absl::Time deadline, std::shared_ptr<Transport> inner)
      : RequestState(deadline), inner_(std::move(inner)) {}

 protected:
  bool Progress() override { return inner_->Progress(); }

 private:
  const std::shared_ptr<Transport> inner_;
};

struct Held {
  absl::Time release;
  uint64_t order = 0;  // Posting order: breaks ties, keeps FIFO per key.
  PeerOp op;
  absl::Time deadline;
  std::shared_ptr<ProxyState> proxy;

  // For std::priority_queue: the earliest release on top.
  bool operator<(const Held& other) const {
    return std::tie(release, order) > std::tie(other.release, other.order);
  }
};

class FaultInjectingTransport final : public Transport {
 public:
  FaultInjectingTransport(std::unique_ptr<Transport> inner, FaultPlan plan,
                          std::shared_ptr<FaultStats> stats)
      : inner_(std::move(inner)),
        plan_(plan),
        stats_(std::move(stats)),
        rank_(inner_->rank()),
        random_(plan.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank_)),
        name_(absl::StrCat("faulty-", inner_->name())) {
    releaser_ = std::thread([this] { ReleaseLoop(); });
  }

  ~FaultInjectingTransport() override {
    Abort(absl::CancelledError("fault-injecting transport destroyed"));
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    releaser_.join();
  }

  absl::string_view name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return inner_->size(); }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = inner_->capabilities();
    caps.fused_recv_reduce = false;
    caps.shared_address_space = false;
    caps.native_collectives = false;
    return caps;
  }

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    return Hold({PeerOp::Kind::kSend, peer, tag,
                 Buffer{const_cast<void*>(data.data), data.count, data.dtype,
                        data.device}},
                deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    return Hold({PeerOp::Kind::kRecv, peer, tag, data}, deadline);
  }
  bool Progress() override { return inner_->Progress(); }

  void Abort(absl::Status reason) override {
    std::vector<std::shared_ptr<ProxyState>> failing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.ok()) aborted_ = reason;
      while (!held_.empty()) {
        failing.push_back(held_.top().proxy);
        held_.pop();
      }
      failing.insert(failing.end(), stalled_.begin(), stalled_.end());
      stalled_.clear();
    }
    inner_->Abort(reason);
    for (const std::shared_ptr<ProxyState>& p : failing) p->Complete(reason);
  }

 private:
  absl::StatusOr<Request> Hold(PeerOp op, absl::Time deadline) {
    auto proxy = std::make_shared<ProxyState>(deadline, inner_);
    bool kill = false;
    int64_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "transport aborted: ", aborted_.message()));
      }
      index = ops_++;
      const bool failing = plan_.failure != FaultPlan::Failure::kNone &&
                           rank_ == plan_.fail_rank && index >= plan_.fail_at_op;
      if (failing && plan_.failure == FaultPlan::Failure::kStall) {
        // Never posted: the request completes only when aborted.
        stalled_.push_back(proxy);
        return Request(std::move(proxy));
      }
      kill = failing;
      if (!kill) {
        absl::Duration delay;
        if (std::bernoulli_distribution(plan_.delay_probability)(random_)) {
          const int64_t max_ns =
              std::max<int64_t>(0, absl::ToInt64Nanoseconds(plan_.max_delay));
          delay = absl::Nanoseconds(
              std::uniform_int_distribution<int64_t>(0, max_ns)(random_));
        }
        absl::Time release = FastNow() + delay;
        // Never ahead of an earlier operation on the same (peer, tag,
        // direction): the non-overtaking rule.
        absl::Time& last = last_release_[std::make_tuple(op.peer, op.tag, op.kind)];
        if (release < last) release = last;
        last = release;
        held_.push({release, next_order_++, op, deadline, proxy});
      }
    }
    if (kill) {
      const absl::Status killed = absl::UnavailableError(absl::StrCat(
          "rank ", rank_, " was killed by fault injection at its operation ",
          index, " (", plan_.ToString(), ")"));
      Abort(killed);
      return killed;
    }
    cv_.notify_one();
    return Request(std::move(proxy));
  }

  void ReleaseLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (held_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const absl::Time now = FastNow();
      if (held_.top().release > now) {
        cv_.wait_for(lock, absl::ToChronoNanoseconds(held_.top().release - now));
        continue;
      }
      Held h = held_.top();
      held_.pop();
      stats_->released.fetch_add(1, std::memory_order_relaxed);
      if (released_any_ && h.order < max_released_order_) {
        stats_->overtaken.fetch_add(1, std::memory_order_relaxed);
      }
      released_any_ = true;
      max_released_order_ = std::max(max_released_order_, h.order);
      lock.unlock();
      Post(h);
      lock.lock();
    }
  }

  // On the releaser thread, in release order: one thread posts, so the
  // order chosen in Hold() is the order the wrapped transport sees.
  void Post(const Held& h) {
    absl::StatusOr<Request> r =
        h.op.kind == PeerOp::Kind::kSend
            ? inner_->Isend(h.op.peer, h.op.tag, h.op.data, h.deadline)
            : inner_->Irecv(h.op.peer, h.op.tag, h.op.data, h.deadline);
    if (!r.ok()) {
      h.proxy->Complete(r.status());
      return;
    }
    r->OnDone([proxy = h.proxy](absl::Status s) { proxy->Complete(std::move(s)); });
  }

  const std::shared_ptr<Transport> inner_;
  const FaultPlan plan_;
  const std::shared_ptr<FaultStats> stats_;
  const int rank_;
  std::mt19937_64 random_;  // Guarded by mu_.
  const std::string name_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Held> held_;                      // Guarded by mu_.
  std::map<std::tuple<int, Tag, PeerOp::Kind>, absl::Time> last_release_;
  std::vector<std::shared_ptr<ProxyState>> stalled_;    // Guarded by mu_.
  int64_t ops_ = 0;                                     // Guarded by mu_.
  uint64_t next_order_ = 0;                             // Guarded by mu_.
  uint64_t max_released_order_ = 0;                     // Guarded by mu_.
  bool released_any_ = false;                           // Guarded by mu_.
  absl::Status aborted_;                                // Guarded by mu_.
  bool stopping_ = false;                               // Guarded by mu_.
  std::thread releaser_;
};

}  // namespace

std::string FaultPlan::ToString() const {
  std::string s = absl::StrCat("seed ", seed, ", delay p=", delay_probability,
                               " max ", absl::FormatDuration(max_delay));
  if (failure != Failure::kNone) {
    absl::StrAppend(&s, failure == Failure::kKill ? ", kill" : ", stall",
                    " rank ", fail_rank, " at op ", fail_at_op);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Transport>>
FaultInjectingTransportFactory::Connect(const TransportConfig& config) {
  RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> inner,
                         inner_.Connect(config));
  return std::unique_ptr<Transport>(
      new FaultInjectingTransport(std::move(inner), plan_, stats_));
}

}  // namespace relay
