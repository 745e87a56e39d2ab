// The UCX transport's own contract, with two ranks as threads of this process
// (each with its own UCP context and worker, as separate processes would
// have): bad input, the tag layout's limits, size mismatches, receives whose
// messages arrived first (UCX's unexpected queue) waited on through WhenAll
// alone, large (rendezvous) messages, and Abort; each in both wait modes
// (RELAY_UCX_WAIT=poll and block: in block mode the progress thread sleeps
// on UCX's event fd, and the tests that nobody polls check it wakes).
#include "transports/ucx/ucx_transport.h"

#include <atomic>
#include <cstdlib>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/buffer.h"
#include "runtime/request.h"
#include "runtime/slot_exchange.h"
#include "runtime/store.h"
#include "runtime/tag.h"

namespace relay {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(20);

// Connects `n` ranks (threads) and returns their transports.
std::vector<std::unique_ptr<Transport>> ConnectGroup(int n) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<Transport>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      UcxTransportFactory factory;
      auto t = factory.Connect({store, r, n, kTimeout});
      ASSERT_TRUE(t.ok()) << t.status();
      out[r] = *std::move(t);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

absl::Time Deadline() { return absl::Now() + kTimeout; }

// The parameter is RELAY_UCX_WAIT's value while the ranks connect.
class UcxTransportTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    UcxTransportFactory factory;
    if (!factory.IsViable()) GTEST_SKIP() << "UCX is not usable here";
    setenv("RELAY_UCX_WAIT", GetParam(), 1);
    ranks_ = ConnectGroup(2);
    unsetenv("RELAY_UCX_WAIT");
    ASSERT_NE(ranks_[0], nullptr);
    ASSERT_NE(ranks_[1], nullptr);
  }
  std::vector<std::unique_ptr<Transport>> ranks_;
};

// The mode took effect: block mode falls back to polling silently where UCX
// has no wakeup support, and the tests below would then not exercise the
// sleeping progress thread at all. A blocking transport reports the latency
// of a wake-up per hand-off (tens of microseconds and up) to the cost model.
TEST_P(UcxTransportTest, WaitModeTakesEffect) {
  const double latency_us = ranks_[0]->capabilities().latency_us;
  if (std::string(GetParam()) == "block") {
    EXPECT_GE(latency_us, 10.0) << "block mode fell back to polling";
  } else {
    EXPECT_LT(latency_us, 10.0);
  }
}

TEST_P(UcxTransportTest, BadInputIsInvalidArgument) {
  std::vector<uint8_t> buf(8);
  EXPECT_EQ(ranks_[0]->Isend(2, 0, ConstBuffer::Of(buf), Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks_[0]->Irecv(-1, 0, Buffer::Of(buf), Deadline()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks_[0]
                ->Isend(1, UserTag(kUcxMaxUserTag + 1), ConstBuffer::Of(buf),
                        Deadline())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks_[0]->capabilities().max_user_tag, kUcxMaxUserTag);
}

// True once every one of `requests` has completed OK, learned through
// OnDone alone: nobody calls Wait or Test, so the transport must finish them
// by itself (inside the post, or on its progress thread).
bool CompleteWithoutPolling(std::vector<Request>& requests,
                            absl::Duration timeout) {
  auto left = std::make_shared<std::atomic<int>>(static_cast<int>(requests.size()));
  auto failed = std::make_shared<std::atomic<bool>>(false);
  for (Request& r : requests) {
    r.OnDone([left, failed](absl::Status s) {
      if (!s.ok()) failed->store(true);
      left->fetch_sub(1);
    });
  }
  const absl::Time until = absl::Now() + timeout;
  while (left->load() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return left->load() == 0 && !failed->load();
}

// Messages that arrive before their receives are posted complete inside the
// post; they must complete with no caller polling.
TEST_P(UcxTransportTest, EarlyMessagesCompleteThroughWhenAll) {
  constexpr int kMessages = 16;
  std::vector<std::vector<int>> out(kMessages, std::vector<int>(4, -1));
  std::vector<int> in = {1, 2, 3, 4};
  std::vector<Request> sends;
  for (int i = 0; i < kMessages; ++i) {
    in[0] = i;
    auto s = ranks_[0]->Isend(1, UserTag(7), ConstBuffer::Of(in), Deadline());
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->Wait(kTimeout).ok());  // Eager: the bytes are gone.
  }
  absl::SleepFor(absl::Milliseconds(50));  // Let them land as unexpected.
  std::vector<Request> recvs;
  for (int i = 0; i < kMessages; ++i) {
    auto r = ranks_[1]->Irecv(0, UserTag(7), Buffer::Of(out[i]), Deadline());
    ASSERT_TRUE(r.ok());
    recvs.push_back(*std::move(r));
  }
  ASSERT_TRUE(CompleteWithoutPolling(recvs, kTimeout));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(out[i], (std::vector<int>{i, 2, 3, 4})) << "message " << i;
  }
}

// A request's OnDone callback may post on the transport that completes it,
// as a collective's next step does: callbacks run after the worker lock is
// dropped, while a request with nothing registered completes under it
// (RequestState::CompleteIfNothingToRun). Run under the lock, the reply's
// post below would deadlock on it, and the test would time out.
TEST_P(UcxTransportTest, CallbackMayPostOnTheSameTransport) {
  std::vector<int> ping = {7, 8, 9}, got(3, 0), reply(3, 0);
  auto received =
      ranks_[1]->Irecv(0, UserTag(3), Buffer::Of(got), Deadline());
  ASSERT_TRUE(received.ok());
  std::promise<absl::StatusOr<Request>> replied;
  Transport* rank1 = ranks_[1].get();
  received->OnDone([&, rank1](absl::Status s) {
    if (!s.ok()) {
      replied.set_value(s);
      return;
    }
    replied.set_value(
        rank1->Isend(0, UserTag(4), ConstBuffer::Of(got), Deadline()));
  });
  auto sent = ranks_[0]->Isend(1, UserTag(3), ConstBuffer::Of(ping), Deadline());
  ASSERT_TRUE(sent.ok());
  auto answer = ranks_[0]->Irecv(1, UserTag(4), Buffer::Of(reply), Deadline());
  ASSERT_TRUE(answer.ok());
  ASSERT_TRUE(received->Wait(kTimeout).ok());  // Runs the callback.
  absl::StatusOr<Request> reply_sent = replied.get_future().get();
  ASSERT_TRUE(reply_sent.ok()) << reply_sent.status();
  ASSERT_TRUE(sent->Wait(kTimeout).ok());
  ASSERT_TRUE(answer->Wait(kTimeout).ok());
  ASSERT_TRUE(reply_sent->Wait(kTimeout).ok());
  EXPECT_EQ(reply, ping);
}

TEST_P(UcxTransportTest, LargeMessagesInOrderPerTag) {
  constexpr size_t kCount = 3 << 20;  // Rendezvous protocol territory.
  std::vector<int> a(kCount), b(kCount), ra(kCount), rb(kCount);
  std::iota(a.begin(), a.end(), 0);
  std::iota(b.begin(), b.end(), 1000);
  auto r1 = ranks_[1]->Irecv(0, UserTag(3), Buffer::Of(ra), Deadline());
  auto r2 = ranks_[1]->Irecv(0, UserTag(3), Buffer::Of(rb), Deadline());
  auto s1 = ranks_[0]->Isend(1, UserTag(3), ConstBuffer::Of(a), Deadline());
  auto s2 = ranks_[0]->Isend(1, UserTag(3), ConstBuffer::Of(b), Deadline());
  ASSERT_TRUE(r1.ok() && r2.ok() && s1.ok() && s2.ok());
  std::vector<Request> all = {*r1, *r2, *s1, *s2};
  // The progress thread alone must carry the rendezvous through.
  ASSERT_TRUE(CompleteWithoutPolling(all, kTimeout));
  EXPECT_EQ(ra, a);  // The first send matches the first receive.
  EXPECT_EQ(rb, b);
}

TEST_P(UcxTransportTest, SizeMismatchFailsTheReceive) {
  std::vector<int> small(2, 5), big(4, 0);
  auto r = ranks_[1]->Irecv(0, UserTag(1), Buffer::Of(big), Deadline());
  auto s = ranks_[0]->Isend(1, UserTag(1), ConstBuffer::Of(small), Deadline());
  ASSERT_TRUE(r.ok() && s.ok());
  EXPECT_EQ(r->Wait(kTimeout).code(), absl::StatusCode::kInvalidArgument);
  // Larger than the receive buffer: truncated, also InvalidArgument.
  std::vector<int> tiny(1);
  auto r2 = ranks_[1]->Irecv(0, UserTag(2), Buffer::Of(tiny), Deadline());
  auto s2 = ranks_[0]->Isend(1, UserTag(2), ConstBuffer::Of(big), Deadline());
  ASSERT_TRUE(r2.ok() && s2.ok());
  EXPECT_EQ(r2->Wait(kTimeout).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(UcxTransportTest, AbortCancelsPendingAndRefusesLaterCalls) {
  std::vector<int> buf(4);
  auto pending = ranks_[1]->Irecv(0, UserTag(9), Buffer::Of(buf), Deadline());
  ASSERT_TRUE(pending.ok());
  const absl::Time start = absl::Now();
  ranks_[1]->Abort(absl::CancelledError("test abort"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  absl::Status s = pending->Wait(absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("test abort"), std::string::npos);
  // A later post completes at once with the abort's reason (a collective
  // running across the abort reports why it was aborted).
  auto later = ranks_[1]->Irecv(0, UserTag(9), Buffer::Of(buf), Deadline());
  ASSERT_TRUE(later.ok()) << later.status();
  ASSERT_TRUE(later->Test());
  EXPECT_EQ(later->status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(later->status().message().find("test abort"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(WaitModes, UcxTransportTest,
                         ::testing::Values("poll", "block"));

TEST(UcxTransportConnectTest, BadConfigIsInvalidArgument) {
  UcxTransportFactory factory;
  EXPECT_EQ(factory.Connect({nullptr, 0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto store = std::make_shared<InMemoryStore>();
  EXPECT_EQ(factory.Connect({store, 2, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  setenv("RELAY_UCX_WAIT", "sleepy", 1);
  absl::Status bad_wait = factory.Connect({store, 0, 1}).status();
  unsetenv("RELAY_UCX_WAIT");
  EXPECT_EQ(bad_wait.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_wait.message().find("RELAY_UCX_WAIT"), std::string::npos)
      << bad_wait;
  setenv("RELAY_UCX_PROGRESS_THREAD", "yes", 1);
  absl::Status bad_thread = factory.Connect({store, 0, 1}).status();
  unsetenv("RELAY_UCX_PROGRESS_THREAD");
  EXPECT_EQ(bad_thread.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_thread.message().find("RELAY_UCX_PROGRESS_THREAD='yes'"),
            std::string::npos)
      << bad_thread;
}

// Connects `n` ranks with UCX_TLS set to `tls` (unset if null), restoring
// the caller's value after.
std::vector<std::unique_ptr<Transport>> ConnectWithTls(int n, const char* tls) {
  const char* before = std::getenv("UCX_TLS");
  const std::string saved = before != nullptr ? before : "";
  if (tls != nullptr) setenv("UCX_TLS", tls, 1); else unsetenv("UCX_TLS");
  std::vector<std::unique_ptr<Transport>> out = ConnectGroup(n);
  if (before != nullptr) setenv("UCX_TLS", saved.c_str(), 1);
  else unsetenv("UCX_TLS");
  return out;
}

// Sums every rank's int64 contribution (an exchange's finish).
void SumContributions(absl::Span<const Contribution> all, const void* context) {
  int64_t* out = *static_cast<int64_t* const*>(context);
  *out = 0;
  for (const Contribution& c : all) {
    const auto* v = static_cast<const int64_t*>(c.data);
    for (size_t i = 0; i < c.bytes / sizeof(int64_t); ++i) *out += v[i];
  }
}

// An exchange of `count` int64s at `values` that SumContributions sums into
// `**out` (the pointer `*out` is copied; `values` lives until it is done).
ExchangeCall SumCall(uint64_t tag, const int64_t* values, size_t count,
                     int64_t* const* out) {
  return {.tag = tag,
          .input = {values, count * sizeof(int64_t)},
          .finish = &SumContributions,
          .context = out,
          .context_bytes = sizeof(*out),
          .deadline = Deadline()};
}

// Ranks on one host whose UCX_TLS allows shared memory get the shared-memory
// exchange (the shm algorithm's), and it carries every rank's contribution;
// an abort reaches the peer through it.
TEST(UcxTransportExchangeTest, RanksOnOneHostExchangeThroughSharedMemory) {
  UcxTransportFactory factory;
  if (!factory.IsViable()) GTEST_SKIP() << "UCX is not usable here";
  for (const char* tls : {static_cast<const char*>(nullptr), "shm,self",
                          "^tcp"}) {
    SCOPED_TRACE(tls == nullptr ? "UCX_TLS unset" : tls);
    auto ranks = ConnectWithTls(3, tls);
    ASSERT_EQ(ranks.size(), 3u);
    for (auto& t : ranks) {
      ASSERT_NE(t, nullptr);
      EXPECT_GE(t->capabilities().exchange_bytes, size_t{1024});
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        for (int it = 0; it < 200; ++it) {
          // Rank r brings r + 1 values that change every exchange.
          std::vector<int64_t> mine(static_cast<size_t>(r) + 1);
          int64_t expected = 0;
          for (int q = 0; q < 3; ++q) {
            for (int i = 0; i <= q; ++i) expected += q * 1000 + it * 7 + i;
          }
          for (int i = 0; i <= r; ++i) mine[i] = r * 1000 + it * 7 + i;
          int64_t sum = -1;
          int64_t* out = &sum;
          auto req = ranks[r]->Exchange(SumCall(
              static_cast<uint64_t>(it), mine.data(), mine.size(), &out));
          ASSERT_TRUE(req.ok()) << req.status();
          ASSERT_TRUE(req->Wait().ok());
          ASSERT_EQ(sum, expected) << "rank " << r << " exchange " << it;
        }
      });
    }
    for (auto& t : threads) t.join();
    // Rank 2 aborts while ranks 0 and 1 wait for it.
    int64_t s0 = 0, s1 = 0;
    int64_t *o0 = &s0, *o1 = &s1;
    int64_t v = 1;
    auto r0 = ranks[0]->Exchange(SumCall(1000, &v, 1, &o0));
    auto r1 = ranks[1]->Exchange(SumCall(1000, &v, 1, &o1));
    ASSERT_TRUE(r0.ok() && r1.ok());
    ranks[2]->Abort(absl::CancelledError("rank 2 gave up"));
    absl::Status st = r0->Wait(absl::Seconds(5));
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("rank 2"), std::string::npos) << st;
  }
}

// A rank that never waits or tests (it waits on a future its OnDone
// completes, as torch's DDP does) still gets its exchange done: the
// progress thread drives pending exchanges, and is woken for one from idle.
TEST(UcxTransportExchangeTest, ExchangesCompleteWithoutAnyoneWaiting) {
  UcxTransportFactory factory;
  if (!factory.IsViable()) GTEST_SKIP() << "UCX is not usable here";
  auto ranks = ConnectWithTls(2, "shm,self");
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_GT(ranks[0]->capabilities().exchange_bytes, 0u);
  for (int round = 0; round < 3; ++round) {
    // Long enough for both progress threads to go idle (kLinger, 20 ms).
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    int64_t v0 = 5 + round, v1 = 7, s0 = 0, s1 = 0;
    int64_t *o0 = &s0, *o1 = &s1;
    std::promise<absl::Status> done0, done1;
    auto r0 =
        ranks[0]->Exchange(SumCall(static_cast<uint64_t>(round), &v0, 1, &o0));
    ASSERT_TRUE(r0.ok());
    r0->OnDone([&](absl::Status st) { done0.set_value(st); });
    // Rank 1 comes later, so rank 0's exchange is pending, not finished
    // inside Exchange.
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    auto r1 =
        ranks[1]->Exchange(SumCall(static_cast<uint64_t>(round), &v1, 1, &o1));
    ASSERT_TRUE(r1.ok());
    r1->OnDone([&](absl::Status st) { done1.set_value(st); });
    auto f0 = done0.get_future(), f1 = done1.get_future();
    ASSERT_EQ(f0.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "rank 0's exchange never completed without a waiter";
    ASSERT_EQ(f1.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "rank 1's exchange never completed without a waiter";
    EXPECT_TRUE(f0.get().ok());
    EXPECT_TRUE(f1.get().ok());
    EXPECT_EQ(s0, 12 + round);
    EXPECT_EQ(s1, 12 + round);
  }
}

// In blocking mode (more ranks than cores) the progress thread stands by
// on a timer while a caller's Wait sleeps on the exchange. A Wait that
// gives up (its timeout) with the exchange still queued must leave it to
// the progress thread again: the exchange completes once the peer comes,
// with nobody waiting.
TEST(UcxTransportExchangeTest, ExchangeCompletesAfterItsWaiterGaveUp) {
  UcxTransportFactory factory;
  if (!factory.IsViable()) GTEST_SKIP() << "UCX is not usable here";
  setenv("RELAY_UCX_WAIT", "block", 1);
  auto ranks = ConnectWithTls(2, "shm,self");
  unsetenv("RELAY_UCX_WAIT");
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_GT(ranks[0]->capabilities().exchange_bytes, 0u);
  for (int round = 0; round < 3; ++round) {
    int64_t v0 = 5 + round, v1 = 7, s0 = 0, s1 = 0;
    int64_t *o0 = &s0, *o1 = &s1;
    auto r0 =
        ranks[0]->Exchange(SumCall(static_cast<uint64_t>(round), &v0, 1, &o0));
    ASSERT_TRUE(r0.ok());
    // Long enough to stop polling and sleep on the exchange.
    EXPECT_EQ(r0->Wait(absl::Milliseconds(50)).code(),
              absl::StatusCode::kDeadlineExceeded);
    std::promise<absl::Status> done0;
    r0->OnDone([&](absl::Status st) { done0.set_value(st); });
    auto r1 =
        ranks[1]->Exchange(SumCall(static_cast<uint64_t>(round), &v1, 1, &o1));
    ASSERT_TRUE(r1.ok());
    ASSERT_TRUE(r1->Wait().ok());
    auto f0 = done0.get_future();
    ASSERT_EQ(f0.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "rank 0's exchange never completed after its Wait gave up";
    EXPECT_TRUE(f0.get().ok());
    EXPECT_EQ(s0, 12 + round);
    EXPECT_EQ(s1, 12 + round);
  }
}

// A job told to keep off shared memory (UCX_TLS without it) gets no
// exchange, so the shm algorithm is not offered behind the user's back.
TEST(UcxTransportExchangeTest, NoExchangeWhenUcxTlsExcludesSharedMemory) {
  UcxTransportFactory factory;
  if (!factory.IsViable()) GTEST_SKIP() << "UCX is not usable here";
  for (const char* tls : {"tcp,self", "^shm"}) {
    SCOPED_TRACE(tls);
    auto ranks = ConnectWithTls(2, tls);
    ASSERT_EQ(ranks.size(), 2u);
    ASSERT_NE(ranks[0], nullptr);
    EXPECT_EQ(ranks[0]->capabilities().exchange_bytes, 0u);
    int64_t v = 1, sum = 0;
    int64_t* out = &sum;
    EXPECT_EQ(ranks[0]->Exchange(SumCall(1, &v, 1, &out)).status().code(),
              absl::StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace relay
