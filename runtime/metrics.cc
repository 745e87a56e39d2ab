#include "runtime/metrics.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace relay {
namespace {

std::string Labels(const std::vector<std::pair<std::string, std::string>>& base,
                   const std::vector<std::pair<std::string, std::string>>& more) {
  std::vector<std::string> parts;
  for (const auto* list : {&base, &more}) {
    for (const auto& [k, v] : *list) {
      std::string escaped;
      for (char c : v) {
        if (c == '\\' || c == '"') escaped += '\\';
        if (c == '\n') {
          escaped += "\\n";
          continue;
        }
        escaped += c;
      }
      parts.push_back(absl::StrCat(k, "=\"", escaped, "\""));
    }
  }
  return parts.empty() ? "" : absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

std::string Seconds(double s) { return absl::StrCat(s); }

// The tables as constants the compiler builds: every record reads both, and
// function-local statics cost a call and a guard check each time.
constexpr std::array<uint64_t, CollectiveMetrics::kSizeClasses - 1>
    kSizeClassBounds = {uint64_t{1} << 10, uint64_t{64} << 10,
                        uint64_t{1} << 20, uint64_t{16} << 20};

constexpr std::array<int64_t, CollectiveMetrics::kBuckets> MakeBucketBoundsNs() {
  std::array<int64_t, CollectiveMetrics::kBuckets> b{};
  int64_t decade = 1000;  // 1 us.
  for (int i = 0; i < CollectiveMetrics::kBuckets; ++i) {
    constexpr int64_t kSteps[] = {1, 2, 5};
    b[i] = decade * kSteps[i % 3];
    if (i % 3 == 2) decade *= 10;
  }
  return b;
}
constexpr std::array<int64_t, CollectiveMetrics::kBuckets> kBucketBoundsNs =
    MakeBucketBoundsNs();

}  // namespace

const std::array<uint64_t, CollectiveMetrics::kSizeClasses - 1>&
CollectiveMetrics::SizeClassBounds() {
  return kSizeClassBounds;
}

const std::array<int64_t, CollectiveMetrics::kBuckets>&
CollectiveMetrics::BucketBoundsNs() {
  return kBucketBoundsNs;
}

const std::array<double, CollectiveMetrics::kBuckets>&
CollectiveMetrics::BucketBounds() {
  static const std::array<double, kBuckets> bounds = [] {
    std::array<double, kBuckets> b{};
    for (int i = 0; i < kBuckets; ++i) b[i] = BucketBoundsNs()[i] / 1e9;
    return b;
  }();
  return bounds;
}

int CollectiveMetrics::SizeClass(uint64_t bytes) {
  for (int i = 0; i < kSizeClasses - 1; ++i) {
    if (bytes <= kSizeClassBounds[i]) return i;
  }
  return kSizeClasses - 1;
}

std::string CollectiveMetrics::SizeClassLabel(int size_class) {
  static const char* const kNames[] = {"1KiB", "64KiB", "1MiB", "16MiB", "inf"};
  return kNames[std::clamp(size_class, 0, kSizeClasses - 1)];
}

void CollectiveMetrics::RecordNanos(CollectiveKind kind, uint64_t bytes,
                                    int64_t latency_ns, bool ok) {
  PerKind& k = kinds_[static_cast<int>(kind)];
  Histogram& h = k.latency[SizeClass(bytes)];
  // In whole nanoseconds: the bounds are whole too (1 us, 2 us, 5 us, ...).
  const int64_t ns = std::max<int64_t>(0, latency_ns);
  // The first bound at or above ns, searched from the bottom: most
  // collectives are short, so this stops within the first few (a binary
  // search took five dependent steps every time).
  int bucket = 0;
  while (bucket < kBuckets && kBucketBoundsNs[bucket] < ns) ++bucket;
  // Every writer holds the lock, so a load and a store add without loss.
  auto add = [](std::atomic<uint64_t>& counter, uint64_t v) {
    counter.store(counter.load(std::memory_order_relaxed) + v,
                  std::memory_order_relaxed);
  };
  std::lock_guard<SpinLock> lock(record_mu_);
  add(k.bytes, bytes);
  if (!ok) add(k.errors, 1);
  add(h.buckets[bucket], 1);
  add(h.sum_ns, static_cast<uint64_t>(ns));
}

uint64_t CollectiveMetrics::Histogram::Count() const {
  uint64_t count = 0;
  for (const auto& b : buckets) count += b.load(std::memory_order_relaxed);
  return count;
}

CollectiveMetrics::Counts CollectiveMetrics::Totals(CollectiveKind kind) const {
  const PerKind& k = kinds_[static_cast<int>(kind)];
  uint64_t operations = 0;
  for (const Histogram& h : k.latency) operations += h.Count();
  return {operations, k.bytes.load(std::memory_order_relaxed),
          k.errors.load(std::memory_order_relaxed)};
}

std::string CollectiveMetrics::PrometheusText(
    const std::vector<std::pair<std::string, std::string>>& labels) const {
  std::string out;
  struct Counter {
    const char* name;
    const char* help;
    uint64_t Counts::*field;
  };
  const Counter counters[] = {
      {"relay_collective_operations_total", "Collectives completed.",
       &Counts::operations},
      {"relay_collective_bytes_total",
       "Bytes of this rank's buffer over completed collectives.", &Counts::bytes},
      {"relay_collective_errors_total", "Collectives that failed.",
       &Counts::errors},
  };
  for (const Counter& c : counters) {
    absl::StrAppend(&out, "# HELP ", c.name, " ", c.help, "\n# TYPE ", c.name,
                    " counter\n");
    for (CollectiveKind kind : AllCollectiveKinds()) {
      const uint64_t v = Totals(kind).*c.field;
      absl::StrAppend(&out, c.name,
                      Labels(labels, {{"collective", std::string(CollectiveName(kind))}}),
                      " ", v, "\n");
    }
  }
  const char* hist = "relay_collective_latency_seconds";
  absl::StrAppend(&out, "# HELP ", hist,
                  " Time from the call to completion, by collective and size "
                  "class of one rank's buffer.\n# TYPE ", hist, " histogram\n");
  const auto& bounds = BucketBounds();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    const PerKind& k = kinds_[static_cast<int>(kind)];
    for (int sc = 0; sc < kSizeClasses; ++sc) {
      const Histogram& h = k.latency[sc];
      // Read bucket by bucket below: _count is the +Inf bucket's total, so
      // the two agree even while operations complete.
      if (h.Count() == 0) continue;  // Only the classes that were used.
      const std::vector<std::pair<std::string, std::string>> own = {
          {"collective", std::string(CollectiveName(kind))},
          {"size", SizeClassLabel(sc)}};
      uint64_t cumulative = 0;
      for (int b = 0; b <= kBuckets; ++b) {
        cumulative += h.buckets[b].load(std::memory_order_relaxed);
        auto with_le = own;
        with_le.emplace_back("le", b < kBuckets ? Seconds(bounds[b]) : "+Inf");
        absl::StrAppend(&out, hist, "_bucket", Labels(labels, with_le), " ",
                        cumulative, "\n");
      }
      absl::StrAppend(&out, hist, "_sum", Labels(labels, own), " ",
                      Seconds(h.sum_ns.load(std::memory_order_relaxed) * 1e-9), "\n");
      absl::StrAppend(&out, hist, "_count", Labels(labels, own), " ",
                      cumulative, "\n");
    }
  }
  const char* gauge = "relay_transport_device_bytes";
  absl::StrAppend(&out, "# HELP ", gauge,
                  " Device memory the transport holds for its own use (cuda_ipc's "
                  "arena, mapped into every peer).\n# TYPE ", gauge, " gauge\n", gauge,
                  Labels(labels, {}), " ",
                  transport_device_bytes_.load(std::memory_order_relaxed), "\n");
  return out;
}

}  // namespace relay
