// bench/fault_sweep: relay's algorithms under many seeded fault plans
// (testing/fault_transport.h) over the loopback transport: every plan
// must end in correct data or a clean error on every rank.
//
//   bazel run -c opt //bench:fault_sweep -- --seeds 1000 --kills 100
//
// Delay runs: for each seed, every case of FaultSweepCases()
// (testing/fault_transport.h: every collective and algorithm but direct, 3
// and 4 ranks) runs under seeded delays and reordering and is checked
// element by element (testing/conformance.h).
// A case that fails is "wrong" if its results differ and "hung" if it hit
// its 60 s timeout.
//
// Kill runs: for each of --kills seeds, 4 to 8 ranks loop over ring
// all_reduces while one seeded rank dies at a seeded operation; every rank
// must fail, and each within 2 s of the death.
//
// Prints a progress line every 100 seeds and a summary; exit status 0 when
// nothing was wrong, hung or late, 1 otherwise, 2 for bad flags.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "relay.h"
#include "testing/conformance.h"
#include "testing/fault_transport.h"
#include "testing/rank_harness.h"

namespace relay {
namespace {

constexpr char kUsage[] = R"(usage: fault_sweep [flags]
  --seeds N          delay/reorder seeds, each running every case (default 100)
  --kills N          kill runs (default 20)
  --max-delay-us US  longest delay of one operation (default 200)
)";

[[noreturn]] void BadFlag(const std::string& why) {
  std::fprintf(stderr, "fault_sweep: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

int Main(int argc, char** argv) {
  int seeds = 100, kills = 20, max_delay_us = 200;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) BadFlag(flag + " wants a value");
    int* target = flag == "--seeds"          ? &seeds
                  : flag == "--kills"        ? &kills
                  : flag == "--max-delay-us" ? &max_delay_us
                                             : nullptr;
    if (target == nullptr) BadFlag("unknown flag " + flag);
    if (!absl::SimpleAtoi(argv[++i], target) || *target < 0) {
      BadFlag(flag + " wants a non-negative integer");
    }
  }
  absl::StatusOr<TransportFactory*> loopback = Transports().Get("loopback");
  if (!loopback.ok()) BadFlag(std::string(loopback.status().message()));
  const std::vector<ConformanceCase> cases = FaultSweepCases();

  int64_t runs = 0, wrong = 0, hung = 0, other = 0, overtaken = 0, released = 0;
  const absl::Time start = absl::Now();
  for (int seed = 1; seed <= seeds; ++seed) {
    FaultPlan plan;
    plan.seed = static_cast<uint64_t>(seed);
    plan.max_delay = absl::Microseconds(max_delay_us);
    FaultInjectingTransportFactory faulty(**loopback, plan);
    for (const ConformanceCase& c : cases) {
      ++runs;
      const absl::Status s = RunConformanceCase(c, faulty, DefaultEngine());
      if (s.ok()) continue;
      if (absl::IsDeadlineExceeded(s)) {
        ++hung;
      } else if (absl::IsInternal(s)) {
        ++wrong;
      } else {
        ++other;
      }
      std::printf("seed %d %s: %s\n", seed, c.Name().c_str(), s.ToString().c_str());
    }
    overtaken += faulty.stats().overtaken.load();
    released += faulty.stats().released.load();
    if (seed % 100 == 0) {
      std::printf("%d/%d seeds, %lld runs, %lld wrong, %lld hung, %lld other\n",
                  seed, seeds, static_cast<long long>(runs),
                  static_cast<long long>(wrong), static_cast<long long>(hung),
                  static_cast<long long>(other));
      std::fflush(stdout);
    }
  }
  std::printf(
      "delays: %d seeds x %zu cases = %lld runs: %lld wrong, %lld hung, %lld "
      "other errors; %lld of %lld operations overtook an earlier one (%.1f s)\n",
      seeds, cases.size(), static_cast<long long>(runs),
      static_cast<long long>(wrong), static_cast<long long>(hung),
      static_cast<long long>(other), static_cast<long long>(overtaken),
      static_cast<long long>(released),
      absl::ToDoubleSeconds(absl::Now() - start));

  int late = 0, survived = 0;
  absl::Duration slowest;
  for (int k = 1; k <= kills; ++k) {
    const int n = 4 + k % 5;  // 4 to 8 ranks.
    FaultPlan plan;
    plan.seed = static_cast<uint64_t>(k);
    plan.max_delay = absl::Microseconds(max_delay_us);
    plan.failure = FaultPlan::Failure::kKill;
    plan.fail_rank = static_cast<int>((k * 2654435761u) % n);
    plan.fail_at_op = static_cast<int64_t>((k * 40503u) % (20 * 4 * (n - 1)));
    FaultInjectingTransportFactory faulty(**loopback, plan);
    std::atomic<int64_t> death_ns{0};
    std::vector<absl::Status> results(n);
    std::vector<absl::Time> ended(n);
    CommunicatorOptions options;
    options.default_timeout = absl::Seconds(60);
    RunRanks(n, faulty, DefaultEngine(), [&](Communicator& comm) -> absl::Status {
      std::vector<float> data(4096, 1.0f);
      CollectiveOptions ring;
      ring.algorithm = Algorithm::kRing;
      absl::Status result;
      for (int i = 0; i < 40 && result.ok(); ++i) {
        absl::StatusOr<Request> r = comm.AllReduce(
            ConstBuffer::Of(data), Buffer::Of(data), ReduceOp::kSum, ring);
        result = r.ok() ? r->Wait() : r.status();
      }
      const absl::Time now = absl::Now();
      if (comm.rank() == plan.fail_rank) {
        death_ns = absl::ToUnixNanos(now);
      }
      results[comm.rank()] = result;
      ended[comm.rank()] = now;
      // Nothing may still write into `data` once this returns.
      if (!result.ok()) comm.Abort().IgnoreError();
      return absl::OkStatus();
    }, options).IgnoreError();
    const absl::Time death = absl::FromUnixNanos(death_ns.load());
    for (int r = 0; r < n; ++r) {
      if (results[r].ok()) {
        ++survived;
        std::printf("kill %d (%s): rank %d finished without an error\n", k,
                    plan.ToString().c_str(), r);
        continue;
      }
      const absl::Duration after = ended[r] - death;
      slowest = std::max(slowest, after);
      if (after > absl::Seconds(2)) {
        ++late;
        std::printf("kill %d (%s): rank %d failed %s after the death\n", k,
                    plan.ToString().c_str(), r, absl::FormatDuration(after).c_str());
      }
    }
  }
  if (kills > 0) {
    std::printf(
        "kills: %d runs (4-8 ranks): %d ranks finished without an error, %d "
        "failed later than 2 s after the death; slowest %s\n",
        kills, survived, late, absl::FormatDuration(slowest).c_str());
  }
  return wrong + hung + other + late + survived == 0 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
