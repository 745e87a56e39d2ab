// teardown_rank: one rank of a job that makes and destroys sub-communicators
// the way a long-running program does, each rank at its own time, so that a
// transport's teardown can be checked for noise and hangs. Run under
// tools/relayrun, e.g.
//   UCX_TLS=tcp,self tools/relayrun -n 3 --transport ucx --
//       bazel-bin/testing/teardown_rank
// (one command line)
//
// Each rank splits the world by parity and as a whole (reversed), three
// times, runs an all_reduce of --count floats and a ring of sends on each
// child, checks every element, runs one more all_reduce on the world, then
// destroys its children and leaves after rank * 300 ms (rank 0 first; with
// --reverse, rank 0 last), so that ranks tear down while their peers still
// run or have already exited. It prints "rank R: ok" and exits 0, or prints
// the error and exits 1 (2 for bad flags or environment). A clean teardown
// prints nothing else: the test that runs it fails on any line from the
// transport's library (UCX's "UCX ERROR").
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "relay.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

size_t count = 1000;  // --count.

absl::Status CheckedAllReduce(Communicator& c, int salt) {
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<float>((c.rank() + 1) * (salt + 1) * (i % 5 + 1));
  }
  RELAY_RETURN_IF_ERROR(
      c.RunAllReduce(ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum));
  const float ranks = static_cast<float>(c.size() * (c.size() + 1) / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const float want = ranks * static_cast<float>((salt + 1) * (i % 5 + 1));
    if (out[i] != want) {
      return absl::InternalError(absl::StrCat("all_reduce element ", i, " is ",
                                              out[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

// Every rank sends to the next and receives from the previous.
absl::Status CheckedRing(Communicator& c) {
  if (c.size() < 2) return absl::OkStatus();
  const int next = (c.rank() + 1) % c.size();
  const int prev = (c.rank() + c.size() - 1) % c.size();
  // Every element differs, and from every other rank's.
  std::vector<int32_t> out(300), in(300, -1);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = c.rank() * 1000 + static_cast<int32_t>(i);
  }
  const P2POp ops[] = {P2POp::Send(ConstBuffer::Of(out), next, 9),
                       P2POp::Recv(Buffer::Of(in), prev, 9)};
  RELAY_ASSIGN_OR_RETURN(Request r, c.BatchSendRecv(ops));
  RELAY_RETURN_IF_ERROR(r.Wait());
  for (size_t i = 0; i < in.size(); ++i) {
    const int32_t want = prev * 1000 + static_cast<int32_t>(i);
    if (in[i] != want) {
      return absl::InternalError(absl::StrCat("ring element ", i, " is ",
                                              in[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status Run(Communicator& world, bool reverse) {
  std::vector<std::unique_ptr<Communicator>> children;
  for (int round = 0; round < 3; ++round) {
    RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> half,
                           world.Split(world.rank() % 2, world.rank()));
    RELAY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> whole,
                           world.Split(0, world.size() - world.rank()));
    for (Communicator* c : {half.get(), whole.get()}) {
      RELAY_RETURN_IF_ERROR(CheckedAllReduce(*c, round));
      RELAY_RETURN_IF_ERROR(CheckedRing(*c));
    }
    children.push_back(std::move(half));
    children.push_back(std::move(whole));
  }
  RELAY_RETURN_IF_ERROR(CheckedAllReduce(world, 7));
  // With --reverse rank 0 goes last: its peers have left the job (their
  // processes exit) while it still holds connections to them.
  absl::SleepFor(absl::Milliseconds(300) *
                 (reverse ? world.size() - 1 - world.rank() : world.rank()));
  children.clear();
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  bool reverse = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reverse") {
      reverse = true;
    } else if (arg == "--count" && i + 1 < argc &&
               absl::SimpleAtoi(argv[i + 1], &count)) {
      ++i;
    } else {
      std::fprintf(stderr, "teardown_rank: unknown flag '%s' (flags: "
                   "--count N, --reverse)\n", arg.c_str());
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<Communicator>> world =
      CreateCommunicatorFromEnvironment();
  if (!world.ok()) {
    std::fprintf(stderr, "teardown_rank: %s\n", world.status().ToString().c_str());
    return 2;
  }
  const int rank = (*world)->rank();
  const absl::Status status = Run(**world, reverse);
  world->reset();
  if (!status.ok()) {
    std::printf("rank %d: %s\n", rank, status.ToString().c_str());
    return 1;
  }
  std::printf("rank %d: ok\n", rank);
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
