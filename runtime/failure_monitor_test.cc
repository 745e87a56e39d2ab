#include "runtime/failure_monitor.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/store.h"

namespace relay {
namespace {

// What one monitor reported (at most once).
struct Reports {
  std::mutex mu;
  std::optional<absl::Status> status;  // Guarded by mu.
  int count = 0;                       // Guarded by mu.
  absl::Notification first;

  FailureMonitor::OnPeerFailure Callback() {
    return [this](absl::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      ++count;
      if (!status.has_value()) {
        status = std::move(s);
        first.Notify();
      }
    };
  }
  std::optional<absl::Status> Get() {
    std::lock_guard<std::mutex> lock(mu);
    return status;
  }
};

// A store that a "dead" process can no longer reach.
class SeveredStore final : public Store {
 public:
  explicit SeveredStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  void Sever() { severed_ = true; }
  absl::Status Set(absl::string_view k, absl::string_view v) override {
    return severed_ ? Down() : base_->Set(k, v);
  }
  absl::StatusOr<std::string> Get(absl::string_view k, absl::Duration t) override {
    if (severed_) return Down();
    return base_->Get(k, t);
  }
  absl::StatusOr<int64_t> Add(absl::string_view k, int64_t d) override {
    if (severed_) return Down();
    return base_->Add(k, d);
  }
  absl::Status Delete(absl::string_view k) override {
    return severed_ ? Down() : base_->Delete(k);
  }
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration t) override {
    if (severed_) return Down();
    return base_->MultiGet(keys, t);
  }

 private:
  static absl::Status Down() { return absl::UnavailableError("connection reset"); }
  const std::shared_ptr<Store> base_;
  std::atomic<bool> severed_{false};
};

FailureMonitorOptions Fast(absl::Duration peer_timeout) {
  FailureMonitorOptions o;
  o.poll_interval = absl::Milliseconds(10);
  o.peer_timeout = peer_timeout;
  return o;
}

TEST(FailureMonitorTest, PublishedFailureReachesEveryOtherRank) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<Reports> reports(3);
  std::vector<std::unique_ptr<FailureMonitor>> monitors;
  for (int r = 0; r < 3; ++r) {
    monitors.push_back(std::make_unique<FailureMonitor>(
        store, r, 3, Fast(absl::ZeroDuration()), reports[r].Callback()));
  }
  monitors[1]->Publish(absl::DeadlineExceededError("all_reduce #5 timed out"));
  for (int r : {0, 2}) {
    ASSERT_TRUE(reports[r].first.WaitForNotificationWithTimeout(absl::Seconds(5)))
        << "rank " << r << " never learned of rank 1's failure";
    const absl::Status s = *reports[r].Get();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("rank 1 failed: DEADLINE_EXCEEDED: all_reduce #5 "
                               "timed out"),
              absl::string_view::npos)
        << s;
  }
  monitors.clear();  // Joins the threads: counts are final.
  EXPECT_FALSE(reports[1].Get().has_value()) << "the failed rank told itself";
  for (Reports& r : reports) EXPECT_LE(r.count, 1);
}

TEST(FailureMonitorTest, RootCauseIsPreferredOverEchoes) {
  auto store = std::make_shared<InMemoryStore>();
  // Rank 0 reacted to rank 2's failure before rank 1 looked.
  ASSERT_TRUE(store->Set("failure/0", "UNAVAILABLE: rank 2 left the group").ok());
  ASSERT_TRUE(store->Set("failure/2", "DEADLINE_EXCEEDED: timed out").ok());
  ASSERT_TRUE(store->Add("failures", 2).ok());
  Reports report;
  FailureMonitor monitor(store, 1, 3, Fast(absl::ZeroDuration()), report.Callback());
  ASSERT_TRUE(report.first.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_NE(report.Get()->message().find("rank 2 failed: DEADLINE_EXCEEDED"),
            absl::string_view::npos)
      << *report.Get();
}

TEST(FailureMonitorTest, SilentPeerIsLostAfterPeerTimeout) {
  auto store = std::make_shared<InMemoryStore>();
  auto severed = std::make_shared<SeveredStore>(store);
  std::vector<Reports> reports(3);
  std::vector<std::unique_ptr<FailureMonitor>> monitors;
  const absl::Duration peer_timeout = absl::Milliseconds(200);
  for (int r = 0; r < 3; ++r) {
    monitors.push_back(std::make_unique<FailureMonitor>(
        r == 1 ? std::shared_ptr<Store>(severed) : store, r, 3,
        Fast(peer_timeout), reports[r].Callback()));
  }
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(reports[0].Get().has_value()) << "healthy peers were reported";
  severed->Sever();  // Rank 1's process "dies": no heartbeat, no goodbye.
  // Silence shorter than peer_timeout is not a loss (the last beat seen may
  // be a poll older than the Sever, hence half the timeout here).
  absl::SleepFor(peer_timeout / 2);
  EXPECT_FALSE(reports[0].Get().has_value()) << *reports[0].Get();
  EXPECT_FALSE(reports[2].Get().has_value()) << *reports[2].Get();
  for (int r : {0, 2}) {
    ASSERT_TRUE(reports[r].first.WaitForNotificationWithTimeout(absl::Seconds(5)))
        << "rank " << r << " never noticed rank 1 went silent";
    const absl::Status s = *reports[r].Get();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("rank 1"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("no heartbeat"), absl::string_view::npos) << s;
  }
  // The severed rank itself finds the store unreachable.
  ASSERT_TRUE(reports[1].first.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_NE(reports[1].Get()->message().find("cannot reach the store"),
            absl::string_view::npos)
      << *reports[1].Get();
}

TEST(FailureMonitorTest, NormalCloseIsNotAFailure) {
  auto store = std::make_shared<InMemoryStore>();
  Reports survivor;
  FailureMonitor monitor(store, 0, 2, Fast(absl::Milliseconds(100)),
                         survivor.Callback());
  {
    Reports leaver;
    FailureMonitor leaving(store, 1, 2, Fast(absl::Milliseconds(100)),
                           leaver.Callback());
    absl::SleepFor(absl::Milliseconds(50));
  }  // Rank 1 closes its communicator normally.
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_FALSE(survivor.Get().has_value()) << *survivor.Get();
}

TEST(FailureMonitorTest, PeerTimeoutFromEnvironment) {
  unsetenv("RELAY_PEER_TIMEOUT");
  absl::StatusOr<FailureMonitorOptions> o = FailureMonitorOptionsFromEnvironment();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->peer_timeout, absl::Seconds(30));
  setenv("RELAY_PEER_TIMEOUT", "0.5", 1);
  o = FailureMonitorOptionsFromEnvironment();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->peer_timeout, absl::Milliseconds(500));
  setenv("RELAY_PEER_TIMEOUT", "soon", 1);
  o = FailureMonitorOptionsFromEnvironment();
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("RELAY_PEER_TIMEOUT"), absl::string_view::npos);
  setenv("RELAY_PEER_TIMEOUT", "-1", 1);
  EXPECT_FALSE(FailureMonitorOptionsFromEnvironment().ok());
  unsetenv("RELAY_PEER_TIMEOUT");
}

}  // namespace
}  // namespace relay
