// bench/handoff: the floor under any loopback latency on this machine: two
// threads pinned to two cores pass a flag back and forth through one
// std::atomic, spinning. Prints the one-way hand-off time; relay's
// pingpong and 8 B collectives are measured against it.
//
//   bazel run //bench:handoff
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace {

void Pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
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
  return 0;
}
