// RunRanks over UCX, run two ways: as a test, ranks as threads; under a
// launcher (rank_harness_processes_test.sh: tools/relayrun -n 2), each
// process one rank over the job's store. Each prints how its ranks ran
// ("ranks as processes" where their pids differ), which the shell test
// checks.
#include "testing/rank_harness.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

TransportFactory* Ucx() {
  absl::StatusOr<TransportFactory*> f = Transports().Get("ucx");
  return f.ok() && (*f)->IsViable() ? *f : nullptr;
}

// An all_reduce of distinct values per rank and element, every element
// checked; then the ranks' pids, gathered.
absl::Status SumAndPids(Communicator& comm, std::vector<int64_t>* pids) {
  const int n = comm.size();
  std::vector<float> in(1000), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 13 + 100 * comm.rank());
  RELAY_ASSIGN_OR_RETURN(Request r, comm.AllReduce(ConstBuffer::Of(in), Buffer::Of(out),
                                                   ReduceOp::kSum));
  RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(30)));
  for (size_t i = 0; i < out.size(); ++i) {
    const float want = static_cast<float>(n * (i % 13) + 100 * n * (n - 1) / 2);
    if (out[i] != want) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", out[i], ", want ", want));
    }
  }
  const int64_t mine = getpid();
  pids->assign(n, 0);
  RELAY_ASSIGN_OR_RETURN(Request g, comm.AllGather(ConstBuffer::Of(&mine, 1),
                                                   Buffer::Of(pids->data(), n)));
  return g.Wait(absl::Seconds(30));
}

TEST(RankHarnessTest, RanksMeetAndSayHowTheyRan) {
  TransportFactory* ucx = Ucx();
  if (ucx == nullptr) GTEST_SKIP() << "no UCX in this build";
  std::vector<int64_t> pids;
  // Twice: the second call's ranks must not meet the first's store keys.
  for (int call = 0; call < 2; ++call) {
    const absl::Status s = RunRanks(2, *ucx, DefaultEngine(), [&](Communicator& comm) {
      std::vector<int64_t> mine;
      RELAY_RETURN_IF_ERROR(SumAndPids(comm, &mine));
      if (comm.rank() == 0) pids = mine;
      return absl::OkStatus();
    });
    ASSERT_TRUE(s.ok()) << s;
  }
  if (pids.empty()) return;  // Rank 1's process under a launcher.
  std::printf("%s\n", pids[0] != pids[1] ? "ranks as processes" : "ranks as threads");
}

// The store a body gets is the group's: every rank counts itself in, and
// then each sees the whole group's count, and what rank 0 sets. Twice: the
// second call starts from a fresh count.
TEST(RankHarnessTest, BodiesShareTheGroupsStore) {
  TransportFactory* ucx = Ucx();
  if (ucx == nullptr) GTEST_SKIP() << "no UCX in this build";
  for (int call = 0; call < 2; ++call) {
    const absl::Status s = RunRanksWithStore(
        2, *ucx, DefaultEngine(), [&](Communicator& comm, Store& store) -> absl::Status {
          if (comm.rank() == 0) RELAY_RETURN_IF_ERROR(store.Set("from0", "hello"));
          RELAY_RETURN_IF_ERROR(store.Add("in", 1).status());
          RELAY_ASSIGN_OR_RETURN(std::string got, store.Get("from0", absl::Seconds(30)));
          RELAY_ASSIGN_OR_RETURN(Request b, comm.Barrier());
          RELAY_RETURN_IF_ERROR(b.Wait(absl::Seconds(30)));
          RELAY_ASSIGN_OR_RETURN(int64_t in, store.Add("in", 0));
          if (in != 2 || got != "hello") {
            return absl::InternalError(
                absl::StrCat("call ", call, ": ", in, " ranks counted in, rank 0 set '", got,
                             "'; want 2 and 'hello'"));
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace relay
