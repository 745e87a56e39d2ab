// File: runtime/metrics.h
//
// CollectiveMetrics: per-communicator counters (operations, bytes, errors)
// and latency histograms per collective and size class, lock-free to record
// (relaxed atomics), readable at any time and exported in the Prometheus text
// format.
//
// Latency is from the call to completion (the request's completion, on
// whichever thread completes it). Calls rejected before they start (bad
// input, an aborted communicator) are not counted; a collective that starts
// and fails is an operation and an error. Size classes by the bytes of one rank's
// buffer: <=1 KiB, <=64 KiB, <=1 MiB, <=16 MiB, larger. Buckets (seconds):
// 1e-6 ... 10 in 1-2-5 steps, cumulative as Prometheus wants them.
//
// Lifetime and ownership. Owned by its Communicator and shared with the
// completion callbacks of operations in flight. Thread-safe.
//
// Example:
//   CollectiveMetrics m;
//   m.Record(CollectiveKind::kAllReduce, 4096, absl::Microseconds(12), ok);
//   std::string text = m.PrometheusText({{"rank", "0"}});
#ifndef RELAY_RUNTIME_METRICS_H_
#define RELAY_RUNTIME_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/collective.h"
#include "runtime/spin_lock.h"

namespace relay {

class CollectiveMetrics {
 public:
  static constexpr int kKinds = kCollectiveKinds;
  static constexpr int kSizeClasses = 5;
  static constexpr int kBuckets = 22;  // 1e-6 s .. 10 s, then +Inf.

  // Upper bounds of the size classes ("le" of the label) and of the
  // latency buckets.
  static const std::array<uint64_t, kSizeClasses - 1>& SizeClassBounds();
  static const std::array<double, kBuckets>& BucketBounds();
  // The same bounds in nanoseconds, exact (Record compares these; the
  // seconds above are derived from them for the exposition).
  static const std::array<int64_t, kBuckets>& BucketBoundsNs();
  static int SizeClass(uint64_t bytes);
  static std::string SizeClassLabel(int size_class);  // "1KiB", ..., "inf"

  void Record(CollectiveKind kind, uint64_t bytes, absl::Duration latency,
              bool ok) {
    RecordNanos(kind, bytes, absl::ToInt64Nanoseconds(latency), ok);
  }
  // The same with the latency in nanoseconds (what the communicator has:
  // two FastNowNanos readings).
  void RecordNanos(CollectiveKind kind, uint64_t bytes, int64_t latency_ns,
                   bool ok);

  struct Counts {
    uint64_t operations = 0;
    uint64_t bytes = 0;
    uint64_t errors = 0;
  };
  Counts Totals(CollectiveKind kind) const;

  // The transport's own device memory (TransportCapabilities::device_bytes),
  // set once by the communicator.
  void SetTransportDeviceBytes(uint64_t bytes) {
    transport_device_bytes_.store(bytes, std::memory_order_relaxed);
  }

  // Prometheus text format (version 0.0.4): relay_collective_operations_total,
  // relay_collective_bytes_total, relay_collective_errors_total (by
  // collective), relay_collective_latency_seconds (histogram by
  // collective and size class) and relay_transport_device_bytes (gauge).
  // `labels` go on every sample.
  std::string PrometheusText(
      const std::vector<std::pair<std::string, std::string>>& labels) const;

 private:
  // Operations and a histogram's count are not kept apart: they are the
  // sums of the buckets, so a reader never sees a count that disagrees
  // with them.
  // Writers take record_mu_ and update the counters with plain loads and
  // stores (atomic, so readers need no lock): one atomic exchange a
  // record where three atomic adds each drained the store buffer too.
  SpinLock record_mu_;
  struct Histogram {
    std::array<std::atomic<uint64_t>, kBuckets + 1> buckets{};  // Not cumulative.
    std::atomic<uint64_t> sum_ns{0};
    uint64_t Count() const;
  };
  struct PerKind {
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> errors{0};
    std::array<Histogram, kSizeClasses> latency;
  };
  std::array<PerKind, kKinds> kinds_;
  std::atomic<uint64_t> transport_device_bytes_{0};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_METRICS_H_
