#include "runtime/slot_exchange.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/shared_segment.h"
#include "runtime/store.h"

namespace relay {
namespace {

constexpr std::chrono::nanoseconds kSpin{500};

// A zeroed, 64-byte aligned region for `size` ranks.
struct Region {
  Region(int size, size_t slot_bytes)
      : bytes(SlotExchange::RegionBytes(size, slot_bytes)),
        data(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64))) {
    std::memset(data, 0, bytes);
  }
  ~Region() { std::free(data); }
  size_t bytes;
  char* data;
};

// Each rank brings rank + 1 values (different sizes on purpose); finish
// writes the sum of every value of every rank and how many there were.
struct SumResult {
  int64_t sum = 0;
  int64_t values = 0;
  int ranks = 0;
};
void SumAll(absl::Span<const Contribution> all, const void* context) {
  SumResult* out = *static_cast<SumResult* const*>(context);
  *out = {};
  out->ranks = static_cast<int>(all.size());
  for (const Contribution& c : all) {
    const auto* v = static_cast<const int64_t*>(c.data);
    for (size_t i = 0; i < c.bytes / sizeof(int64_t); ++i) {
      out->sum += v[i];
      ++out->values;
    }
  }
}

int64_t Value(int rank, int iteration, int index) {
  return int64_t{rank} * 1000003 + int64_t{iteration} * 7919 + index;
}

int64_t ExpectedSum(int size, int iteration) {
  int64_t sum = 0;
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i <= r; ++i) sum += Value(r, iteration, i);
  }
  return sum;
}

// The context of an exchange whose values a fill function writes: SumAll
// reads `out`, the first member; FillValues the rest.
struct FillContext {
  SumResult* out;
  int rank;
  int iteration;
};
void FillValues(void* slot, size_t bytes, const void* context) {
  const FillContext& c = *static_cast<const FillContext*>(context);
  int64_t* values = static_cast<int64_t*>(slot);
  for (size_t i = 0; i < bytes / sizeof(int64_t); ++i) {
    values[i] = Value(c.rank, c.iteration, static_cast<int>(i));
  }
}

// Starts this rank's part of sum `iteration`: its values copied from
// `mine`, or (`by_fill`) written into the slot by FillValues from a
// context that is gone once Start returns.
absl::StatusOr<Request> StartSum(SlotExchange& ex, uint64_t tag, int iteration,
                                 std::vector<int64_t>& mine, SumResult* out,
                                 bool by_fill = false) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  const size_t bytes = (static_cast<size_t>(ex.rank()) + 1) * sizeof(int64_t);
  if (by_fill) {
    const FillContext context{out, ex.rank(), iteration};
    return ex.Start({.tag = tag,
                     .input = {nullptr, bytes, &FillValues},
                     .finish = &SumAll,
                     .context = &context,
                     .context_bytes = sizeof(context),
                     .deadline = deadline});
  }
  mine.resize(static_cast<size_t>(ex.rank()) + 1);
  for (int i = 0; i <= ex.rank(); ++i) mine[i] = Value(ex.rank(), iteration, i);
  return ex.Start({.tag = tag,
                   .input = {mine.data(), bytes},
                   .finish = &SumAll,
                   .context = &out,
                   .context_bytes = sizeof(out),
                   .deadline = deadline});
}

// Runs `iterations` sums on `size` threads over slot exchanges `exchanges`,
// each rank keeping `depth` exchanges in flight; checks every result.
void RunSums(std::vector<std::unique_ptr<SlotExchange>>& exchanges,
             int iterations, int depth, bool by_fill = false) {
  const int size = static_cast<int>(exchanges.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      SlotExchange& ex = *exchanges[static_cast<size_t>(r)];
      std::vector<std::vector<int64_t>> inputs(static_cast<size_t>(depth));
      std::vector<SumResult> results(static_cast<size_t>(depth));
      std::vector<Request> requests(static_cast<size_t>(depth));
      for (int it = 0; it < iterations; it += depth) {
        const int batch = std::min(depth, iterations - it);
        for (int b = 0; b < batch; ++b) {
          absl::StatusOr<Request> req =
              StartSum(ex, static_cast<uint64_t>(it + b), it + b,
                       inputs[static_cast<size_t>(b)],
                       &results[static_cast<size_t>(b)], by_fill);
          ASSERT_TRUE(req.ok()) << req.status();
          requests[static_cast<size_t>(b)] = *std::move(req);
        }
        for (int b = 0; b < batch; ++b) {
          ASSERT_TRUE(requests[static_cast<size_t>(b)].Wait().ok());
          const SumResult& got = results[static_cast<size_t>(b)];
          ASSERT_EQ(got.ranks, size);
          ASSERT_EQ(got.values, int64_t{size} * (size + 1) / 2);
          ASSERT_EQ(got.sum, ExpectedSum(size, it + b))
              << "rank " << r << " iteration " << it + b;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

std::vector<std::unique_ptr<SlotExchange>> ExchangesOver(Region& region,
                                                         int size,
                                                         size_t slot_bytes) {
  std::vector<std::unique_ptr<SlotExchange>> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_unique<SlotExchange>(region.data, r, size,
                                                 slot_bytes, kSpin));
  }
  return out;
}

TEST(SlotExchangeTest, EveryRankSeesEveryContributionOfEachExchange) {
  for (int size : {1, 2, 3, 5}) {
    SCOPED_TRACE(absl::StrCat(size, " ranks"));
    Region region(size, 64);
    auto exchanges = ExchangesOver(region, size, 64);
    RunSums(exchanges, 2000, /*depth=*/1);
  }
}

TEST(SlotExchangeTest, AFillFunctionWritesTheContributionFromItsContext) {
  // Queued four deep, most fills run after Start returned, from the
  // exchange's copy of the context.
  for (int size : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(size, " ranks"));
    Region region(size, 64);
    auto exchanges = ExchangesOver(region, size, 64);
    RunSums(exchanges, 500, /*depth=*/4, /*by_fill=*/true);
  }
}

TEST(SlotExchangeTest, SeveralExchangesInFlightFinishInOrder) {
  // Ranks queue up to 4 exchanges before waiting, so the double buffer is
  // reused while peers lag: a slot overwritten too early shows as a wrong
  // sum.
  Region region(3, 64);
  auto exchanges = ExchangesOver(region, 3, 64);
  RunSums(exchanges, 1000, /*depth=*/4);
}

TEST(SlotExchangeTest, OneRankAheadWaitsForTheOthers) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  std::vector<int64_t> in0, in1;
  SumResult out0, out1;
  absl::StatusOr<Request> r0 = StartSum(*ex[0], 9, 0, in0, &out0);
  ASSERT_TRUE(r0.ok());
  EXPECT_FALSE(r0->Test());  // Rank 1 has not started.
  absl::Status waited = r0->Wait(absl::Milliseconds(20));
  EXPECT_TRUE(absl::IsDeadlineExceeded(waited)) << waited;
  absl::StatusOr<Request> r1 = StartSum(*ex[1], 9, 0, in1, &out1);
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE(r1->Wait().ok());
  ASSERT_TRUE(r0->Wait().ok());
  EXPECT_EQ(out0.sum, ExpectedSum(2, 0));
  EXPECT_EQ(out1.sum, ExpectedSum(2, 0));
}

TEST(SlotExchangeTest, RanksOutOfStepFailWithInternal) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  std::vector<int64_t> in0, in1;
  SumResult out0, out1;
  absl::StatusOr<Request> r0 = StartSum(*ex[0], 1, 0, in0, &out0);
  absl::StatusOr<Request> r1 = StartSum(*ex[1], 2, 0, in1, &out1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  absl::Status s0 = r0->Wait(), s1 = r1->Wait();
  EXPECT_TRUE(absl::IsInternal(s0)) << s0;
  EXPECT_TRUE(absl::IsInternal(s1)) << s1;
  EXPECT_TRUE(absl::StrContains(s0.message(), "rank 1")) << s0;
  // And every later exchange fails the same way.
  absl::StatusOr<Request> again = StartSum(*ex[0], 3, 1, in0, &out0);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(absl::IsInternal(again->Wait()));
}

TEST(SlotExchangeTest, AbortFailsOwnExchangesAndTellsPeers) {
  Region region(3, 64);
  auto ex = ExchangesOver(region, 3, 64);
  std::vector<int64_t> in0, in2;
  SumResult out0, out2;
  absl::StatusOr<Request> r0 = StartSum(*ex[0], 5, 0, in0, &out0);
  absl::StatusOr<Request> r2 = StartSum(*ex[2], 5, 0, in2, &out2);
  ASSERT_TRUE(r0.ok() && r2.ok());
  // Rank 1 gives up before it contributes: ranks 0 and 2 learn it at once.
  ex[1]->Abort(absl::CancelledError("rank 1 aborted by its user"));
  for (Request* r : {&*r0, &*r2}) {
    absl::Status s = r->Wait(absl::Seconds(5));
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "rank 1")) << s;
  }
  std::vector<int64_t> in1;
  SumResult out1;
  absl::StatusOr<Request> later = StartSum(*ex[1], 6, 1, in1, &out1);
  ASSERT_TRUE(later.ok());
  EXPECT_TRUE(absl::IsCancelled(later->Wait()));
}

// A rank that wrote its slot and then left before the exchange finished
// (its request cancelled) fails the peers' exchange with Unavailable naming
// it, as any abort does: its contribution is there, but one rank's request
// failing while the others' succeed is what Abort promises not to do.
// (A rank that finished and then left is not missing: the test below.)
TEST(SlotExchangeTest, ARankThatLeavesBeforeFinishingFailsPeers) {
  Region region(3, 64);
  auto ex = ExchangesOver(region, 3, 64);
  std::vector<int64_t> in0, in1, in2;
  SumResult out0, out1, out2;
  absl::StatusOr<Request> r1 = StartSum(*ex[1], 5, 0, in1, &out1);
  absl::StatusOr<Request> r2 = StartSum(*ex[2], 5, 0, in2, &out2);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_FALSE(r2->Test());  // Rank 0 is missing.
  ex[2].reset();             // Rank 2 leaves; its request is cancelled.
  EXPECT_TRUE(absl::IsCancelled(r2->Wait(absl::Seconds(5))));
  // Its slot is written, but it did not finish the exchange: the peers
  // must not complete one that a member of the group gave up on.
  absl::StatusOr<Request> r0 = StartSum(*ex[0], 5, 0, in0, &out0);
  ASSERT_TRUE(r0.ok());
  const absl::Status s0 = r0->Wait(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(s0)) << s0;
  EXPECT_TRUE(absl::StrContains(s0.message(), "rank 2")) << s0;
  // Rank 1 may learn it from rank 2 or from rank 0, which failed first.
  const absl::Status s1 = r1->Wait(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(s1)) << s1;
}

// The same, racing: rank 1 contributes, finishes and leaves while rank 0
// polls. Rank 0 looks at rank 1's stamp and then at its aborted flag; a
// rank 1 that wrote its slot, finished and left between the two looks is
// not missing. (Before the second look at the stamp, this failed under
// --config=tsan in 1 of 4 runs, at round 1584, with "rank 1 aborted", as
// the loopback conformance suite once did in CI; with it, 8 runs of 8
// passed. Without tsan's slowdown the window is too narrow to hit.)
TEST(SlotExchangeTest, ARankLeavingWhileAPeerPollsDoesNotFailIt) {
  for (int round = 0; round < 2000; ++round) {
    Region region(2, 64);
    auto ex = ExchangesOver(region, 2, 64);
    std::vector<int64_t> in0, in1;
    SumResult out0, out1;
    absl::StatusOr<Request> r0 = StartSum(*ex[0], 7, 0, in0, &out0);
    ASSERT_TRUE(r0.ok());
    std::thread leaver([&] {
      absl::StatusOr<Request> r1 = StartSum(*ex[1], 7, 0, in1, &out1);
      ASSERT_TRUE(r1.ok());
      ASSERT_TRUE(r1->Wait(absl::Seconds(5)).ok());
      ex[1].reset();  // Leaves: aborts, as a destroyed communicator does.
    });
    const absl::Status status = r0->Wait(absl::Seconds(5));
    leaver.join();
    ASSERT_TRUE(status.ok()) << "round " << round << ": " << status;
    ASSERT_EQ(out0.sum, ExpectedSum(2, 0));
  }
}

// Ops come from a per-thread list of recycled blocks. Here each rank's
// thread fills its list (sums it waits for and drops), then starts more
// sums, hands their requests to the main thread and ends (its list is
// freed); the main thread waits for those and drops them, so their blocks
// are freed by a thread that did not take them. Every sum must still be
// right, and ASan sees any block used after it was freed.
TEST(SlotExchangeTest, RequestsOutliveTheThreadsThatStartedThem) {
  constexpr int kSize = 2, kRecycled = 40, kHandedOver = 6;
  Region region(kSize, 64);
  auto ex = ExchangesOver(region, kSize, 64);
  std::vector<std::vector<std::vector<int64_t>>> inputs(kSize);
  std::vector<std::vector<SumResult>> results(kSize);
  std::vector<std::vector<Request>> handed(kSize);
  std::vector<std::thread> threads;
  for (int r = 0; r < kSize; ++r) {
    inputs[r].resize(kRecycled + kHandedOver);
    results[r].resize(kRecycled + kHandedOver);
    threads.emplace_back([&, r] {
      for (int it = 0; it < kRecycled + kHandedOver; ++it) {
        absl::StatusOr<Request> req =
            StartSum(*ex[r], static_cast<uint64_t>(it), it, inputs[r][it],
                     &results[r][it]);
        ASSERT_TRUE(req.ok()) << req.status();
        if (it < kRecycled) {
          ASSERT_TRUE(req->Wait().ok());
        } else {
          handed[r].push_back(*std::move(req));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // A wait drives only its own rank's exchange, so the ranks take turns.
  for (int i = 0; i < kHandedOver; ++i) {
    for (int r = 0; r < kSize; ++r) ASSERT_TRUE(handed[r][i].Wait().ok());
  }
  for (int r = 0; r < kSize; ++r) {
    handed[r].clear();  // The last references: freed on this thread.
    for (int it = 0; it < kRecycled + kHandedOver; ++it) {
      EXPECT_EQ(results[r][it].sum, ExpectedSum(kSize, it))
          << "rank " << r << " sum " << it;
    }
  }
}

TEST(SlotExchangeTest, DestroyingCancelsWhatIsQueued) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  std::vector<int64_t> in0;
  SumResult out0;
  absl::StatusOr<Request> r0 = StartSum(*ex[0], 1, 0, in0, &out0);
  ASSERT_TRUE(r0.ok());
  ex[0].reset();
  EXPECT_TRUE(absl::IsCancelled(r0->Wait()));
}

// Calls that Start and Run must refuse: a good one (summing into `*out`)
// with one thing wrong each. `big` holds more than a 64-byte slot, and more
// than the largest context.
std::vector<ExchangeCall> BadCalls(const char* big, SumResult* const* out) {
  static_assert(SlotExchange::kMaxContextBytes < 256);
  const ExchangeCall good{.tag = 1,
                          .input = {big, 8},
                          .finish = &SumAll,
                          .context = out,
                          .context_bytes = sizeof(*out),
                          .deadline = absl::Now() + absl::Seconds(1)};
  std::vector<ExchangeCall> bad(6, good);
  bad[0].input = {big, 65};              // More than a slot holds.
  bad[1].input = {nullptr, 8};           // Bytes from nowhere.
  bad[2].input = {big, 8, &FillValues};  // Data and a fill function.
  bad[3].finish = nullptr;               // No finish.
  bad[4].context = big;                  // A context too large.
  bad[4].context_bytes = SlotExchange::kMaxContextBytes + 1;
  bad[5].context = nullptr;  // Context bytes from nowhere.
  return bad;
}

TEST(SlotExchangeTest, RejectsBadInputBeforeWritingAnything) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  char big[256] = {};
  SumResult* out = nullptr;
  for (const ExchangeCall& bad : BadCalls(big, &out)) {
    EXPECT_TRUE(absl::IsInvalidArgument(ex[0]->Start(bad).status()));
  }
  // Nothing was queued: the exchanges are still in step.
  RunSums(ex, 10, 1);
}

// Run: the blocking form. This rank's part of sum `iteration`, as StartSum
// but waited for in the call.
absl::Status RunSum(SlotExchange& ex, uint64_t tag, int iteration,
                    SumResult* out,
                    absl::Duration timeout = absl::Seconds(30)) {
  std::vector<int64_t> mine(static_cast<size_t>(ex.rank()) + 1);
  for (int i = 0; i <= ex.rank(); ++i) mine[i] = Value(ex.rank(), iteration, i);
  return ex.Run({.tag = tag,
                 .input = {mine.data(), mine.size() * sizeof(int64_t)},
                 .finish = &SumAll,
                 .context = &out,
                 .context_bytes = sizeof(out),
                 .deadline = absl::Now() + timeout});
}

// Where a finish finds each contribution: the peers' in the region (their
// slots), its own where its input's data is (ExchangeFinishFn), or in its
// slot for an input a fill function wrote.
struct Seen {
  int rank = 0;
  const void* own = nullptr;
  const void* peer = nullptr;
  int64_t peer_value = 0;
};
void RecordWhere(absl::Span<const Contribution> all, const void* context) {
  Seen* seen = *static_cast<Seen* const*>(context);
  const size_t mine = static_cast<size_t>(seen->rank);
  seen->own = all[mine].data;
  seen->peer = all[1 - mine].data;
  std::memcpy(&seen->peer_value, all[1 - mine].data, sizeof(int64_t));
}
void FillRank(void* slot, size_t bytes, const void* context) {
  const Seen* seen = *static_cast<Seen* const*>(context);
  const int64_t value = 100 + seen->rank;
  std::memcpy(slot, &value, std::min(bytes, sizeof(value)));
}

TEST(SlotExchangeTest, OwnContributionComesFromTheInputElseTheSlot) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  const auto in_region = [&](const void* p) {
    return p >= region.data && p < region.data + region.bytes;
  };
  for (bool by_fill : {false, true}) {
    SCOPED_TRACE(by_fill ? "fill" : "data");
    Seen seen[2];
    int64_t values[2] = {100, 101};
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        seen[r].rank = r;
        Seen* context = &seen[r];
        ExchangeCall call{.tag = 7,
                          .input = {&values[r], sizeof(int64_t)},
                          .finish = &RecordWhere,
                          .context = &context,
                          .context_bytes = sizeof(context),
                          .deadline = absl::Now() + absl::Seconds(30)};
        if (by_fill) call.input = {nullptr, sizeof(int64_t), &FillRank};
        // Rank 0 blocks, rank 1 starts and waits: both paths finish.
        if (r == 0) {
          EXPECT_TRUE(ex[0]->Run(call).ok());
        } else {
          absl::StatusOr<Request> started = ex[1]->Start(call);
          ASSERT_TRUE(started.ok());
          EXPECT_TRUE(started->Wait().ok());
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE(r);
      if (by_fill) {
        EXPECT_TRUE(in_region(seen[r].own));
      } else {
        EXPECT_EQ(seen[r].own, &values[r]);
      }
      EXPECT_TRUE(in_region(seen[r].peer));
      EXPECT_EQ(seen[r].peer_value, 100 + (1 - r));
    }
  }
}

TEST(SlotExchangeRunTest, EveryRankSeesEveryContributionOfEachExchange) {
  for (int size : {1, 2, 3, 5}) {
    SCOPED_TRACE(absl::StrCat(size, " ranks"));
    Region region(size, 64);
    auto ex = ExchangesOver(region, size, 64);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        for (int it = 0; it < 2000; ++it) {
          SumResult out;
          ASSERT_TRUE(RunSum(*ex[static_cast<size_t>(r)], it, it, &out).ok());
          ASSERT_EQ(out.ranks, size);
          ASSERT_EQ(out.sum, ExpectedSum(size, it))
              << "rank " << r << " iteration " << it;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
}

TEST(SlotExchangeRunTest, MixesWithStartedExchangesInOrder) {
  // Each rank alternates: two exchanges started and left pending, then a
  // Run, which must queue behind them (and they finish first); rank 1
  // also runs on a second thread a Start made while its Run still waits,
  // which must queue behind the Run.
  Region region(3, 64);
  auto ex = ExchangesOver(region, 3, 64);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      SlotExchange& mine = *ex[static_cast<size_t>(r)];
      for (int it = 0; it < 300; it += 4) {
        std::vector<int64_t> in0, in1, in3;
        SumResult out0, out1, out2, out3;
        absl::StatusOr<Request> a = StartSum(mine, it, it, in0, &out0);
        absl::StatusOr<Request> b = StartSum(mine, it + 1, it + 1, in1, &out1);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_TRUE(RunSum(mine, it + 2, it + 2, &out2).ok());
        // Queued ahead of the Run: done by the time it returns.
        EXPECT_TRUE(a->Test());
        EXPECT_TRUE(b->Test());
        absl::StatusOr<Request> d = StartSum(mine, it + 3, it + 3, in3, &out3);
        ASSERT_TRUE(d.ok());
        ASSERT_TRUE(d->Wait().ok());
        EXPECT_EQ(out0.sum, ExpectedSum(3, it));
        EXPECT_EQ(out1.sum, ExpectedSum(3, it + 1));
        EXPECT_EQ(out2.sum, ExpectedSum(3, it + 2));
        EXPECT_EQ(out3.sum, ExpectedSum(3, it + 3));
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// The stamp of `rank`'s slot for `exchange`, read from the region the way
// slot_exchange.cc lays it out (the wake-up line, a line of flags per rank,
// then each rank's two slots of 24 header bytes and the contribution,
// rounded up to lines): for a test of when a slot is written, which no
// outcome shows.
uint64_t StampOf(const Region& region, int size, size_t slot_bytes, int rank,
                 uint64_t exchange) {
  const size_t stride = (24 + slot_bytes + 63) / 64 * 64;
  const char* slot = region.data + 64 + static_cast<size_t>(size) * 64 +
                     (static_cast<size_t>(rank) * 2 + exchange % 2) * stride;
  return reinterpret_cast<const std::atomic<uint64_t>*>(slot)->load();
}

TEST(SlotExchangeRunTest, AStartDuringARunQueuesBehindIt) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  SumResult run_out;
  absl::Status run_status;
  // Rank 0 runs exchange 0 and waits: rank 1 has not come.
  std::thread runner([&] { run_status = RunSum(*ex[0], 10, 0, &run_out); });
  absl::SleepFor(absl::Milliseconds(20));
  // Meanwhile another thread of rank 0 starts exchange 1. It may not write
  // its slot while exchange 0 is unfinished: that slot held exchange -1's
  // contribution, and a rank publishes k + 1 only once every peer has
  // passed k (the protocol's guarantee that no slot is overwritten while
  // a peer still reads it). The results alone would not show the early
  // write here, so the slot's stamp is read directly.
  ASSERT_EQ(StampOf(region, 2, 64, 0, 0), 1u);  // Run's exchange 0.
  std::vector<int64_t> in0b, in1a, in1b;
  SumResult out0b, out1a, out1b;
  absl::StatusOr<Request> next = StartSum(*ex[0], 11, 1, in0b, &out0b);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->Test());
  EXPECT_EQ(StampOf(region, 2, 64, 0, 1), 0u) << "exchange 1 published early";
  // Rank 1 takes part in both, in order.
  absl::StatusOr<Request> r1a = StartSum(*ex[1], 10, 0, in1a, &out1a);
  absl::StatusOr<Request> r1b = StartSum(*ex[1], 11, 1, in1b, &out1b);
  ASSERT_TRUE(r1a.ok() && r1b.ok());
  ASSERT_TRUE(r1a->Wait().ok());
  ASSERT_TRUE(r1b->Wait().ok());
  runner.join();
  ASSERT_TRUE(run_status.ok()) << run_status;
  ASSERT_TRUE(next->Wait().ok());
  EXPECT_EQ(StampOf(region, 2, 64, 0, 1), 2u);
  EXPECT_EQ(run_out.sum, ExpectedSum(2, 0));
  EXPECT_EQ(out1a.sum, ExpectedSum(2, 0));
  EXPECT_EQ(out0b.sum, ExpectedSum(2, 1));
  EXPECT_EQ(out1b.sum, ExpectedSum(2, 1));
}

TEST(SlotExchangeRunTest, APeerThatNeverComesGivesDeadlineExceededAndAborts) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  SumResult out;
  const absl::Time before = absl::Now();
  absl::Status s = RunSum(*ex[0], 1, 0, &out, absl::Milliseconds(150));
  const absl::Duration took = absl::Now() - before;
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_GE(took, absl::Milliseconds(150));
  EXPECT_LT(took, absl::Milliseconds(250));
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1")) << s;
  // Its slot stays published with nobody to finish it: the exchange is
  // aborted, and the peer learns it instead of reading a stale exchange.
  SumResult later;
  EXPECT_TRUE(absl::IsDeadlineExceeded(RunSum(*ex[0], 2, 1, &later)));
  absl::Status peer = RunSum(*ex[1], 1, 0, &later, absl::Seconds(5));
  // Rank 0's contribution to exchange 0 is there, but rank 0 gave up on
  // the exchange: rank 1 must not complete it.
  EXPECT_TRUE(absl::IsUnavailable(peer)) << peer;
  absl::Status next = RunSum(*ex[1], 2, 1, &later, absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(next)) << next;
  EXPECT_TRUE(absl::StrContains(next.message(), "rank 0")) << next;
}

TEST(SlotExchangeRunTest, AbortWhileWaitingReturnsItsReasonPromptly) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  SumResult out;
  absl::Status s;
  absl::Time returned;
  std::thread runner([&] {
    s = RunSum(*ex[0], 1, 0, &out);  // 30 s deadline.
    returned = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(50));  // Past the spin: asleep.
  const absl::Time aborted = absl::Now();
  ex[0]->Abort(absl::CancelledError("stop"));
  runner.join();
  EXPECT_TRUE(absl::IsCancelled(s)) << s;
  EXPECT_LT(returned - aborted, absl::Milliseconds(100));
}

TEST(SlotExchangeRunTest, APeerAbortingFailsTheRunWithUnavailable) {
  Region region(3, 64);
  auto ex = ExchangesOver(region, 3, 64);
  SumResult out;
  absl::Status s;
  std::thread runner([&] { s = RunSum(*ex[0], 1, 0, &out); });
  absl::SleepFor(absl::Milliseconds(20));
  // Rank 1, the first one rank 0 waits for (rank 2 is not there either).
  ex[1]->Abort(absl::CancelledError("rank 1 gives up"));
  runner.join();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1")) << s;
}

TEST(SlotExchangeRunTest, RanksOutOfStepFailWithInternal) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  SumResult out0, out1;
  absl::Status s0, s1;
  std::thread t0([&] { s0 = RunSum(*ex[0], 1, 0, &out0); });
  std::thread t1([&] { s1 = RunSum(*ex[1], 2, 0, &out1); });
  t0.join();
  t1.join();
  EXPECT_TRUE(absl::IsInternal(s0)) << s0;
  EXPECT_TRUE(absl::IsInternal(s1)) << s1;
}

TEST(SlotExchangeRunTest, RejectsBadInputBeforeWritingAnything) {
  Region region(2, 64);
  auto ex = ExchangesOver(region, 2, 64);
  char big[256] = {};
  SumResult* out = nullptr;
  for (const ExchangeCall& bad : BadCalls(big, &out)) {
    EXPECT_TRUE(absl::IsInvalidArgument(ex[0]->Run(bad)));
  }
  RunSums(ex, 10, 1);  // Still in step.
}

// How many POSIX shared-memory objects this process left behind.
int LeftoverObjects() {
  const std::string prefix = absl::StrCat("relay-", getpid(), "-");
  int n = 0;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* e = readdir(dir)) {
      if (absl::StartsWith(e->d_name, prefix)) ++n;
    }
    closedir(dir);
  }
  return n;
}

// Every rank of a group calls SharedSegment::Create on its own thread, rank
// r asking for bytes[r] bytes; their results in rank order.
std::vector<absl::StatusOr<std::unique_ptr<SharedSegment>>> CreateOnThreads(
    const std::vector<size_t>& bytes) {
  InMemoryStore store;
  const int size = static_cast<int>(bytes.size());
  std::vector<absl::StatusOr<std::unique_ptr<SharedSegment>>> out;
  for (size_t r = 0; r < bytes.size(); ++r) {
    out.emplace_back(absl::UnknownError("not run"));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      out[static_cast<size_t>(r)] = SharedSegment::Create(
          store, "seg", r, size, bytes[static_cast<size_t>(r)],
          absl::Seconds(10));
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(SharedSegmentTest, RanksMapOneObjectAndNothingIsLeftBehind) {
  constexpr int kSize = 3;
  constexpr size_t kSlot = 256;
  const size_t bytes = SlotExchange::RegionBytes(kSize, kSlot);
  auto created = CreateOnThreads(std::vector<size_t>(kSize, bytes));
  std::vector<std::unique_ptr<SharedSegment>> segments;
  for (auto& s : created) {
    ASSERT_TRUE(s.ok()) << s.status();
    segments.push_back(*std::move(s));
  }
  EXPECT_EQ(LeftoverObjects(), 0);
  // Three mappings of one object at three addresses: what one rank writes
  // the others read, so a slot exchange runs over them.
  EXPECT_NE(segments[0]->data(), segments[1]->data());
  std::vector<std::unique_ptr<SlotExchange>> exchanges;
  for (int r = 0; r < kSize; ++r) {
    EXPECT_EQ(segments[static_cast<size_t>(r)]->bytes(), bytes);
    exchanges.push_back(std::make_unique<SlotExchange>(
        segments[static_cast<size_t>(r)]->data(), r, kSize, kSlot, kSpin));
  }
  RunSums(exchanges, 500, 2);
}

// Run by shared_segment_full_test.sh in a mount namespace whose /dev/shm
// is a tmpfs of RELAY_TEST_SHM_LIMIT bytes: a segment four times larger
// fails on every rank with FailedPrecondition (rank 0 naming
// posix_fallocate) and leaves nothing behind, instead of a rank dying of
// SIGBUS when it first touches a page the tmpfs cannot back.
TEST(SharedSegmentTest, FullDevShmFailsCleanly) {
  const char* limit = std::getenv("RELAY_TEST_SHM_LIMIT");
  if (limit == nullptr) {
    GTEST_SKIP() << "run by runtime/shared_segment_full_test.sh, in a "
                    "namespace with a small /dev/shm";
  }
  const size_t bytes = 4 * static_cast<size_t>(std::atoll(limit));
  auto created = CreateOnThreads({bytes, bytes});
  const absl::Status s0 = created[0].status(), s1 = created[1].status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s0)) << s0;
  EXPECT_TRUE(absl::IsFailedPrecondition(s1)) << s1;
  EXPECT_TRUE(absl::StrContains(s0.message(), "posix_fallocate")) << s0;
  EXPECT_TRUE(absl::StrContains(s1.message(), "rank 0")) << s1;
  EXPECT_EQ(LeftoverObjects(), 0);
}

TEST(SharedSegmentTest, RejectsBadArguments) {
  InMemoryStore store;
  EXPECT_TRUE(absl::IsInvalidArgument(
      SharedSegment::Create(store, "k", 2, 2, 64, absl::Seconds(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      SharedSegment::Create(store, "k", 0, 1, 0, absl::Seconds(1)).status()));
}

TEST(SharedSegmentTest, EveryRankLearnsThatAPeerCouldNotMapIt) {
  // Rank 1 asks for another size than rank 0 created: its mapping fails,
  // and rank 0, which mapped it, must not use it either.
  auto created = CreateOnThreads({4096, 8192});
  const absl::Status s0 = created[0].status(), s1 = created[1].status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s0)) << s0;
  EXPECT_TRUE(absl::IsFailedPrecondition(s1)) << s1;
  EXPECT_TRUE(absl::StrContains(s0.message(), "rank 1")) << s0;
  EXPECT_EQ(LeftoverObjects(), 0);
}

}  // namespace
}  // namespace relay
