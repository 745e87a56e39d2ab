// File: runtime/finished_prefix.h
//
// FinishedPrefix: how many of a queue's operations have finished, when they
// finish in queue order (one CUDA stream) and each look costs a driver call
// (cudaEventQuery, about 1.4 us on an H200). It gallops from the front
// (indexes 0, 2, 6, 14, ...) and then bisects, so a queue whose front is
// still running costs one look, and k finished operations cost about
// 2 log2(k) looks. A plain bisection of the whole queue cost log2(n) looks
// every time: 8 for the 256 the GPU transports' watchdog (device_watch.h) probes at once, on a thread
// whose driver calls share the driver with the one enqueueing work.
//
// Example:
//   FinishedPrefixResult r = FinishedPrefix(events.size(), [&](size_t i) {
//     const cudaError_t q = cudaEventQuery(events[i]);
//     return q == cudaSuccess ? ProbeResult::kFinished
//            : q == cudaErrorNotReady ? ProbeResult::kRunning
//                                     : ProbeResult::kFailed;
//   });
#ifndef RELAY_RUNTIME_FINISHED_PREFIX_H_
#define RELAY_RUNTIME_FINISHED_PREFIX_H_

#include <algorithm>
#include <cstddef>

namespace relay {

enum class ProbeResult { kFinished, kRunning, kFailed };

struct FinishedPrefixResult {
  // Operations [0, finished) have finished.
  size_t finished = 0;
  // A probe failed (at or after `finished`): the search stopped there.
  bool failed = false;
};

// `probe(i)` for i in [0, n) tells whether operation i has finished; the
// finished ones must be a prefix.
template <typename Probe>
FinishedPrefixResult FinishedPrefix(size_t n, Probe&& probe) {
  size_t lo = 0;  // [0, lo) finished.
  size_t hi = n;  // hi == n, or operation hi is running.
  for (size_t step = 1; lo < n; step *= 2) {
    const size_t i = std::min(lo + step - 1, n - 1);
    const ProbeResult r = probe(i);
    if (r == ProbeResult::kFailed) return {lo, true};
    if (r == ProbeResult::kRunning) {
      hi = i;
      break;
    }
    lo = i + 1;
  }
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    const ProbeResult r = probe(mid);
    if (r == ProbeResult::kFailed) return {lo, true};
    if (r == ProbeResult::kFinished) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return {lo, false};
}

}  // namespace relay

#endif  // RELAY_RUNTIME_FINISHED_PREFIX_H_
