// bench/handoff: the floor under any loopback latency on this machine: two
// threads pinned to two cores pass a flag back and forth through one
// std::atomic, spinning. Prints the one-way hand-off time; relay's
// pingpong and 8 B collectives are measured against it. Then the same two
// cores pass 1 MB through one buffer: the copy rate the shm algorithm's
// bandwidth stands on.
//
//   bazel run //bench:handoff
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <thread>

namespace {

void Pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// The other floor, under the shm algorithm's bandwidth: core 0 copies
// 1 MB into a buffer, core 1 copies it out, in turns. GB/s of the 1 MB
// moved per turn.
double CrossCoreCopyGBps(int cores) {
  constexpr size_t kBytes = size_t{1} << 20;
  constexpr int kTurns = 400;
  std::vector<char> src(kBytes, 1), shared(kBytes, 0), dst(kBytes, 2);
  std::atomic<int> turn{0};
  std::thread peer([&] {
    Pin(1 % (cores > 0 ? cores : 1));
    for (int i = 0; i < kTurns; ++i) {
      while (turn.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      std::memcpy(dst.data(), shared.data(), kBytes);
      turn.store(2 * i + 2, std::memory_order_release);
    }
  });
  Pin(0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kTurns; ++i) {
    std::memcpy(shared.data(), src.data(), kBytes);
    turn.store(2 * i + 1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double s = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  peer.join();
  return static_cast<double>(kBytes) * kTurns / s / 1e9;
}

}  // namespace

int main() {
  constexpr int kRounds = 200000;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::atomic<int> flag{0};
  std::thread peer([&] {
    Pin(1 % (cores > 0 ? cores : 1));
    for (int i = 0; i < kRounds; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  Pin(0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double us = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  peer.join();
  std::printf("one-way hand-off between two pinned threads: %.3f us\n",
              us / kRounds / 2);
  std::printf("1 MB copied in on core 0 and out on core 1, in turns: "
              "%.1f GB/s\n",
              CrossCoreCopyGBps(cores));
  return 0;
}
