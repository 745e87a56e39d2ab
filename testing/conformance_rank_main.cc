// conformance_rank: the conformance suite for ranks that are processes. Run
// every rank under a launcher, e.g.
//
//   UCX_TLS=shm,self tools/relayrun -n 4 --transport ucx --
//       bazel-bin/testing/conformance_rank [--filter all_reduce] [--quick]
// (one command line)
//
// Each rank builds its communicator from the launch environment (rank 0
// hosts the store), runs every case of testing/conformance.h for the job's
// world size, in the same order on every rank, and checks its own results.
// It prints a line per failure and a summary; rank 0 reports progress every
// 200 cases. Exit status 0 if this rank saw no failure, 1 if it did, 2 for
// bad flags or environment.
//
// Flags:
//   --filter SUBSTR   only cases whose name contains SUBSTR
//   --quick           skip the cases over a million elements
//   --timeout SECONDS per-case timeout (default 120)
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"
#include "runtime/bootstrap/job_store.h"
#include "runtime/bootstrap/tcp_store.h"
#include "testing/conformance.h"
#include "testing/device_memory.h"

namespace relay {
namespace {

int Usage(const std::string& why) {
  std::fprintf(stderr, "conformance_rank: %s\n", why.c_str());
  return 2;
}

int Main(int argc, char** argv) {
  std::string filter;
  bool quick = false;
  int timeout_s = 120;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--timeout" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &timeout_s) || timeout_s <= 0) {
        return Usage("--timeout needs a positive number of seconds");
      }
    } else {
      return Usage(absl::StrCat("unknown flag '", arg,
                                "' (flags: --filter S, --quick, --timeout S)"));
    }
  }
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  if (!env.ok()) return Usage(std::string(env.status().message()));
  // One GPU per local rank, for transports that move device memory.
  if (DeviceMemoryAvailable()) UseGpuOfLocalRank(env->local_rank).status().IgnoreError();
  absl::StatusOr<std::shared_ptr<TcpStore>> store = ConnectJobStore(*env);
  if (!store.ok()) return Usage(std::string(store.status().message()));

  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(timeout_s);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(
      {.rank = env->rank,
       .size = env->size,
       .store = std::make_shared<PrefixStore>(*store, "comm/"),
       .transport = env->transport,
       .options = options});
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: cannot create the communicator: %s\n",
                 env->rank, std::string(comm.status().message()).c_str());
    return 1;
  }
  const int rank = env->rank;
  std::vector<ConformanceCase> cases;
  const TransportCapabilities caps = (*comm)->capabilities();
  // A device-memory transport runs its native collectives and relay's own
  // algorithms on device buffers; one without point-to-point only the
  // native ones.
  const std::vector<ConformanceCase> matrix =
      caps.host_memory         ? ConformanceCasesForSize(env->size)
      : !caps.point_to_point   ? NativeConformanceCases(env->size)
                               : DeviceConformanceCases(env->size);
  for (const ConformanceCase& c : matrix) {
    // Direct algorithms need ranks that share an address space.
    if (c.algorithm == Algorithm::kDirect && !caps.shared_address_space) {
      continue;
    }
    // And shm, ranks with a shared-memory exchange (on one host).
    if (c.algorithm == Algorithm::kShm && caps.exchange_bytes == 0) continue;
    if (quick && c.count > (size_t{1} << 20)) continue;
    if (!filter.empty() && !absl::StrContains(c.Name(), filter)) continue;
    cases.push_back(c);
  }
  if (rank == 0) {
    std::printf("%zu cases on %d ranks over %s\n", cases.size(), env->size,
                std::string((*comm)->transport_name()).c_str());
    std::fflush(stdout);
  }
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    BarrierArrivals arrivals(**store, absl::StrCat("barrier/", i));
    absl::Status s = RunConformanceCaseOnRank(cases[i], **comm, arrivals);
    if (!s.ok()) {
      ++failed;
      std::printf("rank %d: FAILED %s: %s\n", rank, cases[i].Name().c_str(),
                  std::string(s.ToString()).c_str());
      std::fflush(stdout);
      // A wrong result leaves the group in step; anything else does not.
      if (s.code() != absl::StatusCode::kInternal) break;
    }
    if (rank == 0 && (i + 1) % 200 == 0) {
      std::printf("%zu/%zu cases\n", i + 1, cases.size());
      std::fflush(stdout);
    }
  }
  // The progress guarantee: operations on two communicators completed by
  // callbacks alone (host memory; the device path has its own suite).
  const bool callback_case =
      caps.host_memory && (filter.empty() ||
                           absl::StrContains("callback_progress", filter));
  if (callback_case && failed == 0) {
    absl::Status s =
        RunCallbackProgressCaseOnRank(**comm, absl::Seconds(timeout_s));
    if (!s.ok()) {
      ++failed;
      std::printf("rank %d: FAILED callback_progress: %s\n", rank,
                  std::string(s.ToString()).c_str());
      std::fflush(stdout);
    }
  }
  // Nobody leaves while a peer may still need its last messages: a send
  // that completed has left this rank's buffer, not necessarily arrived.
  if (absl::StatusOr<Request> last = (*comm)->Barrier(); last.ok()) {
    if (absl::Status s = last->Wait(); !s.ok()) {
      std::printf("rank %d: final barrier: %s\n", rank, s.ToString().c_str());
      ++failed;
    }
  }
  std::printf("rank %d: %zu cases, %d failed\n", rank,
              cases.size() + (callback_case ? 1 : 0), failed);
  std::fflush(stdout);
  // Rank 0 hosts the store: it leaves only after everyone is done with it.
  if (absl::Status s = (*store)->Set(absl::StrCat("done/", rank), "1"); s.ok() &&
      rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < env->size; ++r) keys.push_back(absl::StrCat("done/", r));
    (*store)->MultiGet(keys, absl::Seconds(timeout_s)).status().IgnoreError();
  }
  comm->reset();
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
