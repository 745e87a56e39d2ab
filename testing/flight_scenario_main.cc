// flight_scenario: a failure scenario whose flight records tools/relay_analyze
// must explain (tools/relay_analyze_test.sh). Four ranks as threads over
// loopback loop over ring all_reduces, and one rank misbehaves:
//
//   flight_scenario --dir D --stall R --at K   rank R never calls all_reduce
//       #K; the others time out in it and abort (their records are written
//       by the abort), R writes its record on request (DumpFlightRecord).
//   flight_scenario --dir D --kill R --at-op K   rank R dies at its K-th
//       transport operation (testing/fault_transport.h); every rank aborts.
//
//   flight_scenario --dir D --stall R --at K --signal 1   as --stall, but
//       while the ranks wait the process raises SIGUSR1, and the records the
//       signal wrote (runtime/flight_dump_signal.h) are copied to D.
//   flight_scenario --dir D --stall R --at K --no-abort 1   as --stall, as
//       a program that only waits would: the others return on the timeout
//       without aborting, and R is stuck elsewhere, then returns; the
//       records come from the communicators destroyed with work pending.
//   flight_scenario --dir D --mismatch R --at K   with the fingerprint
//       check on, rank R calls all_reduce #K with another count.
//
// Records go to D/relay_flight_rank<R>.json. Exit status 0 when the
// scenario ran as described (every rank but a stalled one saw an error).
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "relay.h"
#include "testing/fault_transport.h"
#include "testing/rank_harness.h"

namespace relay {
namespace {

constexpr int kRanks = 4;

int Main(int argc, char** argv) {
  std::string dir, mode;
  int rank = -1, at = -1, signal = 0, no_abort = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dir") {
      dir = value;
    } else if ((flag == "--stall" || flag == "--kill" ||
                flag == "--mismatch") &&
               absl::SimpleAtoi(value, &rank)) {
      mode = flag.substr(2);
    } else if ((flag == "--at" || flag == "--at-op") && absl::SimpleAtoi(value, &at)) {
    } else if (flag == "--signal" && absl::SimpleAtoi(value, &signal)) {
    } else if (flag == "--no-abort" && absl::SimpleAtoi(value, &no_abort)) {
    } else {
      std::fprintf(stderr, "flight_scenario: bad flag %s %s\n", flag.c_str(), value.c_str());
      return 2;
    }
  }
  if (dir.empty() || mode.empty() || rank < 0 || rank >= kRanks || at < 0) {
    std::fprintf(stderr, "usage: flight_scenario --dir D (--stall R --at K "
                 "[--signal 1 | --no-abort 1] | --kill R --at-op K | "
                 "--mismatch R --at K)\n");
    return 2;
  }
  // With --signal the records of the abort go elsewhere, so D holds only
  // what the signal wrote.
  const std::string live = signal ? dir + "/live" : dir;
  if (signal) mkdir(live.c_str(), 0755);
  setenv("RELAY_FLIGHT_RECORDER_DIR", live.c_str(), 1);
  absl::StatusOr<TransportFactory*> loopback = Transports().Get("loopback");
  if (!loopback.ok()) return 2;
  FaultPlan plan;
  plan.delay_probability = 0;
  if (mode == "kill") {
    plan.failure = FaultPlan::Failure::kKill;
    plan.fail_rank = rank;
    plan.fail_at_op = at;
  }
  FaultInjectingTransportFactory factory(**loopback, plan);
  CommunicatorOptions options;
  options.default_timeout =
      absl::Milliseconds(mode == "stall" ? (signal ? 5000 : 500) : 30000);
  if (mode == "mismatch") options.check_level = CheckLevel::kFingerprint;
  std::vector<absl::Status> results(kRanks);
  std::thread signaller;
  std::atomic<int> copied{-1};
  // Ranks that stand where the signal must find them: the others with
  // all_reduce #K posted, the stalled one at its stall. The signal waits for
  // all of them rather than for a fixed time, which a loaded machine outruns.
  std::atomic<int> in_place{0};
  if (signal) {
    signaller = std::thread([&] {
      for (int tries = 0; tries < 3000 && in_place < kRanks; ++tries) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      raise(SIGUSR1);
      // Wait for every rank's signal record, then keep a copy in D.
      for (int tries = 0; tries < 200; ++tries) {
        int n = 0;
        for (int r = 0; r < kRanks; ++r) {
          std::ifstream in(absl::StrCat(live, "/relay_flight_rank", r, ".json"));
          std::stringstream text;
          text << in.rdbuf();
          if (text.str().find("signal SIGUSR1") != std::string::npos) ++n;
        }
        if (n == kRanks) break;
        absl::SleepFor(absl::Milliseconds(5));
      }
      int n = 0;
      for (int r = 0; r < kRanks; ++r) {
        const std::string name = absl::StrCat("/relay_flight_rank", r, ".json");
        std::ifstream in(live + name);
        std::ofstream out(dir + name);
        if (in && out << in.rdbuf()) ++n;
      }
      copied = n;
    });
  }
  RunRanks(kRanks, factory, DefaultEngine(), [&](Communicator& comm) -> absl::Status {
    std::vector<float> data(1000, 1.0f);
    CollectiveOptions ring;
    ring.algorithm = Algorithm::kRing;
    absl::Status result;
    for (int i = 0; i < 10 && result.ok(); ++i) {
      if (mode == "stall" && comm.rank() == rank && i == at) {
        if (no_abort) {
          // Stuck elsewhere past the others' timeouts (and the news of
          // their leaving), then gone: its communicator is destroyed.
          absl::SleepFor(absl::Milliseconds(1500));
          return absl::OkStatus();
        }
        if (signal) {  // Stuck elsewhere until the signal's records are copied.
          ++in_place;
          for (int tries = 0; tries < 3000 && copied < 0; ++tries) {
            absl::SleepFor(absl::Milliseconds(5));
          }
          return absl::OkStatus();
        }
        // Stuck elsewhere; its record is dumped on request.
        return comm.DumpFlightRecord(
            absl::StrCat(dir, "/relay_flight_rank", comm.rank(), ".json"),
            "requested while stuck outside relay");
      }
      const size_t count = mode == "mismatch" && comm.rank() == rank && i == at
                               ? data.size() / 2
                               : data.size();
      absl::StatusOr<Request> r = comm.AllReduce(
          ConstBuffer::Of(data.data(), count), Buffer::Of(data.data(), count),
          ReduceOp::kSum, ring);
      if (signal && i == at) ++in_place;
      result = r.ok() ? r->Wait() : r.status();
    }
    results[comm.rank()] = result;
    // Writes the record; without it, destroying the communicator with the
    // collective pending does.
    if (!result.ok() && !no_abort) comm.Abort(result).IgnoreError();
    return absl::OkStatus();
  }, options).IgnoreError();
  if (signaller.joinable()) signaller.join();
  if (signal && copied != kRanks) {
    std::fprintf(stderr, "flight_scenario: the signal wrote %d of %d records\n",
                 copied.load(), kRanks);
    return 1;
  }
  int failed = 0;
  for (int r = 0; r < kRanks; ++r) {
    if (!results[r].ok()) ++failed;
    std::printf("rank %d: %s\n", r, results[r].ToString().c_str());
  }
  return failed >= kRanks - 1 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
