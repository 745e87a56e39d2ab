// File: bench/thread_barrier.h
//
// ThreadBarrier: a reusable barrier for a benchmark's threads (one per GPU
// or rank), so each timed round starts on every thread together.
//
// Example:
//   ThreadBarrier barrier(gpus);
//   ... on each thread: barrier.Wait(); time the round; barrier.Wait();
#ifndef RELAY_BENCH_THREAD_BARRIER_H_
#define RELAY_BENCH_THREAD_BARRIER_H_

#include <condition_variable>
#include <mutex>

namespace relay::bench {

class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  // Returns once all n threads have called it (for this generation).
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, generation_ = 0;
};

}  // namespace relay::bench

#endif  // RELAY_BENCH_THREAD_BARRIER_H_
