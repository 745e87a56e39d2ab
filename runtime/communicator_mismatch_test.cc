// Mismatch detection (CheckLevel::kFingerprint, runtime/fingerprint.h) end
// to end over loopback: one rank of four calls something different, and
// every rank's call fails naming it, before any data moves.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/rank_harness.h"
#include "relay.h"

namespace relay {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 256;

struct Call {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t count = kCount;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

// Every rank runs `normal` except rank 2, which runs `odd`; returns each
// rank's status.
std::vector<absl::Status> RunWithOddRank(
    const Call& normal, const Call& odd,
    CheckLevel check_level = CheckLevel::kFingerprint,
    Algorithm algorithm = Algorithm::kAuto) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  std::vector<absl::Status> out(kRanks);
  CommunicatorOptions options;
  options.check_level = check_level;
  options.default_timeout = absl::Seconds(20);
  RunRanks(kRanks, factory, engine, [&](Communicator& comm) -> absl::Status {
    const Call& c = comm.rank() == 2 ? odd : normal;
    // Big enough for any call here, whatever its kind.
    std::vector<double> send(kCount * kRanks * 2), recv(kCount * kRanks * 2);
    size_t send_count = c.count, recv_count = c.count;
    if (c.kind == CollectiveKind::kAllGather) recv_count *= kRanks;
    if (c.kind == CollectiveKind::kReduceScatter) send_count *= kRanks;
    CollectiveOptions call_options;
    call_options.algorithm = algorithm;
    absl::StatusOr<Request> r = comm.Collective(
        c.kind, ConstBuffer{send.data(), send_count, c.dtype, Device::Host()},
        Buffer{recv.data(), recv_count, c.dtype, Device::Host()}, c.op, c.root,
        call_options);
    out[comm.rank()] = r.ok() ? r->Wait() : r.status();
    return absl::OkStatus();
  }, options).IgnoreError();
  return out;
}

// Calls that differ from the default Call in one field each, by name: its
// kind (with_kind), count, dtype, op.
std::vector<std::pair<std::string, Call>> OddCalls(bool with_kind) {
  std::vector<std::pair<std::string, Call>> odd;
  Call c;
  if (with_kind) {
    c.kind = CollectiveKind::kAllGather;
    odd.emplace_back("kind", c);
  }
  c = Call();
  c.count = kCount / 2;
  odd.emplace_back("count", c);
  c = Call();
  c.dtype = DataType::kFloat64;
  odd.emplace_back("dtype", c);
  c = Call();
  c.op = ReduceOp::kMax;
  odd.emplace_back("op", c);
  return odd;
}

TEST(LoopbackMismatchTest, EveryKindOfMismatchFailsEveryRankNamingIt) {
  const Call normal;
  for (const auto& [what, call] : OddCalls(/*with_kind=*/true)) {
    const std::vector<absl::Status> got = RunWithOddRank(normal, call);
    std::printf("%s mismatch, rank 0 sees: %s\n", what.c_str(), got[0].ToString().c_str());
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(got[r].code(), absl::StatusCode::kInvalidArgument)
          << what << ", rank " << r << ": " << got[r];
      EXPECT_NE(got[r].message().find("rank 2 called"), absl::string_view::npos)
          << what << ", rank " << r << ": " << got[r];
    }
  }
}

TEST(LoopbackMismatchTest, RootMismatchIsNamed) {
  Call normal;
  normal.kind = CollectiveKind::kBroadcast;
  Call odd = normal;
  odd.root = 1;
  for (const absl::Status& s : RunWithOddRank(normal, odd)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("root 1"), absl::string_view::npos) << s;
  }
}

TEST(LoopbackMismatchTest, MatchingCallsRunAndAreRight) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  CommunicatorOptions options;
  options.check_level = CheckLevel::kFingerprint;
  absl::Status s = RunRanks(kRanks, factory, engine, [](Communicator& comm) -> absl::Status {
    for (int i = 0; i < 5; ++i) {
      std::vector<int32_t> v(100, comm.rank() + i);
      absl::StatusOr<Request> r =
          comm.AllReduce(ConstBuffer::Of(v), Buffer::Of(v), ReduceOp::kSum);
      if (!r.ok()) return r.status();
      if (absl::Status w = r->Wait(absl::Seconds(20)); !w.ok()) return w;
      if (v[99] != 6 + 4 * i) return absl::InternalError(absl::StrCat("got ", v[99]));
    }
    return absl::OkStatus();
  }, options);
  EXPECT_TRUE(s.ok()) << s;
}

// Rank 3 never calls the collective: the others fail with DeadlineExceeded
// naming rank 3 once their timeout passes, not later.
TEST(LoopbackMismatchTest, RankThatCallsNothingIsNamed) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  CommunicatorOptions options;
  options.check_level = CheckLevel::kFingerprint;
  std::vector<absl::Status> got(kRanks);
  std::vector<absl::Duration> took(kRanks);
  RunRanks(kRanks, factory, engine, [&](Communicator& comm) -> absl::Status {
    if (comm.rank() == 3) return absl::OkStatus();
    std::vector<float> v(64, 1.0f);
    CollectiveOptions opts;
    opts.timeout = absl::Milliseconds(300);
    const absl::Time start = absl::Now();
    absl::StatusOr<Request> r =
        comm.AllReduce(ConstBuffer::Of(v), Buffer::Of(v), ReduceOp::kSum, opts);
    got[comm.rank()] = r.ok() ? r->Wait() : r.status();
    took[comm.rank()] = absl::Now() - start;
    return absl::OkStatus();
  }, options).IgnoreError();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kDeadlineExceeded) << got[r];
    EXPECT_NE(got[r].message().find("rank(s) 3 did not call"), absl::string_view::npos)
        << got[r];
    EXPECT_LT(took[r], absl::Milliseconds(1300));
  }
}

// Without the fingerprint check (the default), where the ranks meet anyway
// (the direct algorithm's rendezvous, the shm algorithm's slots) a count,
// dtype or op that differs fails every rank with InvalidArgument naming the
// odd rank's call, instead of returning OK with wrong data.
TEST(LoopbackMismatchTest, DirectAndShmCatchMismatchesWithoutTheCheck) {
  const Call normal;
  for (Algorithm algorithm :
       {Algorithm::kAuto, Algorithm::kDirect, Algorithm::kShm}) {
    for (const auto& [what, call] : OddCalls(/*with_kind=*/false)) {
      const std::vector<absl::Status> got =
          RunWithOddRank(normal, call, CheckLevel::kNone, algorithm);
      for (int r = 0; r < kRanks; ++r) {
        EXPECT_EQ(got[r].code(), absl::StatusCode::kInvalidArgument)
            << AlgorithmName(algorithm) << ", " << what << ", rank " << r
            << ": " << got[r];
        EXPECT_NE(got[r].message().find("rank 2 called"),
                  absl::string_view::npos)
            << AlgorithmName(algorithm) << ", " << what << ", rank " << r
            << ": " << got[r];
      }
    }
  }
}

}  // namespace
}  // namespace relay
