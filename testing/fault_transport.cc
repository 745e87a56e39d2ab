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
#include "testing/conformance.h"

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
  void StoppedPolling() override { inner_->StoppedPolling(); }

 private:
  const std::shared_ptr<Transport> inner_;
};

struct Held {
  absl::Time release;
  uint64_t order = 0;  // Posting order: breaks ties, keeps FIFO per key.
  P2POp op;
  absl::Time deadline;
  std::shared_ptr<ProxyState> proxy;

  // For std::priority_queue: the earliest release on top.
  bool operator<(const Held& other) const {
    return std::tie(release, order) > std::tie(other.release, other.order);
  }
};

// Everything the releaser thread touches. Shared by the transport and the
// thread: the last reference to the transport may be dropped by a
// completion callback running on the releaser thread itself, which then
// cannot join itself, so it detaches and the state outlives the transport.
struct FaultState {
  FaultState(std::shared_ptr<Transport> inner_transport, FaultPlan fault_plan,
             std::shared_ptr<FaultStats> fault_stats)
      : inner(std::move(inner_transport)),
        plan(fault_plan),
        stats(std::move(fault_stats)),
        rank(inner->rank()),
        random(fault_plan.seed * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank)) {}

  const std::shared_ptr<Transport> inner;
  const FaultPlan plan;
  const std::shared_ptr<FaultStats> stats;
  const int rank;

  std::mutex mu;
  std::condition_variable cv;
  std::mt19937_64 random;                                // Guarded by mu.
  std::priority_queue<Held> held;                        // Guarded by mu.
  std::map<std::tuple<int, Tag, P2POp::Kind>, absl::Time> last_release;
  std::vector<std::shared_ptr<ProxyState>> stalled;      // Guarded by mu.
  int64_t ops = 0;                                       // Guarded by mu.
  uint64_t next_order = 0;                               // Guarded by mu.
  uint64_t max_released_order = 0;                       // Guarded by mu.
  bool released_any = false;                             // Guarded by mu.
  absl::Status aborted;                                  // Guarded by mu.
  bool stopping = false;                                 // Guarded by mu.

  void ReleaseLoop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      if (held.empty()) {
        cv.wait(lock);
        continue;
      }
      const absl::Time now = FastNow();
      if (held.top().release > now) {
        cv.wait_for(lock, absl::ToChronoNanoseconds(held.top().release - now));
        continue;
      }
      Held h = held.top();
      held.pop();
      stats->released.fetch_add(1, std::memory_order_relaxed);
      if (released_any && h.order < max_released_order) {
        stats->overtaken.fetch_add(1, std::memory_order_relaxed);
      }
      released_any = true;
      max_released_order = std::max(max_released_order, h.order);
      lock.unlock();
      Post(h);
      lock.lock();
    }
  }

  // On the releaser thread, in release order: one thread posts, so the
  // order chosen in Hold() is the order the wrapped transport sees.
  void Post(const Held& h) {
    absl::StatusOr<Request> r =
        h.op.kind == P2POp::Kind::kSend
            ? inner->Isend(h.op.peer, h.op.tag, h.op.data, h.deadline)
            : inner->Irecv(h.op.peer, h.op.tag, h.op.data, h.deadline);
    if (!r.ok()) {
      h.proxy->Complete(r.status());
      return;
    }
    r->OnDone([proxy = h.proxy](absl::Status s) { proxy->Complete(std::move(s)); });
  }

  void Abort(absl::Status reason) {
    std::vector<std::shared_ptr<ProxyState>> failing;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (aborted.ok()) aborted = reason;
      while (!held.empty()) {
        failing.push_back(held.top().proxy);
        held.pop();
      }
      failing.insert(failing.end(), stalled.begin(), stalled.end());
      stalled.clear();
    }
    inner->Abort(reason);
    for (const std::shared_ptr<ProxyState>& p : failing) p->Complete(reason);
  }

  absl::StatusOr<Request> Hold(P2POp op, absl::Time deadline) {
    auto proxy = std::make_shared<ProxyState>(deadline, inner);
    bool kill = false;
    int64_t index = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!aborted.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("transport aborted: ", aborted.message()));
      }
      index = ops++;
      const bool failing = plan.failure != FaultPlan::Failure::kNone &&
                           rank == plan.fail_rank && index >= plan.fail_at_op;
      if (failing && plan.failure == FaultPlan::Failure::kStall) {
        // Never posted: the request completes only when aborted.
        stalled.push_back(proxy);
        return Request(std::move(proxy));
      }
      kill = failing;
      if (!kill) {
        absl::Duration delay;
        if (std::bernoulli_distribution(plan.delay_probability)(random)) {
          const int64_t max_ns =
              std::max<int64_t>(0, absl::ToInt64Nanoseconds(plan.max_delay));
          delay = absl::Nanoseconds(
              std::uniform_int_distribution<int64_t>(0, max_ns)(random));
        }
        absl::Time release = FastNow() + delay;
        // Never ahead of an earlier operation on the same (peer, tag,
        // direction): the non-overtaking rule.
        absl::Time& last = last_release[std::make_tuple(op.peer, op.tag, op.kind)];
        if (release < last) release = last;
        last = release;
        held.push({release, next_order++, op, deadline, proxy});
      }
    }
    if (kill) {
      const absl::Status killed = absl::UnavailableError(absl::StrCat(
          "rank ", rank, " was killed by fault injection at its operation ",
          index, " (", plan.ToString(), ")"));
      Abort(killed);
      return killed;
    }
    cv.notify_one();
    return Request(std::move(proxy));
  }
};

class FaultInjectingTransport final : public Transport {
 public:
  FaultInjectingTransport(std::unique_ptr<Transport> inner, FaultPlan plan,
                          std::shared_ptr<FaultStats> stats)
      : state_(std::make_shared<FaultState>(std::move(inner), plan,
                                            std::move(stats))),
        name_(absl::StrCat("faulty-", state_->inner->name())) {
    releaser_ = std::thread([state = state_] { state->ReleaseLoop(); });
  }

  ~FaultInjectingTransport() override {
    state_->Abort(absl::CancelledError("fault-injecting transport destroyed"));
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stopping = true;
    }
    state_->cv.notify_all();
    if (releaser_.get_id() == std::this_thread::get_id()) {
      releaser_.detach();  // Dropped from one of our own callbacks.
    } else {
      releaser_.join();
    }
  }

  absl::string_view name() const override { return name_; }
  int rank() const override { return state_->rank; }
  int size() const override { return state_->inner->size(); }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = state_->inner->capabilities();
    caps.fused_recv_reduce = false;
    caps.shared_address_space = false;
    caps.exchange_bytes = 0;  // Its faults are in messages; shm has none.
    caps.native_collectives = false;
    return caps;
  }

  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    return state_->Hold({P2POp::Kind::kSend, peer, tag,
                         Buffer{const_cast<void*>(data.data), data.count,
                                data.dtype, data.device}},
                        deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    return state_->Hold({P2POp::Kind::kRecv, peer, tag, data}, deadline);
  }
  bool Progress() override { return state_->inner->Progress(); }
  void StoppedPolling() override { state_->inner->StoppedPolling(); }
  void Abort(absl::Status reason) override { state_->Abort(std::move(reason)); }

 private:
  const std::shared_ptr<FaultState> state_;
  const std::string name_;
  std::thread releaser_;
};

}  // namespace

std::vector<ConformanceCase> FaultSweepCases() {
  std::vector<ConformanceCase> out;
  for (const ConformanceCase& c : ConformanceCases(4)) {
    if (c.algorithm == Algorithm::kDirect || c.algorithm == Algorithm::kShm ||
        c.size < 3) {
      continue;
    }
    const bool uneven = c.count == static_cast<size_t>(c.size) * 37 + 3;
    if (c.kind != CollectiveKind::kBarrier && !uneven) continue;
    if (c.dtype != DataType::kFloat32) continue;
    out.push_back(c);
  }
  return out;
}

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
