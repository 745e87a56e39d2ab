// DeviceWatch and DeviceRequest on a real GPU (one is enough; skipped
// where none is visible): requests complete in posting order with nobody
// waiting, a deadline, a failed verdict and a failed health check each
// abort the owner, and Stop completes what has finished. A stream is held
// back by a host function that waits for the test's say-so.
#include "runtime/device_watch.h"

#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "testing/device_memory.h"

namespace relay {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// The owner a transport's core would be: it aborts once, then fails every
// request.
class Owner final : public DeviceWatchOwner {
 public:
  absl::Status Finished(const DeviceRequest& request) override {
    if (std::string(request.what()) == "bad") return absl::DataLossError("the kernel said so");
    return absl::OkStatus();
  }
  absl::Status Health() override {
    if (hold_health.exchange(false)) {
      health_entered.Notify();
      health_release.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
    if (sick.load()) return absl::UnavailableError("the peer went away");
    return absl::OkStatus();
  }
  absl::Status Expired(const DeviceRequest& request) override {
    return absl::DeadlineExceededError(std::string(request.what()) + " expired");
  }
  void Abort(absl::Status why) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!reason.ok()) return;
      reason = why;
      aborted.store(true, std::memory_order_seq_cst);
    }
    watch.FailAll(why);
  }
  bool Aborted() const override { return aborted.load(); }
  absl::Status AbortReason() const override {
    std::lock_guard<std::mutex> lock(mu);
    return reason;
  }

  std::atomic<bool> sick{false};
  // Health blocks once, when asked, until health_release.
  std::atomic<bool> hold_health{false};
  absl::Notification health_entered, health_release;
  std::atomic<bool> aborted{false};
  mutable std::mutex mu;
  absl::Status reason;
  DeviceWatch watch{this};
};

class DeviceWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU visible";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&a_, kBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b_, kBytes), cudaSuccess);
    owner_ = std::make_shared<Owner>();
    owner_->watch.Start("relay-test");
  }
  void TearDown() override {
    hold_.Release();
    if (owner_ != nullptr && !owner_->health_release.HasBeenNotified()) {
      owner_->health_release.Notify();
    }
    if (owner_ != nullptr) owner_->watch.Stop();
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    cudaFree(a_);
    cudaFree(b_);
  }

  // Queues a copy and its completion event, and hands the request over.
  std::shared_ptr<DeviceRequest> Post(const char* what, absl::Duration timeout) {
    EXPECT_EQ(cudaMemcpyAsync(b_, a_, kBytes, cudaMemcpyDeviceToDevice, stream_), cudaSuccess);
    absl::StatusOr<void*> done = owner_->watch.GetEvent();
    EXPECT_TRUE(done.ok()) << done.status();
    EXPECT_EQ(cudaEventRecord(static_cast<cudaEvent_t>(*done), stream_), cudaSuccess);
    auto r = std::make_shared<DeviceRequest>(
        std::shared_ptr<DeviceWatch>(owner_, &owner_->watch), *done, absl::Now() + timeout,
        what);
    owner_->watch.Watch(r);
    return r;
  }
  // Holds the stream back until hold_ is released (TearDown does, and
  // drains the stream after).
  void Hold() {
    absl::StatusOr<StreamHold> hold =
        StreamHold::On(stream_, absl::Seconds(30));
    ASSERT_TRUE(hold.ok()) << hold.status();
    hold_ = *std::move(hold);
  }
  // Waits (polling done(), not Wait: only the watchdog may complete it).
  static bool DoneWithin(const DeviceRequest& r, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    while (!r.done() && absl::Now() < end) absl::SleepFor(absl::Microseconds(200));
    return r.done();
  }

  static constexpr size_t kBytes = 1 << 20;
  cudaStream_t stream_ = nullptr;
  void* a_ = nullptr;
  void* b_ = nullptr;
  std::shared_ptr<Owner> owner_;
  StreamHold hold_;
};

TEST_F(DeviceWatchTest, CompletesRequestsNobodyWaitsOnInPostingOrder) {
  constexpr int kRequests = 500;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::shared_ptr<DeviceRequest>> requests;
  for (int i = 0; i < kRequests; ++i) {
    auto r = Post("copy", absl::Seconds(30));
    r->OnDone([&, i](const absl::Status& s) {
      EXPECT_TRUE(s.ok()) << s;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
    requests.push_back(r);
  }
  ASSERT_TRUE(DoneWithin(*requests.back(), absl::Seconds(20)));
  for (const auto& r : requests) EXPECT_TRUE(DoneWithin(*r, absl::Seconds(1)));
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(order[i], i);
  EXPECT_FALSE(owner_->Aborted());
}

TEST_F(DeviceWatchTest, WaitCompletesWithoutTheWatchdog) {
  owner_->watch.Stop();  // Wait polls the event itself.
  auto r = Post("copy", absl::Seconds(30));
  EXPECT_TRUE(r->Wait(absl::Now() + absl::Seconds(10)).ok());
}

TEST_F(DeviceWatchTest, ARequestPastItsDeadlineAbortsTheOwner) {
  Hold();
  auto late = Post("held", absl::Milliseconds(50));
  auto behind = Post("behind", absl::Seconds(30));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(DoneWithin(*late, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(late->status())) << late->status();
  EXPECT_EQ(late->status().message(), "held expired");
  // Every other request fails with the abort's reason, a later one at once.
  ASSERT_TRUE(DoneWithin(*behind, absl::Seconds(1)));
  EXPECT_EQ(behind->status(), late->status());
  auto after = Post("after", absl::Seconds(30));
  EXPECT_TRUE(after->done());
  EXPECT_EQ(after->status(), late->status());
  hold_.Release();
}

TEST_F(DeviceWatchTest, AFailedVerdictFailsTheRequestAndAborts) {
  auto good = Post("copy", absl::Seconds(30));
  auto bad = Post("bad", absl::Seconds(30));
  ASSERT_TRUE(DoneWithin(*bad, absl::Seconds(5)));
  EXPECT_TRUE(good->status().ok()) << good->status();
  EXPECT_TRUE(absl::IsDataLoss(bad->status())) << bad->status();
  EXPECT_TRUE(owner_->Aborted());
  EXPECT_TRUE(absl::IsDataLoss(owner_->AbortReason()));
}

TEST_F(DeviceWatchTest, AFailedHealthCheckAborts) {
  Hold();
  auto r = Post("held", absl::Seconds(30));
  owner_->sick.store(true);
  ASSERT_TRUE(DoneWithin(*r, absl::Seconds(5)));
  EXPECT_TRUE(absl::IsUnavailable(r->status())) << r->status();
  hold_.Release();
}

// The watchdog is held inside Health (it asks after every look) while 20
// requests finish, and Stop is asked meanwhile: released, the watchdog
// sees the stop before it looks again, so only Stop's last look can
// complete them.
TEST_F(DeviceWatchTest, StopCompletesWhatHasFinished) {
  auto first = Post("copy", absl::Seconds(30));
  ASSERT_TRUE(DoneWithin(*first, absl::Seconds(5)));
  owner_->hold_health.store(true);
  ASSERT_TRUE(owner_->health_entered.WaitForNotificationWithTimeout(absl::Seconds(5)));
  std::vector<std::shared_ptr<DeviceRequest>> requests;
  for (int i = 0; i < 20; ++i) requests.push_back(Post("copy", absl::Seconds(30)));
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  std::thread stopper([&] { owner_->watch.Stop(); });
  absl::SleepFor(absl::Milliseconds(100));  // Stop has asked by now.
  for (const auto& r : requests) EXPECT_FALSE(r->done());  // Nobody looked.
  owner_->health_release.Notify();
  stopper.join();
  for (const auto& r : requests) {
    EXPECT_TRUE(r->done());
    EXPECT_TRUE(r->status().ok()) << r->status();
  }
}

TEST_F(DeviceWatchTest, StreamWaitOrdersAnotherStream) {
  Hold();
  auto r = Post("held", absl::Seconds(30));
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(r->StreamWait(other).ok());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(other), cudaErrorNotReady);  // Behind the held request.
  hold_.Release();
  EXPECT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_TRUE(DoneWithin(*r, absl::Seconds(5)));
  cudaStreamDestroy(other);
}

// A capture another thread begins in CUDA's default mode (global) forbids
// cudaEventQuery on every thread in that mode, and a forbidden call
// invalidates the capture. The watchdog queries a held request's event
// all through this capture, which must still end well, with the request
// pending and the owner not aborted (PyTorch's NCCL watchdog crashed
// users' captures this way: pytorch/pytorch#104555).
TEST_F(DeviceWatchTest, AGlobalCaptureOnAnotherThreadStillEnds) {
  Hold();
  auto r = Post("held", absl::Seconds(30));
  cudaStream_t capturing = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(a_, 1, 64, capturing), cudaSuccess);
  absl::SleepFor(absl::Milliseconds(50));  // The watchdog looks every 1 ms at most.
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(capturing, &graph), cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_FALSE(r->done()) << r->status();
  EXPECT_FALSE(owner_->Aborted()) << owner_->AbortReason();
  hold_.Release();
  ASSERT_TRUE(DoneWithin(*r, absl::Seconds(5)));
  EXPECT_TRUE(r->status().ok()) << r->status();
  cudaStreamDestroy(capturing);
}

}  // namespace
}  // namespace relay
