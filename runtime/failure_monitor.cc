#include "runtime/failure_monitor.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/config.h"
#include "runtime/thread_name.h"

namespace relay {
namespace {

std::string FailureKey(int rank) { return absl::StrCat("failure/", rank); }
std::string HeartbeatKey(int rank) { return absl::StrCat("heartbeat/", rank); }
std::string ClosedKey(int rank) { return absl::StrCat("closed/", rank); }
constexpr char kFailures[] = "failures";

}  // namespace

absl::StatusOr<FailureMonitorOptions> FailureMonitorOptionsFromEnvironment(
    FailureMonitorOptions defaults) {
  absl::StatusOr<absl::Duration> timeout =
      ReadSeconds("RELAY_PEER_TIMEOUT", defaults.peer_timeout);
  if (!timeout.ok()) return timeout.status();
  defaults.peer_timeout = *timeout;
  return defaults;
}

FailureMonitor::FailureMonitor(std::shared_ptr<Store> store, int rank,
                               int size, FailureMonitorOptions options,
                               OnPeerFailure on_peer_failure)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      on_peer_failure_(std::move(on_peer_failure)) {
  const absl::Time now = absl::Now();
  if (options_.peer_timeout > absl::ZeroDuration()) {
    for (int k = 1; k <= options_.watched_peers && k < size_; ++k) {
      watched_.push_back({(rank_ + k) % size_, -1, now, false});
    }
  }
  thread_ = std::thread([this] {
    NameThisThread("relay-monitor");
    Loop();
  });
}

FailureMonitor::~FailureMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void FailureMonitor::Publish(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (published_) return;
    published_ = true;
    // A copy of its own, not a second reference to the caller's: the
    // thread reads and frees it, and the reference count lives in Abseil's
    // (uninstrumented) library where ThreadSanitizer cannot see it.
    publish_ = absl::Status(why.code(), why.message());
  }
  cv_.notify_all();
}

void FailureMonitor::WritePublished() {
  std::optional<absl::Status> why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    why.swap(publish_);
  }
  if (!why.has_value()) return;
  // Best effort: a store that is gone cannot carry the news.
  store_->Set(FailureKey(rank_), absl::StrCat(absl::StatusCodeToString(why->code()),
                                              ": ", why->message()))
      .IgnoreError();
  store_->Add(kFailures, 1).IgnoreError();
}

void FailureMonitor::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.poll_interval),
                 [&] { return stop_ || publish_.has_value(); });
    if (stop_) break;
    // A rank that failed itself has nothing more to learn.
    const bool failed = published_;
    lock.unlock();
    WritePublished();
    std::optional<absl::Status> failure;
    if (!reported_ && !failed) failure = Poll(absl::Now());
    if (failure.has_value()) {
      reported_ = true;
      on_peer_failure_(*std::move(failure));
    }
    lock.lock();
  }
  const bool failed = published_;
  lock.unlock();
  WritePublished();
  if (!failed) store_->Set(ClosedKey(rank_), "1").IgnoreError();
}

std::optional<absl::Status> FailureMonitor::Poll(absl::Time now) {
  const bool heartbeats = options_.peer_timeout > absl::ZeroDuration();
  absl::Status beat =
      heartbeats ? store_->Add(HeartbeatKey(rank_), 1).status() : absl::OkStatus();
  absl::StatusOr<int64_t> failures =
      beat.ok() ? store_->Add(kFailures, 0) : absl::StatusOr<int64_t>(beat);
  if (!failures.ok()) {
    // The store's host may be gone; only heartbeats bound how long that
    // may last before it counts as a failure.
    if (store_failing_since_ == absl::InfiniteFuture()) store_failing_since_ = now;
    if (heartbeats && now - store_failing_since_ > options_.peer_timeout) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", rank_, " cannot reach the store for ",
          absl::FormatDuration(now - store_failing_since_),
          " (its host, usually rank 0, may be lost): ",
          failures.status().message()));
    }
    return std::nullopt;
  }
  store_failing_since_ = absl::InfiniteFuture();
  if (*failures > 0) {
    // Prefer a root cause: a rank whose own failure was learning of
    // another's (Unavailable) is reported only if nothing else is there.
    std::optional<absl::Status> echo;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      absl::StatusOr<std::string> why = store_->Get(FailureKey(r), absl::ZeroDuration());
      if (!why.ok()) continue;
      absl::Status failure =
          absl::UnavailableError(absl::StrCat("rank ", r, " failed: ", *why));
      if (!absl::StartsWith(*why, "UNAVAILABLE")) return failure;
      if (!echo.has_value()) echo = std::move(failure);
    }
    if (echo.has_value()) return echo;
  }
  return heartbeats ? CheckHeartbeats(now) : std::nullopt;
}

std::optional<absl::Status> FailureMonitor::CheckHeartbeats(absl::Time now) {
  for (Watched& w : watched_) {
    if (w.closed) continue;
    int64_t beat = -1;
    absl::StatusOr<std::string> value =
        store_->Get(HeartbeatKey(w.rank), absl::ZeroDuration());
    if (value.ok() && absl::SimpleAtoi(*value, &beat) && beat != w.beat) {
      w.beat = beat;
      w.moved = now;
      continue;
    }
    if (now - w.moved <= options_.peer_timeout) continue;
    if (store_->Get(ClosedKey(w.rank), absl::ZeroDuration()).ok()) {
      w.closed = true;  // Left normally.
      continue;
    }
    const std::string why = absl::StrCat(
        "no heartbeat for ", absl::FormatDuration(now - w.moved),
        " (process dead or frozen; seen by rank ", rank_, ")");
    // On the lost rank's behalf, so every rank learns it from one poll.
    store_->Set(FailureKey(w.rank), why).IgnoreError();
    store_->Add(kFailures, 1).IgnoreError();
    return absl::UnavailableError(
        absl::StrCat("rank ", w.rank, " lost: ", why));
  }
  return std::nullopt;
}

}  // namespace relay
