// window_freed_rank: one rank of a job over a transport with windows
// (RELAY_TRANSPORT=cuda_ipc) in which rank --victim frees the memory of a
// window it registered, then every rank runs --collective (all_gather or
// all_reduce) into its window: testing/device_transport_checks.h's
// CheckWindowFreedWhileRegistered, with ranks as processes. Run under
// tools/relayrun, e.g.
//   tools/relayrun -n 2 --transport cuda_ipc -- bazel-bin/testing/window_freed_rank
//       --collective all_reduce
// Each rank prints "rank R: refused as expected" and exits 0, or prints
// what went wrong and exits 3. Exit 2: bad flags, environment or no GPU.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"
#include "testing/device_memory.h"
#include "testing/device_transport_checks.h"

namespace relay {
namespace {

int Main(int argc, char** argv) {
  std::string collective = "all_gather";
  int victim = 1;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "window_freed_rank: %s wants a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    bool ok = false;
    if (flag == "--collective") {
      collective = value;
      ok = value == "all_gather" || value == "all_reduce";
    } else if (flag == "--victim") {
      ok = absl::SimpleAtoi(value, &victim) && victim >= 0;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "window_freed_rank: bad flag %s %s\n"
                   "flags: --collective all_gather|all_reduce --victim R\n",
                   flag.c_str(), value.c_str());
      return 2;
    }
  }
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  absl::StatusOr<int> used = env.ok() ? UseGpuOfLocalRank(env->local_rank) : env.status();
  if (!used.ok()) {
    std::fprintf(stderr, "window_freed_rank: %s\n", used.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicatorFromEnvironment();
  if (!comm.ok()) {
    std::fprintf(stderr, "window_freed_rank: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  if (victim >= (*comm)->size()) {
    std::fprintf(stderr, "window_freed_rank: --victim %d of %d ranks\n", victim,
                 (*comm)->size());
    return 2;
  }
  const absl::Status s = CheckWindowFreedWhileRegistered(
      **comm,
      collective == "all_gather" ? CollectiveKind::kAllGather : CollectiveKind::kAllReduce,
      victim);
  if (!s.ok()) {
    std::printf("rank %d: %s\n", (*comm)->rank(), s.ToString().c_str());
    return 3;
  }
  std::printf("rank %d: refused as expected\n", (*comm)->rank());
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
