#include "runtime/communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/buffer.h"
#include "runtime/collective.h"
#include "runtime/request.h"
#include "runtime/status_macros.h"
#include "runtime/store.h"
#include "runtime/transport.h"
#include "runtime/transport_registry.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

// Every Wait in this file is bounded: a broken build fails, it never hangs.
constexpr absl::Duration kWait = absl::Seconds(20);
// Bounds the follow-up operations of the "nothing was sent" checks: if a bad
// call had consumed a sequence number or sent a message, they time out.
constexpr absl::Duration kProbeWait = absl::Seconds(5);
constexpr absl::Duration kSlack = absl::Milliseconds(100);

CommunicatorOptions TestOptions() {
  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(30);
  return options;
}

CollectiveOptions WithTimeout(absl::Duration timeout) {
  CollectiveOptions options;
  options.timeout = timeout;
  return options;
}

absl::StatusOr<std::unique_ptr<Communicator>> Make(
    int rank, int size, std::shared_ptr<Store> store, std::string transport = "",
    CommunicatorOptions options = TestOptions()) {
  CommunicatorConfig config;
  config.rank = rank;
  config.size = size;
  config.store = std::move(store);
  config.transport = std::move(transport);
  config.options = options;
  return CreateCommunicator(config);
}

// A reusable barrier for the rank threads (std::mutex: TSAN-visible).
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  // False if the other threads did not arrive within `timeout`.
  bool Arrive(absl::Duration timeout = kWait) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return generation_ != generation; });
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// Runs `body` on `size` threads, each with its own communicator of one group
// over a fresh store; every communicator is destroyed before this returns.
void RunGroup(int size, const std::function<void(Communicator&)>& body,
              CommunicatorOptions options = TestOptions()) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Make(r, size, store, "", options);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      ASSERT_EQ((*comm)->rank(), r);
      ASSERT_EQ((*comm)->size(), size);
      body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

// RunGroup over `factory`'s transport (a wrapped loopback).
void RunGroupOn(TransportFactory& factory, int size,
                const std::function<void(Communicator&)>& body) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(
          factory, DefaultEngine(), store, r, size, TestOptions());
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status();
      body(**comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Rank r's element i: distinct for every (rank, index, salt).
float Value(int rank, size_t i, int salt = 0) {
  return static_cast<float>(rank * 1000 + static_cast<int>(i) + salt * 100000);
}

std::vector<float> Values(int rank, size_t count, int salt = 0) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(rank, i, salt);
  return v;
}

// A sum all_reduce of `count` elements over the whole group, checked.
void ExpectAllReduceSum(Communicator& comm, size_t count, int salt,
                        absl::Duration wait = kWait) {
  std::vector<float> in = Values(comm.rank(), count, salt);
  std::vector<float> out(count, -1.0f);
  absl::StatusOr<Request> r =
      comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status s = r->Wait(wait);
  ASSERT_TRUE(s.ok()) << "rank " << comm.rank() << ": " << s;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < comm.size(); ++q) want += Value(q, i, salt);
    ASSERT_EQ(out[i], want) << "rank " << comm.rank() << " element " << i;
  }
}

// ---------------------------------------------------------------------------
// Bad input: InvalidArgument, and nothing sent.

struct BadCall {
  const char* name;
  // Issued on rank 0 of a group of two; returns the call's status.
  std::function<absl::Status(Communicator&, std::vector<float>&)> call;
};

template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

std::vector<BadCall> BadCalls() {
  using V = std::vector<float>;
  const DataType kBadType = static_cast<DataType>(99);
  const ReduceOp kBadOp = static_cast<ReduceOp>(99);
  auto in = [](V& v, size_t n = 4) { return ConstBuffer::Of(v.data(), n); };
  auto out = [](V& v, size_t n = 4, size_t offset = 32) {
    return Buffer::Of(v.data() + offset, n);
  };
  return {
      {"all_reduce null send",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllReduce(
             ConstBuffer{nullptr, 4, DataType::kFloat32, Device::Host()},
             out(v), ReduceOp::kSum));
       }},
      {"all_reduce null recv",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllReduce(
             in(v), Buffer{nullptr, 4, DataType::kFloat32, Device::Host()},
             ReduceOp::kSum));
       }},
      {"broadcast root == size",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Broadcast(in(v), out(v), 2));
       }},
      {"reduce root -1",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Reduce(in(v), out(v), ReduceOp::kSum, -1));
       }},
      {"gather root 99",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Gather(in(v), out(v, 8), 99));
       }},
      {"send peer == size",
       [=](Communicator& c, V& v) { return StatusOf(c.Send(in(v), 2)); }},
      {"send peer -1",
       [=](Communicator& c, V& v) { return StatusOf(c.Send(in(v), -1)); }},
      {"recv peer == size",
       [=](Communicator& c, V& v) { return StatusOf(c.Recv(out(v), 2)); }},
      {"send negative tag",
       [=](Communicator& c, V& v) { return StatusOf(c.Send(in(v), 1, -1)); }},
      {"recv negative tag",
       [=](Communicator& c, V& v) { return StatusOf(c.Recv(out(v), 1, -5)); }},
      {"send tag above kMaxUserTag",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Send(in(v), 1, kMaxUserTag + 1));
       }},
      {"send null buffer",
       [=](Communicator& c, V&) {
         return StatusOf(c.Send(
             ConstBuffer{nullptr, 4, DataType::kFloat32, Device::Host()}, 1));
       }},
      {"recv null buffer",
       [=](Communicator& c, V&) {
         return StatusOf(
             c.Recv(Buffer{nullptr, 4, DataType::kFloat32, Device::Host()}, 1));
       }},
      {"send unknown dtype",
       [=](Communicator& c, V& v) {
         return StatusOf(
             c.Send(ConstBuffer{v.data(), 4, kBadType, Device::Host()}, 1));
       }},
      {"send device memory",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Send(
             ConstBuffer{v.data(), 4, DataType::kFloat32, Device::Cuda(0)}, 1));
       }},
      {"batch whose second op is bad posts neither",
       [=](Communicator& c, V& v) {
         const P2POp ops[] = {P2POp::Send(in(v), 1, 0),
                              P2POp::Send(in(v), 7, 0)};
         return StatusOf(c.BatchSendRecv(ops));
       }},
      {"batch whose last op has a negative tag",
       [=](Communicator& c, V& v) {
         const P2POp ops[] = {P2POp::Recv(out(v), 1, 0),
                              P2POp::Send(in(v), 1, 0),
                              P2POp::Send(in(v), 1, -2)};
         return StatusOf(c.BatchSendRecv(ops));
       }},
      {"all_reduce unknown dtype",
       [=](Communicator& c, V& v) {
         return StatusOf(
             c.AllReduce(ConstBuffer{v.data(), 4, kBadType, Device::Host()},
                         Buffer{v.data() + 32, 4, kBadType, Device::Host()},
                         ReduceOp::kSum));
       }},
      {"all_reduce unknown op",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllReduce(in(v), out(v), kBadOp));
       }},
      {"reduce_scatter unknown op",
       [=](Communicator& c, V& v) {
         return StatusOf(c.ReduceScatter(in(v, 8), out(v, 4), kBadOp));
       }},
      {"all_gather recv == send (not send x size)",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllGather(in(v, 4), out(v, 4)));
       }},
      {"all_gather recv too large",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllGather(in(v, 4), out(v, 9)));
       }},
      {"all_to_all count not a multiple of size",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllToAll(in(v, 3), out(v, 3)));
       }},
      {"all_reduce partial overlap",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllReduce(in(v, 4), Buffer::Of(v.data() + 1, 4),
                                     ReduceOp::kSum));
       }},
      {"all_reduce forced pairwise",
       [=](Communicator& c, V& v) {
         CollectiveOptions o;
         o.algorithm = Algorithm::kPairwise;
         return StatusOf(c.AllReduce(in(v), out(v), ReduceOp::kSum, o));
       }},
      {"broadcast forced ring",
       [=](Communicator& c, V& v) {
         CollectiveOptions o;
         o.algorithm = Algorithm::kRing;
         return StatusOf(c.Broadcast(in(v), out(v), 0, o));
       }},
      {"barrier forced binomial tree",
       [=](Communicator& c, V&) {
         CollectiveOptions o;
         o.algorithm = Algorithm::kBinomialTree;
         return StatusOf(c.Barrier(o));
       }},
      {"all_reduce forced native on a transport without native collectives",
       [=](Communicator& c, V& v) {
         CollectiveOptions o;
         o.algorithm = Algorithm::kNative;
         return StatusOf(c.AllReduce(in(v), out(v), ReduceOp::kSum, o));
       }},
      {"all_reduce negative timeout",
       [=](Communicator& c, V& v) {
         return StatusOf(c.AllReduce(in(v), out(v), ReduceOp::kSum,
                                     WithTimeout(absl::Milliseconds(-1))));
       }},
      {"barrier negative timeout",
       [=](Communicator& c, V&) {
         return StatusOf(c.Barrier(WithTimeout(-absl::Seconds(3))));
       }},
      {"send negative timeout",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Send(in(v), 1, 0, WithTimeout(-absl::Seconds(1))));
       }},
      {"recv negative timeout",
       [=](Communicator& c, V& v) {
         return StatusOf(c.Recv(out(v), 1, 0, WithTimeout(-absl::Seconds(1))));
       }},
  };
}

// Verifies that bad calls are InvalidArgument and send or consume nothing.
TEST(CommunicatorTest, BadInputIsInvalidArgumentAndSendsNothing) {
  // Rank 0 makes the bad call; rank 1 does not. Both then exchange one
  // message each way on tag 0 and run an all_reduce (whose tags carry the
  // collective sequence number): a bad call that had posted a message or
  // taken a sequence number would make these mismatch or time out.
  for (const BadCall& bad : BadCalls()) {
    SCOPED_TRACE(bad.name);
    // Memory for the bad calls; it outlives the group, so even a call that
    // wrongly went ahead never touches freed memory. Its contents differ
    // from the good messages, so a stray message is noticed.
    std::vector<float> scratch(64, -7.0f);
    RunGroup(2, [&](Communicator& comm) {
      const int rank = comm.rank(), peer = 1 - rank;
      if (rank == 0) {
        absl::Status s = bad.call(comm, scratch);
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
            << bad.name << ": " << s;
      }
      // Good traffic: one message each way on tag 0, then an all_reduce.
      std::vector<float> mine = Values(rank, 4, 1), theirs(4, 0.0f);
      const P2POp ops[] = {P2POp::Send(ConstBuffer::Of(mine), peer, 0),
                           P2POp::Recv(Buffer::Of(theirs), peer, 0)};
      absl::StatusOr<Request> r = comm.BatchSendRecv(ops);
      ASSERT_TRUE(r.ok()) << r.status();
      absl::Status s = r->Wait(kProbeWait);
      ASSERT_TRUE(s.ok()) << bad.name << ": rank " << rank << ": " << s;
      EXPECT_EQ(theirs, Values(peer, 4, 1)) << bad.name << ": rank " << rank;
      ExpectAllReduceSum(comm, 16, 2, kProbeWait);
    });
  }
}

// Verifies that Create rejects bad ranks, sizes, stores, timeouts, transports.
TEST(CommunicatorTest, CreateRejectsBadConfig) {
  auto store = std::make_shared<InMemoryStore>();
  struct BadConfig {
    const char* name;
    int rank, size;
    std::shared_ptr<Store> store;
    absl::Duration timeout;
    absl::StatusCode code;
  };
  for (const BadConfig& c : {
           BadConfig{"rank == size", 2, 2, store, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"rank > size", 5, 2, store, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"negative rank", -1, 2, store, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"size 0", 0, 0, store, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"negative size", 0, -3, store, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"null store", 0, 1, nullptr, absl::Seconds(1),
                     absl::StatusCode::kInvalidArgument},
           BadConfig{"zero timeout", 0, 1, store, absl::ZeroDuration(),
                     absl::StatusCode::kInvalidArgument},
       }) {
    CommunicatorConfig config;
    config.rank = c.rank;
    config.size = c.size;
    config.store = c.store;
    config.options.default_timeout = c.timeout;
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateCommunicator(config);
    EXPECT_EQ(comm.status().code(), c.code) << c.name << ": " << comm.status();
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      Make(0, 1, store, "nope");
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(comm.status().message()), HasSubstr("loopback"));
}

// Settings that would break a healthy job are refused when the communicator
// is made, naming the setting: a peer timeout within a few heartbeats
// (RELAY_PEER_TIMEOUT=0.000001 was taken, then healthy jobs failed), a
// malformed RELAY_TIMEOUT, a flight recorder directory that cannot be
// written (found only when the first record was written, after a hang).
TEST(CommunicatorTest, CreateRefusesSettingsThatBreakAHealthyJob) {
  auto store = std::make_shared<InMemoryStore>();
  auto create = [&](CommunicatorOptions options) {
    CommunicatorConfig config;
    config.rank = 0;
    config.size = 1;
    config.store = store;
    config.options = options;
    return CreateCommunicator(config).status();
  };
  CommunicatorOptions options;
  options.peer_timeout = absl::Milliseconds(500);
  absl::Status s = create(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("heartbeat"));
  options.peer_timeout = absl::Seconds(1);
  EXPECT_TRUE(create(options).ok());
  options.peer_timeout = absl::ZeroDuration();  // Heartbeats off: fine.
  EXPECT_TRUE(create(options).ok());

  struct Case {
    const char* name;
    const char* value;
  };
  for (const Case& c : {Case{"RELAY_PEER_TIMEOUT", "0.000001"},
                        Case{"RELAY_PEER_TIMEOUT", "0.25"},
                        Case{"RELAY_TIMEOUT", "soon"},
                        Case{"RELAY_TIMEOUT", "0"},
                        Case{"RELAY_FLIGHT_RECORDER_DIR", "/nonexistent/dir"}}) {
    ASSERT_EQ(setenv(c.name, c.value, 1), 0);
    s = create(CommunicatorOptions{});
    unsetenv(c.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.name << "=" << c.value << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.name));
  }
}

// RELAY_TIMEOUT sets the default timeout of operations that set none.
TEST(CommunicatorTest, RelayTimeoutSetsTheDefaultTimeout) {
  ASSERT_EQ(setenv("RELAY_TIMEOUT", "0.3", 1), 0);
  CommunicatorConfig config;
  config.rank = 0;
  config.size = 2;
  config.store = std::make_shared<InMemoryStore>();
  config.options.default_timeout = CommunicatorOptions::kDefaultTimeout;
  absl::StatusOr<std::unique_ptr<Communicator>> comm, peer_comm;
  std::thread other([&] {
    CommunicatorConfig peer = config;
    peer.rank = 1;
    peer_comm = CreateCommunicator(peer);  // Kept: it never sends.
    EXPECT_TRUE(peer_comm.ok()) << peer_comm.status();
  });
  comm = CreateCommunicator(config);
  other.join();
  unsetenv("RELAY_TIMEOUT");
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> in(4);
  const absl::Time start = absl::Now();
  absl::StatusOr<Request> r = (*comm)->Recv(Buffer::Of(in), 1);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(r->Wait()));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
}

// Verifies that a communicator of one rank runs collectives on its own.
TEST(CommunicatorTest, SingleRank) {
  RunGroup(1, [](Communicator& comm) {
    EXPECT_EQ(comm.transport_name(), "loopback");
    ExpectAllReduceSum(comm, 10, 3);
    absl::StatusOr<Request> b = comm.Barrier();
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b->Wait(kWait).ok());
  });
}

// ---------------------------------------------------------------------------
// Timeouts and Abort.

// Verifies that a never-matched Recv times out, then Abort cancels it promptly.
TEST(CommunicatorTest, RecvTimeoutThenAbort) {
  ThreadBarrier done(2);
  RunGroup(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      // Never sends or receives; stays connected until rank 0 is finished,
      // so rank 0's requests are not failed by this rank leaving.
      EXPECT_TRUE(done.Arrive());
      return;
    }
    std::vector<float> in = Values(0, 8), out(8, 0.0f);
    absl::StatusOr<Request> recv = comm.Recv(Buffer::Of(out), 1, 5);
    ASSERT_TRUE(recv.ok()) << recv.status();
    // Loopback sends complete only when received: this one stays pending.
    absl::StatusOr<Request> send = comm.Send(ConstBuffer::Of(in), 1, 6);
    ASSERT_TRUE(send.ok()) << send.status();

    const absl::Duration timeout = absl::Milliseconds(300);
    absl::Time start = absl::Now();
    absl::Status s = recv->Wait(timeout);
    absl::Duration took = absl::Now() - start;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_GE(took, timeout);
    EXPECT_LT(took, timeout + kSlack);
    EXPECT_FALSE(recv->Test());
    EXPECT_FALSE(send->Test());

    start = absl::Now();
    EXPECT_TRUE(comm.Abort().ok());
    took = absl::Now() - start;
    EXPECT_LT(took, absl::Milliseconds(100));

    EXPECT_EQ(recv->Wait(absl::Seconds(1)).code(),
              absl::StatusCode::kCancelled);
    EXPECT_TRUE(recv->Test());
    EXPECT_EQ(recv->status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(send->Wait(absl::Seconds(1)).code(),
              absl::StatusCode::kCancelled);
    EXPECT_EQ(out, std::vector<float>(8, 0.0f));  // Nothing was written.

    // Later calls fail without blocking.
    auto failed_precondition = [](const absl::Status& st) {
      return st.code() == absl::StatusCode::kFailedPrecondition;
    };
    EXPECT_TRUE(
        failed_precondition(comm.Send(ConstBuffer::Of(in), 1).status()));
    EXPECT_TRUE(failed_precondition(comm.Recv(Buffer::Of(out), 1).status()));
    EXPECT_TRUE(failed_precondition(
        comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum)
            .status()));
    EXPECT_TRUE(failed_precondition(comm.Barrier().status()));
    const P2POp ops[] = {P2POp::Send(ConstBuffer::Of(in), 1)};
    EXPECT_TRUE(failed_precondition(comm.BatchSendRecv(ops).status()));
    EXPECT_TRUE(failed_precondition(
        comm.Split(0, 0, WithTimeout(absl::Seconds(1))).status()));
    EXPECT_THAT(std::string(comm.Barrier().status().message()),
                HasSubstr("aborted"));
    // Abort is idempotent.
    EXPECT_TRUE(comm.Abort(absl::CancelledError("again")).ok());
    EXPECT_TRUE(done.Arrive());
  });
}

// Verifies that a collective missing a rank times out, then aborts cleanly.
TEST(CommunicatorTest, CollectiveMissingARankTimesOutThenAborts) {
  // Ranks abort one at a time. The first to abort sees Cancelled; a later
  // one may already have been failed by an earlier rank's loss (loopback
  // propagates it as Unavailable), which is also a correct outcome.
  constexpr int kSize = 4;
  constexpr int kAbsent = 2;
  ThreadBarrier barrier(kSize);
  std::atomic<int> aborted_before{0};
  RunGroup(kSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    std::vector<float> in = Values(rank, 64), out(64, 0.0f);
    Request pending;
    if (rank != kAbsent) {
      absl::StatusOr<Request> r =
          comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
      ASSERT_TRUE(r.ok()) << r.status();
      pending = *std::move(r);
      const absl::Duration timeout = absl::Milliseconds(200);
      const absl::Time start = absl::Now();
      absl::Status s = pending.Wait(timeout);
      const absl::Duration took = absl::Now() - start;
      EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded)
          << "rank " << rank << ": " << s;
      EXPECT_GE(took, timeout);
      EXPECT_LT(took, timeout + kSlack);
    }
    EXPECT_TRUE(barrier.Arrive());
    // Abort one rank at a time, in rank order, the absent rank last.
    std::vector<int> order;
    for (int r = 0; r < kSize; ++r) {
      if (r != kAbsent) order.push_back(r);
    }
    order.push_back(kAbsent);
    for (int turn : order) {
      if (turn == rank) {
        const absl::Time start = absl::Now();
        EXPECT_TRUE(comm.Abort().ok());
        EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
        if (pending.valid()) {
          absl::Status s = pending.Wait(absl::Seconds(1));
          if (aborted_before.load() == 0) {
            EXPECT_EQ(s.code(), absl::StatusCode::kCancelled)
                << "rank " << rank << ": " << s;
          } else {
            EXPECT_TRUE(absl::IsCancelled(s) ||
                        (absl::IsUnavailable(s) &&
                         absl::StrContains(s.message(), "left the group")))
                << "rank " << rank << ": " << s;
          }
        }
        aborted_before.fetch_add(1);
      }
      EXPECT_TRUE(barrier.Arrive());
    }
    if (pending.valid()) {
      EXPECT_TRUE(pending.Test());
      EXPECT_FALSE(pending.status().ok());
    }
  });
}

// A pending shm collective is the transport's own request: the communicator
// does not track it (RequestState::CancelledByTransportAbort), and Abort
// must still fail it, through the transport's Abort.
TEST(CommunicatorTest, AbortCancelsAPendingShmCollective) {
  ThreadBarrier barrier(2);
  RunGroup(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      // Calls the matching collective only once rank 0 has aborted: rank
      // 0's slot holds its contribution, but its request was cancelled, so
      // this one must fail too (it returned OK with rank 0's data).
      EXPECT_TRUE(barrier.Arrive());
      std::vector<float> in = Values(1, 16), out(16, 0.0f);
      CollectiveOptions options;
      options.algorithm = Algorithm::kShm;
      absl::StatusOr<Request> r = comm.AllReduce(
          ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum, options);
      ASSERT_TRUE(r.ok()) << r.status();
      const absl::Status s = r->Wait(kProbeWait);
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("rank 0")) << s;
      return;
    }
    std::vector<float> in = Values(0, 16), out(16, 0.0f);
    CollectiveOptions options;
    options.algorithm = Algorithm::kShm;
    absl::StatusOr<Request> r = comm.AllReduce(
        ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum, options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->Test());
    const absl::Time start = absl::Now();
    EXPECT_TRUE(comm.Abort().ok());
    const absl::Status s = r->Wait(absl::Seconds(1));
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_TRUE(barrier.Arrive());
  });
}

// The blocking forms: every collective kind, small (shm's one exchange on
// the calling thread) and large (a schedule started and waited for), mixed
// with requests started before them, agrees with the request form; and
// each call is in the metrics and the flight record.
TEST(CommunicatorTest, BlockingFormsMatchAndMixWithRequests) {
  RunGroup(3, [&](Communicator& comm) {
    const int rank = comm.rank();
    for (size_t count : {size_t{1}, size_t{37}, size_t{100003}}) {
      SCOPED_TRACE(absl::StrCat("count ", count));
      std::vector<float> in = Values(rank, count, 1), out(count, -1.0f);
      ASSERT_TRUE(comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                    ReduceOp::kSum)
                      .ok());
      for (size_t i = 0; i < count; i += 997) {
        const float want = Value(0, i, 1) + Value(1, i, 1) + Value(2, i, 1);
        ASSERT_FLOAT_EQ(out[i], want) << "element " << i;
      }
      // A request left pending, then a blocking call: it queues behind the
      // request, and both come out right.
      std::vector<float> in2 = Values(rank, count, 2), out2(count, -1.0f);
      absl::StatusOr<Request> pending =
          comm.AllReduce(ConstBuffer::Of(in2), Buffer::Of(out2),
                         ReduceOp::kMax);
      ASSERT_TRUE(pending.ok()) << pending.status();
      std::vector<float> gathered(3 * count, -1.0f);
      ASSERT_TRUE(comm.RunCollective(CollectiveKind::kAllGather,
                                     ConstBuffer::Of(in), Buffer::Of(gathered),
                                     ReduceOp::kSum, 0)
                      .ok());
      ASSERT_TRUE(pending->Wait(kWait).ok());
      for (size_t i = 0; i < count; i += 997) {
        EXPECT_FLOAT_EQ(out2[i], std::max({Value(0, i, 2), Value(1, i, 2),
                                           Value(2, i, 2)}));
        for (int r = 0; r < 3; ++r) {
          EXPECT_FLOAT_EQ(gathered[r * count + i], Value(r, i, 1));
        }
      }
    }
    ASSERT_TRUE(comm.RunCollective(CollectiveKind::kBarrier, {}, {},
                                   ReduceOp::kSum, 0)
                    .ok());
    // 3 blocking all_reduces and 3 started ones; the record shows them all.
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kAllReduce).operations, 6u);
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kAllGather).operations, 3u);
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kBarrier).operations, 1u);
    EXPECT_THAT(comm.FlightRecord(), HasSubstr("all_gather"));
  });
}

TEST(CommunicatorTest, BlockingBadInputIsInvalidArgumentAndSendsNothing) {
  RunGroup(2, [&](Communicator& comm) {
    std::vector<float> in(4, 1.0f), out(3, 0.0f);
    EXPECT_TRUE(absl::IsInvalidArgument(comm.RunAllReduce(
        ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum)));
    EXPECT_TRUE(absl::IsInvalidArgument(comm.RunCollective(
        CollectiveKind::kBroadcast, ConstBuffer::Of(in), Buffer::Of(in),
        ReduceOp::kSum, 5)));
    EXPECT_TRUE(absl::IsInvalidArgument(comm.RunAllReduce(
        ConstBuffer{nullptr, 4, DataType::kFloat32, Device::Host()},
        Buffer::Of(in), ReduceOp::kSum)));
    // Nothing was sent and no sequence number taken: the group is in step.
    ExpectAllReduceSum(comm, 16, 3, kProbeWait);
  });
}

// A blocking call whose peer never comes returns DeadlineExceeded within
// its timeout, and leaves nothing in flight: the communicator is aborted
// (later calls fail at once), and the peer learns of it.
TEST(CommunicatorTest, BlockingCallMissingAPeerTimesOutAndAborts) {
  ThreadBarrier barrier(2);
  RunGroup(2, [&](Communicator& comm) {
    std::vector<float> in = Values(comm.rank(), 8), out(8, 0.0f);
    if (comm.rank() == 1) {
      EXPECT_TRUE(barrier.Arrive());  // Rank 0 has timed out.
      // Rank 0's contribution to the first all_reduce is in its slot, so
      // this rank may still finish that one (unless the failure monitor
      // has told it of rank 0's abort already); the next cannot complete,
      // and fails naming rank 0 instead of waiting for a partner that left.
      absl::Status s = comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                         ReduceOp::kSum, WithTimeout(kWait));
      if (s.ok()) {
        EXPECT_FLOAT_EQ(out[3], Value(0, 3) + Value(1, 3));
        s = comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                              ReduceOp::kSum, WithTimeout(kWait));
      }
      EXPECT_TRUE(absl::IsUnavailable(s) || absl::IsFailedPrecondition(s)) << s;
      EXPECT_THAT(s.message(), HasSubstr("rank 0"));
      return;
    }
    const absl::Duration timeout = absl::Milliseconds(200);
    const absl::Time start = absl::Now();
    absl::Status s = comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                       ReduceOp::kSum, WithTimeout(timeout));
    const absl::Duration took = absl::Now() - start;
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_GE(took, timeout);
    EXPECT_LT(took, timeout + kSlack);
    absl::Status later = comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                           ReduceOp::kSum);
    EXPECT_TRUE(absl::IsFailedPrecondition(later)) << later;
    EXPECT_EQ(comm.metrics().Totals(CollectiveKind::kAllReduce).errors, 1u);
    EXPECT_TRUE(barrier.Arrive());
  });
}

// Rank 0 makes a blocking all_reduce that rank 1 never joins; another
// thread aborts it: the call returns Cancelled within `bound` of the abort.
void ExpectAbortEndsABlockedCall(const CommunicatorOptions& options,
                                 absl::Duration bound) {
  ThreadBarrier barrier(2);
  RunGroup(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {  // Never calls the collective.
      EXPECT_TRUE(barrier.Arrive());
      return;
    }
    std::vector<float> in = Values(0, 16), out(16, 0.0f);
    absl::Time aborted_at;
    std::thread aborter([&] {
      absl::SleepFor(absl::Milliseconds(100));  // The call waits by now.
      aborted_at = absl::Now();
      EXPECT_TRUE(comm.Abort().ok());
    });
    absl::Status s = comm.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                       ReduceOp::kSum, WithTimeout(kWait));
    const absl::Time returned = absl::Now();
    aborter.join();
    EXPECT_TRUE(absl::IsCancelled(s)) << s;
    EXPECT_LT(returned - aborted_at, bound);
    EXPECT_TRUE(barrier.Arrive());
  }, options);
}

// Abort from another thread ends a blocking call at once, with Cancelled.
TEST(CommunicatorTest, AbortEndsABlockingCallPromptly) {
  ExpectAbortEndsABlockedCall(TestOptions(), absl::Milliseconds(100));
}

// A failure inside the shared-memory exchange (here a peer that aborted,
// with failure propagation off, so only the exchange can tell) aborts the
// communicator as any algorithm's does: the rank writes its flight record.
// The exchange never called the failure hook, so no record was written.
TEST(CommunicatorTest, AShmFailureWritesTheFlightRecord) {
  char tmpl[] = "/tmp/shm_flight.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_EQ(setenv("RELAY_FLIGHT_RECORDER_DIR", dir.c_str(), 1), 0);
  CommunicatorOptions options = TestOptions();
  options.failure_poll_interval = absl::ZeroDuration();
  ThreadBarrier barrier(2);
  RunGroup(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      EXPECT_TRUE(comm.Abort().ok());
      EXPECT_TRUE(barrier.Arrive());
      return;
    }
    EXPECT_TRUE(barrier.Arrive());
    std::vector<float> in = Values(0, 16), out(16, 0.0f);
    CollectiveOptions shm;
    shm.algorithm = Algorithm::kShm;
    absl::StatusOr<Request> r =
        comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum, shm);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(absl::IsUnavailable(r->Wait(kWait)));
    std::ifstream record(dir + "/relay_flight_rank0.json");
    std::stringstream text;
    text << record.rdbuf();
    EXPECT_THAT(text.str(), HasSubstr("\"state\": \"failed\""))
        << "rank 0 wrote no record of its failed shm all_reduce";
  }, options);
  unsetenv("RELAY_FLIGHT_RECORDER_DIR");
  std::system(absl::StrCat("rm -rf ", dir).c_str());
}

// With the fingerprint check on: a call blocked in the check (its peer
// never comes) ends with Cancelled soon after Abort, not at its timeout.
TEST(CommunicatorTest, AbortEndsACallBlockedInTheMismatchCheck) {
  CommunicatorOptions options = TestOptions();
  options.check_level = CheckLevel::kFingerprint;
  // The check waits on the store in 50 ms slices.
  ExpectAbortEndsABlockedCall(options, absl::Milliseconds(200));
}

// Verifies that a peer's abort fails a blocked Recv with Unavailable naming it.
TEST(CommunicatorTest, PeerAbortIsUnavailableNamingTheRank) {
  ThreadBarrier barrier(2);
  RunGroup(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      absl::SleepFor(absl::Milliseconds(100));  // Let rank 0 block first.
      EXPECT_TRUE(comm.Abort(absl::CancelledError("rank 1 is done")).ok());
      EXPECT_TRUE(barrier.Arrive());
      return;
    }
    std::vector<float> out(4, 0.0f);
    absl::StatusOr<Request> r = comm.Recv(Buffer::Of(out), 1, 3);
    ASSERT_TRUE(r.ok());
    const absl::Time start = absl::Now();
    absl::Status s = r->Wait(kWait);
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
    EXPECT_TRUE(barrier.Arrive());

    // The peer is gone for good: later operations involving it fail fast.
    std::vector<float> in = Values(0, 4);
    absl::StatusOr<Request> send = comm.Send(ConstBuffer::Of(in), 1);
    ASSERT_TRUE(send.ok());
    s = send->Wait(kWait);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
    absl::StatusOr<Request> all =
        comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
    ASSERT_TRUE(all.ok());
    s = all->Wait(kWait);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
  });
}

// Verifies that once Abort returns, nothing writes into the buffers of the
// aborting rank's collectives any more: neither peers (the transport) nor
// this rank's own algorithm running on another thread (the gate).
TEST(CommunicatorTest, AbortLeavesBuffersAloneOnceItReturns) {
  constexpr size_t kCount = 1 << 20;  // 4 MiB: many pipelined segments.
  for (int round = 0; round < 5; ++round) {
    RunGroup(4, [&](Communicator& comm) {
      std::vector<float> in = Values(comm.rank(), kCount);
      std::vector<float> out(kCount, 0.0f);
      absl::StatusOr<Request> r =
          comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
      if (comm.rank() != 0) {
        // Peers finish or learn of the loss; either way they return. A slow
        // peer may learn it before posting (runtime/failure_monitor.h), and
        // then cannot post: Abort reached it first.
        if (r.ok()) {
          r->Wait(kWait).IgnoreError();
        } else {
          EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
              << r.status();
        }
        return;
      }
      ASSERT_TRUE(r.ok()) << r.status();
      absl::SleepFor(absl::Microseconds(200 * round));
      ASSERT_TRUE(comm.Abort().ok());
      ASSERT_TRUE(r->Test());  // Complete (OK or Cancelled) at return.
      std::fill(out.begin(), out.end(), -7.0f);
      absl::SleepFor(absl::Milliseconds(20));
      for (size_t i = 0; i < kCount; i += 4099) {
        ASSERT_EQ(out[i], -7.0f) << "index " << i << " written after Abort";
      }
    });
  }
}

// ---------------------------------------------------------------------------
// Point-to-point.

// Verifies that 100 messages on one pair and tag arrive in the order sent.
// An empty collective on buffers declared on a device is a device
// operation on every path: StreamWait on it succeeds (with a forced relay
// algorithm it was a host request, and StreamWait said Unimplemented).
TEST(CommunicatorTest, EmptyDeviceCollectiveSupportsStreamWait) {
  RunGroup(2, [&](Communicator& comm) {
    float unused = 0;
    const ConstBuffer send{&unused, 0, DataType::kFloat32, Device::Cuda(0)};
    const Buffer recv{&unused, 0, DataType::kFloat32, Device::Cuda(0)};
    for (Algorithm algorithm :
         {Algorithm::kAuto, Algorithm::kRing, Algorithm::kRecursiveDoubling}) {
      CollectiveOptions options;
      options.algorithm = algorithm;
      absl::StatusOr<Request> r =
          comm.AllReduce(send, recv, ReduceOp::kSum, options);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE(r->Wait(kWait).ok());
      EXPECT_TRUE(r->StreamWait(nullptr).ok())
          << AlgorithmName(algorithm) << ": " << r->StreamWait(nullptr);
    }
  });
}

// One tag limit on every transport (UCX carries 2^43 - 1): loopback takes
// kMaxUserTag and refuses one more, as UCX does.
TEST(CommunicatorTest, TheLargestTagIsTheSameOnEveryTransport) {
  static_assert(kMaxUserTag == (int64_t{1} << 43) - 1);
  RunGroup(2, [&](Communicator& comm) {
    std::vector<float> data = Values(0, 4), got(4, -1.0f);
    absl::StatusOr<Request> r =
        comm.rank() == 0 ? comm.Send(ConstBuffer::Of(data), 1, kMaxUserTag)
                         : comm.Recv(Buffer::Of(got), 0, kMaxUserTag);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->Wait(kWait).ok());
    if (comm.rank() == 1) {
      EXPECT_EQ(got, data);
    }
    absl::StatusOr<Request> over =
        comm.Send(ConstBuffer::Of(data), 1 - comm.rank(), kMaxUserTag + 1);
    EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST(CommunicatorTest, MessagesOnOneTagArriveInOrder) {
  constexpr int kMessages = 100;
  auto size_of = [](int k) { return static_cast<size_t>(1 + k % 7); };
  for (bool sends_first : {true, false}) {
    SCOPED_TRACE(sends_first ? "sends first" : "receives first");
    ThreadBarrier barrier(2);
    RunGroup(2, [&](Communicator& comm) {
      const int64_t tag = sends_first ? 11 : 12;
      std::vector<std::vector<float>> data(kMessages);
      std::vector<Request> requests;
      auto post = [&] {
        for (int k = 0; k < kMessages; ++k) {
          absl::StatusOr<Request> r;
          if (comm.rank() == 0) {
            data[k] = Values(0, size_of(k), k);
            r = comm.Send(ConstBuffer::Of(data[k]), 1, tag);
          } else {
            data[k].assign(size_of(k), -1.0f);
            r = comm.Recv(Buffer::Of(data[k]), 0, tag);
          }
          ASSERT_TRUE(r.ok()) << r.status();
          requests.push_back(*std::move(r));
        }
      };
      const bool me_first = (comm.rank() == 0) == sends_first;
      if (me_first) post();
      EXPECT_TRUE(barrier.Arrive());
      if (!me_first) post();
      for (int k = 0; k < static_cast<int>(requests.size()); ++k) {
        absl::Status s = requests[k].Wait(kWait);
        EXPECT_TRUE(s.ok())
            << "rank " << comm.rank() << " message " << k << ": " << s;
      }
      if (comm.rank() == 1) {
        for (int k = 0; k < kMessages; ++k) {
          EXPECT_EQ(data[k], Values(0, size_of(k), k)) << "message " << k;
        }
      }
    });
  }
}

// Verifies that messages on different tags can be received out of order.
TEST(CommunicatorTest, DifferentTagsCanBeReceivedOutOfOrder) {
  RunGroup(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      std::vector<float> a = Values(0, 5, 1), b = Values(0, 5, 2);
      absl::StatusOr<Request> sa = comm.Send(ConstBuffer::Of(a), 1, 1);
      absl::StatusOr<Request> sb = comm.Send(ConstBuffer::Of(b), 1, 2);
      ASSERT_TRUE(sa.ok() && sb.ok());
      EXPECT_TRUE(sb->Wait(kWait).ok());
      EXPECT_TRUE(sa->Wait(kWait).ok());
      return;
    }
    std::vector<float> got_b(5, 0.0f), got_a(5, 0.0f);
    absl::StatusOr<Request> rb = comm.Recv(Buffer::Of(got_b), 0, 2);
    ASSERT_TRUE(rb.ok());
    EXPECT_TRUE(rb->Wait(kWait).ok());
    EXPECT_EQ(got_b, Values(0, 5, 2));
    absl::StatusOr<Request> ra = comm.Recv(Buffer::Of(got_a), 0, 1);
    ASSERT_TRUE(ra.ok());
    EXPECT_TRUE(ra->Wait(kWait).ok());
    EXPECT_EQ(got_a, Values(0, 5, 1));
  });
}

// Verifies that BatchSendRecv runs a two-way ring exchange among 5 ranks.
TEST(CommunicatorTest, BatchSendRecvRing) {
  constexpr int kSize = 5;
  RunGroup(kSize, [](Communicator& comm) {
    const int rank = comm.rank();
    const int right = (rank + 1) % kSize, left = (rank + kSize - 1) % kSize;
    std::vector<float> to_right = Values(rank, 33, 1);
    std::vector<float> to_left = Values(rank, 17, 2);
    std::vector<float> from_left(33, 0.0f), from_right(17, 0.0f);
    const P2POp ops[] = {
        P2POp::Recv(Buffer::Of(from_left), left, 1),
        P2POp::Send(ConstBuffer::Of(to_right), right, 1),
        P2POp::Send(ConstBuffer::Of(to_left), left, 2),
        P2POp::Recv(Buffer::Of(from_right), right, 2),
    };
    absl::StatusOr<Request> r = comm.BatchSendRecv(ops);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::Status s = r->Wait(kWait);
    ASSERT_TRUE(s.ok()) << "rank " << rank << ": " << s;
    EXPECT_EQ(from_left, Values(left, 33, 1));
    EXPECT_EQ(from_right, Values(right, 17, 2));
  });
}

// Verifies that a send/recv size mismatch fails both sides InvalidArgument.
TEST(CommunicatorTest, SizeMismatchFailsBothSides) {
  RunGroup(2, [](Communicator& comm) {
    std::vector<float> data = Values(comm.rank(), 4);
    std::vector<float> big(5, 0.0f);
    absl::StatusOr<Request> r = comm.rank() == 0
                                    ? comm.Send(ConstBuffer::Of(data), 1, 9)
                                    : comm.Recv(Buffer::Of(big), 0, 9);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::Status s = r->Wait(kWait);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << "rank " << comm.rank() << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("size mismatch"));
    EXPECT_EQ(big, std::vector<float>(5, 0.0f));
    ExpectAllReduceSum(comm, 8, 4);
  });
}

// ---------------------------------------------------------------------------
// Split.

// Verifies that Split(rank % 2, -rank) of 6 ranks makes two reversed groups.
// Windows exist only where the transport maps peers' memory (cuda_ipc's
// own tests cover them); elsewhere RegisterWindow is Unimplemented on
// every rank and nothing hangs. Options other than a timeout are refused.
TEST(CommunicatorTest, WindowsAreUnimplementedOnLoopback) {
  RunGroup(2, [](Communicator& comm) {
    std::vector<float> region(64);
    EXPECT_EQ(comm.RegisterWindow(Buffer::Of(region), WithTimeout(kWait)).code(),
              absl::StatusCode::kUnimplemented);
    CollectiveOptions streamed = WithTimeout(kWait);
    streamed.stream_order = StreamOrder::kOnStream;
    EXPECT_EQ(comm.RegisterWindow(Buffer::Of(region), streamed).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.DeregisterWindow(region.data(), WithTimeout(kWait)).code(),
              absl::StatusCode::kUnimplemented);
    ExpectAllReduceSum(comm, 9, 2);  // Still usable.
  });
}

TEST(CommunicatorTest, SplitByParityReversed) {
  constexpr int kSize = 6;
  RunGroup(kSize, [](Communicator& comm) {
    const int rank = comm.rank(), color = rank % 2;
    absl::StatusOr<std::unique_ptr<Communicator>> child =
        comm.Split(color, -rank, WithTimeout(kWait));
    ASSERT_TRUE(child.ok()) << child.status();
    ASSERT_NE(*child, nullptr);
    Communicator& sub = **child;
    EXPECT_EQ(sub.size(), 3);
    // Members {color, color + 2, color + 4}, ordered by key = -rank.
    EXPECT_EQ(sub.rank(), (color + 4 - rank) / 2) << "rank " << rank;

    constexpr size_t kCount = 40;
    std::vector<float> in = Values(rank, kCount), out(kCount, 0.0f);
    absl::StatusOr<Request> r =
        sub.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->Wait(kWait).ok());
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int q = color; q < kSize; q += 2) want += Value(q, i);
      ASSERT_EQ(out[i], want) << "rank " << rank << " element " << i;
    }
    // The child's ranks are in key order: an all_gather of old ranks shows it.
    std::vector<int32_t> me = {rank}, all(3, -1);
    r = sub.AllGather(ConstBuffer::Of(me), Buffer::Of(all));
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(r->Wait(kWait).ok());
    EXPECT_EQ(all, (std::vector<int32_t>{color + 4, color + 2, color}));
    // The parent still works alongside its children.
    ExpectAllReduceSum(comm, 12, 5);
  });
}

// Verifies that Split with a negative color returns null on that rank.
TEST(CommunicatorTest, SplitNegativeColorIsNull) {
  RunGroup(4, [](Communicator& comm) {
    const int rank = comm.rank();
    absl::StatusOr<std::unique_ptr<Communicator>> child =
        comm.Split(rank == 3 ? -1 : 7, rank, WithTimeout(kWait));
    ASSERT_TRUE(child.ok()) << child.status();
    if (rank == 3) {
      EXPECT_EQ(*child, nullptr);
    } else {
      ASSERT_NE(*child, nullptr);
      EXPECT_EQ((*child)->size(), 3);
      EXPECT_EQ((*child)->rank(), rank);
      ExpectAllReduceSum(**child, 9, 6);
    }
    ExpectAllReduceSum(comm, 9, 7);
  });
}

// Verifies that a Split rejected on one rank leaves no gap in split ids.
TEST(CommunicatorTest, RejectedSplitLeavesNoGap) {
  RunGroup(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      absl::StatusOr<std::unique_ptr<Communicator>> bad =
          comm.Split(0, 0, WithTimeout(-absl::Seconds(1)));
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument)
          << bad.status();
      // An algorithm the exchange of colors and keys does not implement:
      // refused before the split counter moved (it was refused by that
      // exchange, after it).
      CollectiveOptions wrong_algorithm = WithTimeout(absl::Seconds(5));
      wrong_algorithm.algorithm = Algorithm::kBinomialTree;
      bad = comm.Split(0, 0, wrong_algorithm);
      EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument)
          << bad.status();
    }
    absl::StatusOr<std::unique_ptr<Communicator>> child =
        comm.Split(0, comm.rank(), WithTimeout(absl::Seconds(5)));
    ASSERT_TRUE(child.ok()) << child.status();
    ASSERT_NE(*child, nullptr);
    ExpectAllReduceSum(**child, 6, 8, kProbeWait);
  });
}

// Communicators made and destroyed leave the store as they found it: the
// last rank of each Split deletes its keys (rank 0's store grew 3.8 KB a
// communicator, 7.5 MB after 2,000). Only the splits' keys are counted:
// the world's failure monitor adds its own at its first poll, 250 ms in,
// which a slow run (ThreadSanitizer) reaches mid-test.
TEST(CommunicatorTest, DestroyedSplitsLeaveNoKeysBehind) {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<size_t> sizes;
  size_t live = 0;  // The splits' keys while the first pair of children lives.
  std::mutex mu;
  ThreadBarrier barrier(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Make(r, 2, store);
      ASSERT_TRUE(comm.ok()) << comm.status();
      for (int round = 0; round < 30; ++round) {
        absl::StatusOr<std::unique_ptr<Communicator>> child =
            (*comm)->Split(0, r, WithTimeout(kWait));
        ASSERT_TRUE(child.ok()) << child.status();
        ExpectAllReduceSum(**child, 4, round);
        ASSERT_TRUE(barrier.Arrive());  // Both children are alive.
        if (r == 0 && round == 0) live = store->size("split/");
        ASSERT_TRUE(barrier.Arrive());
        child->reset();
        ASSERT_TRUE(barrier.Arrive());  // Both children are gone.
        if (r == 0) {
          std::lock_guard<std::mutex> lock(mu);
          sizes.push_back(store->size("split/"));
        }
        ASSERT_TRUE(barrier.Arrive());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(sizes.size(), 30u);
  EXPECT_GT(live, sizes[1]) << "a live split's keys are not where the test counts";
  EXPECT_EQ(sizes.back(), sizes[1]) << "the store grows with every Split";
}

// Loopback behind a test's changes: forwards what a transport must have to
// a loopback rank, for subclasses to override a part.
class WrappedLoopback : public Transport {
 public:
  explicit WrappedLoopback(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  TransportCapabilities capabilities() const override {
    return inner_->capabilities();
  }
  absl::StatusOr<Request> Isend(int peer, Tag tag, ConstBuffer data,
                                absl::Time deadline) override {
    return inner_->Isend(peer, tag, data, deadline);
  }
  absl::StatusOr<Request> Irecv(int peer, Tag tag, Buffer data,
                                absl::Time deadline) override {
    return inner_->Irecv(peer, tag, data, deadline);
  }
  void Abort(absl::Status reason) override { inner_->Abort(reason); }

 protected:
  std::unique_ptr<Transport> inner_;
};

// Makes a WrappedLoopback subclass T around each loopback rank.
template <class T>
class WrappedLoopbackFactory final : public TransportFactory {
 public:
  absl::string_view name() const override { return "wrapped_loopback"; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override {
    RELAY_ASSIGN_OR_RETURN(TransportFactory * loopback,
                           TransportRegistry::Global().Get("loopback"));
    RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> inner,
                           loopback->Connect(config));
    return std::unique_ptr<Transport>(new T(std::move(inner)));
  }
};

// Loopback, declared as moving device memory only, as NCCL's transport does:
// the communicator cannot hand it host integers.
class DeviceOnlyLoopback final : public WrappedLoopback {
 public:
  using WrappedLoopback::WrappedLoopback;
  absl::string_view name() const override { return "device_only_loopback"; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = inner_->capabilities();
    caps.host_memory = false;
    caps.device_memory = true;
    return caps;
  }
};

// Verifies that Split works over a transport that moves no host memory (the
// colors and keys go through the store; an all_gather of them was refused
// with InvalidArgument, so Split over NCCL failed).
TEST(CommunicatorTest, SplitOverATransportWithoutHostMemory) {
  constexpr int kSize = 5;
  WrappedLoopbackFactory<DeviceOnlyLoopback> factory;
  RunGroupOn(factory, kSize, [&](Communicator& comm) {
    const int r = comm.rank();
    // Colors 0, 1, 0, 1 and rank 4 out; keys reverse the order.
    const int color = r == 4 ? -1 : r % 2;
    absl::StatusOr<std::unique_ptr<Communicator>> child =
        comm.Split(color, -r, WithTimeout(kWait));
    ASSERT_TRUE(child.ok()) << "rank " << r << ": " << child.status();
    if (color < 0) {
      EXPECT_EQ(*child, nullptr);
    } else {
      ASSERT_NE(*child, nullptr);
      EXPECT_EQ((*child)->size(), 2);
      EXPECT_EQ((*child)->rank(), r < 2 ? 1 : 0) << "rank " << r;
    }
    // A second split of the same parent gets a group of its own: all
    // five, in reverse.
    absl::StatusOr<std::unique_ptr<Communicator>> whole =
        comm.Split(0, kSize - r, WithTimeout(kWait));
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_NE(*whole, nullptr);
    EXPECT_EQ((*whole)->size(), kSize);
    EXPECT_EQ((*whole)->rank(), kSize - 1 - r);
  });
}

// Loopback whose PostBatch refuses one buffer address with InvalidArgument
// before posting anything, as NCCL's refuses a pointer CUDA does not know.
class RefusingLoopback final : public WrappedLoopback {
 public:
  static inline float poison[4];
  using WrappedLoopback::WrappedLoopback;
  absl::string_view name() const override { return "refusing_loopback"; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = inner_->capabilities();
    caps.exchange_bytes = 0;  // Neither forwarded.
    caps.shared_address_space = false;
    return caps;
  }
  absl::StatusOr<Request> PostBatch(absl::Span<const P2POp> ops,
                                    void* cuda_stream,
                                    absl::Time deadline) override {
    for (const P2POp& op : ops) {
      if (op.data.data == poison) {
        return absl::InvalidArgumentError("refusing_loopback: bad pointer");
      }
    }
    return inner_->PostBatch(ops, cuda_stream, deadline);
  }
};

// A batch the transport refuses before posting anything leaves the
// communicator usable, and the peers unaware (the communicator aborted on
// any PostBatch error, so the peers saw "rank 0 failed" and the next call
// FailedPrecondition).
TEST(CommunicatorTest, BatchRefusedBeforePostingLeavesTheCommunicatorUsable) {
  WrappedLoopbackFactory<RefusingLoopback> factory;
  RunGroupOn(factory, 2, [&](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<float> fine(4, 1.0f);
      const P2POp ops[] = {
          P2POp::Send(ConstBuffer::Of(fine), 1, 3),
          P2POp::Send(ConstBuffer{RefusingLoopback::poison, 4,
                                  DataType::kFloat32, Device::Host()},
                      1, 4)};
      absl::StatusOr<Request> refused = c.BatchSendRecv(ops);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
          << refused.status();
    }
    ExpectAllReduceSum(c, 6, 8, kProbeWait);
  });
}

// Loopback declared as having no point-to-point (a transport with native
// collectives only, as cuda_ipc was before its point-to-point).
class NoPointToPointLoopback final : public WrappedLoopback {
 public:
  using WrappedLoopback::WrappedLoopback;
  absl::string_view name() const override { return "no_p2p_loopback"; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps = inner_->capabilities();
    caps.point_to_point = false;
    caps.exchange_bytes = 0;
    caps.shared_address_space = false;
    return caps;
  }
};

// relay's own algorithms need point-to-point: over a transport without it a
// call that would run one (forced, or chosen where there are no native
// collectives) is InvalidArgument, naming the transport, before anything is
// sent.
TEST(CommunicatorTest, AlgorithmsThatNeedPointToPointAreRefusedWithoutIt) {
  WrappedLoopbackFactory<NoPointToPointLoopback> factory;
  RunGroupOn(factory, 2, [&](Communicator& comm) {
    std::vector<float> in(8, 1.0f), out(8, 0.0f);
    for (Algorithm a : {Algorithm::kRing, Algorithm::kAuto}) {
      CollectiveOptions opts;
      opts.algorithm = a;
      absl::StatusOr<Request> refused = comm.AllReduce(
          ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum, opts);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
          << refused.status();
      EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                    "no_p2p_loopback does not have"))
          << refused.status();
    }
  });
}

// ---------------------------------------------------------------------------
// Concurrency and callbacks.

// Verifies that 8 all_reduces in flight at once each get their own result.
TEST(CommunicatorTest, ConcurrentCollectivesStayApart) {
  constexpr int kSize = 4, kOps = 8;
  const size_t counts[kOps] = {1, 7, 100, 1000, 5000, 3, 20000, 64};
  RunGroup(kSize, [&](Communicator& comm) {
    const int rank = comm.rank();
    std::vector<std::vector<int32_t>> in(kOps), out(kOps);
    std::vector<Request> requests;
    for (int k = 0; k < kOps; ++k) {
      in[k].resize(counts[k]);
      out[k].assign(counts[k], -1);
      for (size_t i = 0; i < counts[k]; ++i) {
        in[k][i] = rank * 1000000 + static_cast<int32_t>(i) * 10 + k;
      }
      absl::StatusOr<Request> r = comm.AllReduce(
          ConstBuffer::Of(in[k]), Buffer::Of(out[k]), ReduceOp::kSum);
      ASSERT_TRUE(r.ok()) << r.status();
      requests.push_back(*std::move(r));
    }
    for (int k = kOps - 1; k >= 0; --k) {
      absl::Status s = requests[k].Wait(kWait);
      ASSERT_TRUE(s.ok()) << "rank " << rank << " op " << k << ": " << s;
    }
    for (int k = 0; k < kOps; ++k) {
      for (size_t i = 0; i < counts[k]; ++i) {
        const int32_t want = 1000000 * (kSize * (kSize - 1) / 2) +
                             kSize * (static_cast<int32_t>(i) * 10 + k);
        ASSERT_EQ(out[k][i], want)
            << "rank " << rank << " op " << k << " element " << i;
      }
    }
  });
}

// Verifies that OnDone on a collective's request runs exactly once.
TEST(CommunicatorTest, OnDoneRunsExactlyOnceForACollective) {
  RunGroup(3, [](Communicator& comm) {
    std::vector<float> in = Values(comm.rank(), 256), out(256, 0.0f);
    absl::StatusOr<Request> r =
        comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
    ASSERT_TRUE(r.ok());
    std::atomic<int> calls{0};
    std::promise<absl::Status> called;
    std::future<absl::Status> seen = called.get_future();
    r->OnDone([&calls, &called](absl::Status s) {
      if (calls.fetch_add(1) == 0) called.set_value(std::move(s));
    });
    ASSERT_TRUE(r->Wait(kWait).ok());
    // The callback may run just after Wait returns, on the completing thread.
    ASSERT_EQ(seen.wait_for(std::chrono::seconds(20)),
              std::future_status::ready);
    EXPECT_TRUE(seen.get().ok());
    int late = 0;
    r->OnDone([&late](absl::Status s) {
      ++late;
      EXPECT_TRUE(s.ok());
    });
    EXPECT_EQ(late, 1);
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(calls.load(), 1);
    // Keep every rank's buffers alive until all have finished.
    absl::StatusOr<Request> b = comm.Barrier();
    ASSERT_TRUE(b.ok());
    EXPECT_TRUE(b->Wait(kWait).ok());
    EXPECT_EQ(calls.load(), 1);
  });
}

// ---------------------------------------------------------------------------
// Registry.

class FakeFactory : public TransportFactory {
 public:
  FakeFactory(std::string name, bool viable)
      : name_(std::move(name)), viable_(viable) {}
  absl::string_view name() const override { return name_; }
  bool IsViable() const override { return viable_; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig&) override {
    return absl::UnimplementedError("fake");
  }

 private:
  std::string name_;
  bool viable_;
};

// Verifies that loopback is registered and viable, and unknown names NotFound.
TEST(TransportRegistryTest, BuiltInsAndUnknownName) {
  std::vector<TransportRegistry::Entry> list = Transports().List();
  bool found = false;
  for (const TransportRegistry::Entry& e : list) {
    if (e.name == "loopback") {
      found = true;
      EXPECT_TRUE(e.viable);
    }
  }
  EXPECT_TRUE(found);
  absl::StatusOr<TransportFactory*> loopback = Transports().Get("loopback");
  ASSERT_TRUE(loopback.ok());
  EXPECT_EQ((*loopback)->name(), "loopback");
  absl::StatusOr<TransportFactory*> def = Transports().Default();
  ASSERT_TRUE(def.ok());
  EXPECT_TRUE((*def)->IsViable());

  absl::StatusOr<TransportFactory*> nope = Transports().Get("nope");
  EXPECT_EQ(nope.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(nope.status().message()), HasSubstr("'nope'"));
  EXPECT_THAT(std::string(nope.status().message()), HasSubstr("loopback"));
}

// Verifies that a fresh registry rejects duplicates and orders by priority.
TEST(TransportRegistryTest, FreshRegistry) {
  TransportRegistry registry;
  EXPECT_EQ(registry.Default().status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(
      registry.Register(1, std::make_unique<FakeFactory>("a", true)).ok());
  absl::Status dup =
      registry.Register(9, std::make_unique<FakeFactory>("a", true));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists) << dup;
  EXPECT_THAT(std::string(dup.message()), HasSubstr("'a'"));
  EXPECT_EQ(registry.Register(0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      registry.Register(5, std::make_unique<FakeFactory>("b", false)).ok());
  EXPECT_TRUE(
      registry.Register(3, std::make_unique<FakeFactory>("c", true)).ok());

  std::vector<TransportRegistry::Entry> list = registry.List();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].name, "b");
  EXPECT_EQ(list[0].priority, 5);
  EXPECT_FALSE(list[0].viable);
  EXPECT_EQ(list[1].name, "c");
  EXPECT_EQ(list[2].name, "a");
  EXPECT_EQ(list[2].priority, 1);  // The duplicate did not replace it.

  absl::StatusOr<TransportFactory*> def = registry.Default();
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->name(), "c");
  absl::StatusOr<TransportFactory*> missing = registry.Get("loopback");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("b, c, a"));
}

}  // namespace
}  // namespace relay
