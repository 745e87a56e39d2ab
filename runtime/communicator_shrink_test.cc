// Failure propagation and Shrink on loopback: one of 8 ranks dies in the
// middle of a loop of all_reduces; the 7 survivors learn it (Unavailable
// naming it), shrink to a 7-rank communicator and finish the loop there.
#include <atomic>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/status_macros.h"
#include "testing/rank_harness.h"
#include "relay.h"

namespace relay {
namespace {

constexpr int kRanks = 8;
constexpr int kVictim = 5;
constexpr int kDiesAt = 3;
constexpr int kIterations = 20;
constexpr size_t kCount = 4099;  // Not a multiple of 7 or 8.

// Rank r's input at iteration i (by its rank in the original group, so the
// expected sum is known whichever group it is in).
float Input(int original_rank, int iteration, size_t j) {
  return static_cast<float>((original_rank + 1) * (iteration + 1) +
                            static_cast<int>(j % 7));
}

TEST(LoopbackShrinkTest, SurvivorsShrinkAndFinishTheLoop) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  std::atomic<int> finished{0};
  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(30);
  absl::Status status = RunRanks(
      kRanks, factory, engine,
      [&](Communicator& world) -> absl::Status {
        const int me = world.rank();
        std::unique_ptr<Communicator> shrunk;
        Communicator* comm = &world;
        std::vector<float> in(kCount), out(kCount);
        for (int i = 0; i < kIterations; ++i) {
          if (me == kVictim && i == kDiesAt) {
            // Dies: stops answering, as a crashed process would.
            return world.Abort(absl::InternalError("rank 5 crashed"));
          }
          for (size_t j = 0; j < kCount; ++j) in[j] = Input(me, i, j);
          absl::Status s;
          {
            absl::StatusOr<Request> r = comm->AllReduce(
                ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
            s = r.ok() ? r->Wait() : r.status();
          }
          if (!s.ok()) {
            if (shrunk != nullptr) return s;  // A second failure: not expected.
            if (s.code() != absl::StatusCode::kUnavailable ||
                s.message().find("rank 5") == absl::string_view::npos) {
              return absl::InternalError(absl::StrCat(
                  "rank ", me, ": want Unavailable naming rank 5, got ",
                  s.ToString()));
            }
            const int victim = kVictim;
            RELAY_ASSIGN_OR_RETURN(shrunk, world.Shrink({&victim, 1}));
            comm = shrunk.get();
            if (comm->size() != kRanks - 1 ||
                comm->rank() != (me < kVictim ? me : me - 1)) {
              return absl::InternalError(absl::StrCat(
                  "rank ", me, ": shrunk to rank ", comm->rank(), " of ",
                  comm->size()));
            }
            --i;  // Redo this iteration in the new group.
            continue;
          }
          const bool victim_in = comm == &world;
          for (size_t j = 0; j < kCount; ++j) {
            float want = 0;
            for (int r = 0; r < kRanks; ++r) {
              if (r != kVictim || victim_in) want += Input(r, i, j);
            }
            if (out[j] != want) {
              return absl::InternalError(absl::StrCat(
                  "rank ", me, " iteration ", i, " element ", j, ": ", out[j],
                  ", want ", want));
            }
          }
        }
        if (shrunk == nullptr) {
          return absl::InternalError(absl::StrCat(
              "rank ", me, " never saw rank 5 fail"));
        }
        ++finished;
        return absl::OkStatus();
      },
      options);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(finished.load(), kRanks - 1);
}

TEST(LoopbackShrinkTest, RejectsBadSetsBeforeTouchingTheStore) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  absl::Status status = RunRanks(
      2, factory, engine, [](Communicator& comm) -> absl::Status {
        const int self = comm.rank(), outside = 7;
        absl::StatusOr<std::unique_ptr<Communicator>> c = comm.Shrink({&self, 1});
        if (c.status().code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("self: ", c.status().ToString()));
        }
        c = comm.Shrink({&outside, 1});
        if (c.status().code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("range: ", c.status().ToString()));
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

TEST(LoopbackShrinkTest, SurvivorsThatDisagreeAreToldWhy) {
  TransportFactory& factory = **Transports().Get("loopback");
  const CollectiveEngine& engine = DefaultEngine();
  absl::Status status = RunRanks(
      4, factory, engine, [](Communicator& comm) -> absl::Status {
        if (comm.rank() == 3) return absl::OkStatus();  // "Lost".
        // Rank 0 also thinks rank 2 is lost; ranks 1 and 2 do not.
        std::vector<int> exclude = {3};
        if (comm.rank() == 0) exclude.push_back(2);
        CollectiveOptions o;
        o.timeout = absl::Seconds(2);
        absl::StatusOr<std::unique_ptr<Communicator>> c = comm.Shrink(exclude, o);
        if (c.ok()) return absl::InternalError("a disagreeing Shrink succeeded");
        // Rank 0 waits for {0,1} and sees rank 1's different set; ranks 1
        // and 2 wait for {0,1,2} and see rank 0's.
        if (c.status().code() != absl::StatusCode::kInvalidArgument ||
            c.status().message().find("disagree") == absl::string_view::npos) {
          return absl::InternalError(c.status().ToString());
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace relay
