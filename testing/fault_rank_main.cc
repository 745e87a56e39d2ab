// fault_rank: one rank of a job in which one rank is SIGKILLed in the middle
// of an all_reduce; the others check that the loss turns into an error, in
// time. Run under tools/relayrun --keep-going (so the survivors are not
// stopped when the victim dies), e.g.
//   tools/relayrun -n 4 --keep-going -- bazel-bin/testing/fault_rank --victim 1
//
// Every rank loops over all_reduces of --count floats with a --timeout
// seconds deadline. The victim posts its all_reduce number --after and kills
// itself with SIGKILL before waiting on it. Each survivor prints
//   rank R: all_reduce #I failed after T s: CODE: message
// and exits 0 if CODE is UNAVAILABLE or DEADLINE_EXCEEDED and T is at most
// --within seconds (default: the timeout plus 1 s); 3 if the error or its
// timing is wrong; 4 if it never saw a failure. Exit 2: bad flags or
// environment. With RELAY_PEER_TIMEOUT set below the timeout, the loss
// should arrive as UNAVAILABLE through the failure monitor
// (runtime/failure_monitor.h) well before the timeout: --within checks it.
// With --shrink 1 each survivor then calls Communicator::Shrink without the
// victim and runs 10 more all_reduces on the smaller group, checking every
// element; it prints "rank R: shrank to rank R' of N; 10 all_reduces right"
// and exits 0, or 3 if the Shrink or a result fails.
// With --freeze S the victim does not die at once: it stops itself
// (SIGSTOP) for S seconds, as a process stuck in the kernel or a debugger
// would, and SIGKILLs itself when it wakes. No transport notices a stopped
// process (its connections stay open), so only the failure monitor's
// heartbeats can tell the survivors.
// With --device 1 the buffers live on the GPU of the rank's local rank (for
// the GPU transports: RELAY_TRANSPORT=cuda_ipc or nccl), and each survivor
// then checks that its GPU still works (a copy there and back), printing
// "rank R: GPU usable after the failure"; exit 3 if it is not.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "relay.h"
#include "runtime/bootstrap/environment.h"
#include "testing/device_memory.h"

namespace relay {
namespace {

// Stops this process for `seconds`: a forked helper sends SIGCONT when the
// time is up (the helper calls only async-signal-safe functions, as a child
// of a threaded process must).
void FreezeFor(int seconds, int rank, int op) {
  std::printf("rank %d: freezing inside all_reduce #%d for %d s\n", rank, op,
              seconds);
  std::fflush(stdout);
  const pid_t parent = getpid();
  const pid_t helper = fork();
  if (helper == 0) {
    sleep(static_cast<unsigned>(seconds));
    kill(parent, SIGCONT);
    _exit(0);
  }
  if (helper < 0) {
    std::printf("rank %d: fork failed; dying instead of freezing\n", rank);
    return;
  }
  raise(SIGSTOP);
}

int Main(int argc, char** argv) {
  int victim = 1, after = 3, timeout_s = 3, within_s = -1, shrink = 0;
  int freeze_s = 0, device = 0;
  int64_t count = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int64_t v = 0;
    if (i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], &v) || v < 0) {
      std::fprintf(stderr,
                   "fault_rank: %s wants a non-negative integer\n"
                   "flags: --victim R --after N --timeout S --within S "
                   "--shrink 0|1 --freeze S --count N --device 0|1\n",
                   flag.c_str());
      return 2;
    }
    ++i;
    if (flag == "--victim") {
      victim = static_cast<int>(v);
    } else if (flag == "--after") {
      after = static_cast<int>(v);
    } else if (flag == "--timeout") {
      timeout_s = static_cast<int>(v);
    } else if (flag == "--within") {
      within_s = static_cast<int>(v);
    } else if (flag == "--shrink") {
      shrink = static_cast<int>(v);
    } else if (flag == "--freeze") {
      freeze_s = static_cast<int>(v);
    } else if (flag == "--count") {
      count = v;
    } else if (flag == "--device") {
      device = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "fault_rank: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (device && shrink) {
    std::fprintf(stderr, "fault_rank: --shrink runs on host buffers only\n");
    return 2;
  }
  int gpu = -1;
  if (device) {
    // The launcher's local rank, as CreateCommunicatorFromEnvironment reads
    // the rest of it.
    absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
    absl::StatusOr<int> used = env.ok() ? UseGpuOfLocalRank(env->local_rank) : env.status();
    if (!used.ok()) {
      std::fprintf(stderr, "fault_rank: --device 1: %s\n", used.status().ToString().c_str());
      return 2;
    }
    gpu = *used;
  }
  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(timeout_s);
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateCommunicatorFromEnvironment(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "fault_rank: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  const int rank = (*comm)->rank();
  const int size = (*comm)->size();
  // Element j of rank r's input: distinct per rank, exact in float32 sums.
  auto input = [](int r, size_t j) {
    return static_cast<float>((r + 1) * 10 + static_cast<int>(j % 7));
  };
  std::vector<float> in(static_cast<size_t>(count)), out(in.size());
  for (size_t j = 0; j < in.size(); ++j) in[j] = input(rank, j);
  ConstBuffer send = ConstBuffer::Of(in);
  Buffer recv = Buffer::Of(out);
  DeviceBytes device_in, device_out;
  if (device) {
    const size_t bytes = in.size() * sizeof(float);
    absl::StatusOr<DeviceBytes> a = DeviceBytes::Allocate(bytes);
    absl::StatusOr<DeviceBytes> b = DeviceBytes::Allocate(bytes);
    absl::Status s = a.ok() ? b.status() : a.status();
    if (s.ok()) s = a->CopyFrom(in.data(), bytes);
    if (!s.ok()) {
      std::fprintf(stderr, "fault_rank: %s\n", s.ToString().c_str());
      return 2;
    }
    device_in = *std::move(a);
    device_out = *std::move(b);
    send = ConstBuffer::Of(reinterpret_cast<const float*>(device_in.data()), in.size(),
                           Device::Cuda(gpu));
    recv = Buffer::Of(reinterpret_cast<float*>(device_out.data()), out.size(),
                      Device::Cuda(gpu));
  }
  for (int i = 0; i < after + 50; ++i) {
    absl::StatusOr<Request> r = (*comm)->AllReduce(send, recv, ReduceOp::kSum);
    if (!r.ok()) {
      std::printf("rank %d: all_reduce #%d not posted: %s\n", rank, i,
                  r.status().ToString().c_str());
      return 3;
    }
    if (rank == victim && i == after) {
      if (freeze_s > 0) FreezeFor(freeze_s, rank, i);
      std::printf("rank %d: killing myself inside all_reduce #%d\n", rank, i);
      std::fflush(stdout);
      raise(SIGKILL);
    }
    const absl::Time start = absl::Now();
    absl::Status s = r->Wait();
    const absl::Duration took = absl::Now() - start;
    if (s.ok()) continue;
    std::printf("rank %d: all_reduce #%d failed after %.3f s: %s\n", rank, i,
                absl::ToDoubleSeconds(took), s.ToString().c_str());
    std::fflush(stdout);
    const bool expected_code = s.code() == absl::StatusCode::kUnavailable ||
                               s.code() == absl::StatusCode::kDeadlineExceeded;
    const bool in_time =
        took <= absl::Seconds(within_s >= 0 ? within_s : timeout_s + 1);
    if (!expected_code || !in_time) return 3;
    // The group is broken: leave, or carry on without the victim.
    (*comm)->Abort(s).IgnoreError();
    if (device) {
      // The GPU still takes work: a copy there and back.
      std::vector<float> back(in.size());
      absl::Status works = device_in.CopyFrom(in.data(), in.size() * sizeof(float));
      if (works.ok()) works = device_in.CopyTo(back.data(), back.size() * sizeof(float));
      if (works.ok() && std::memcmp(back.data(), in.data(), back.size() * sizeof(float)) != 0) {
        works = absl::DataLossError("the copy came back different");
      }
      if (!works.ok()) {
        std::printf("rank %d: GPU not usable after the failure: %s\n", rank,
                    works.ToString().c_str());
        return 3;
      }
      std::printf("rank %d: GPU usable after the failure\n", rank);
    }
    if (!shrink) return 0;
    absl::StatusOr<std::unique_ptr<Communicator>> smaller =
        (*comm)->Shrink({&victim, 1});
    if (!smaller.ok()) {
      std::printf("rank %d: Shrink failed: %s\n", rank,
                  smaller.status().ToString().c_str());
      return 3;
    }
    constexpr int kMore = 10;
    for (int k = 0; k < kMore; ++k) {
      absl::StatusOr<Request> again = (*smaller)->AllReduce(
          ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
      absl::Status done = again.ok() ? again->Wait() : again.status();
      if (!done.ok()) {
        std::printf("rank %d: all_reduce %d after Shrink failed: %s\n", rank,
                    k, done.ToString().c_str());
        return 3;
      }
      for (size_t j = 0; j < out.size(); ++j) {
        float want = 0;
        for (int r = 0; r < size; ++r) {
          if (r != victim) want += input(r, j);
        }
        if (out[j] != want) {
          std::printf("rank %d: after Shrink element %zu is %g, want %g\n",
                      rank, j, out[j], want);
          return 3;
        }
      }
    }
    std::printf("rank %d: shrank to rank %d of %d; %d all_reduces right\n",
                rank, (*smaller)->rank(), (*smaller)->size(), kMore);
    return 0;
  }
  std::printf("rank %d: never saw the failure\n", rank);
  return rank == victim ? 0 : 4;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
