// FinishedPrefix on every queue length and boundary up to 300: the right
// count, and few probes (one when the front is still running).
#include "runtime/finished_prefix.h"

#include <cmath>
#include <cstddef>

#include "gtest/gtest.h"

namespace relay {
namespace {

TEST(FinishedPrefixTest, FindsEveryBoundaryWithFewProbes) {
  for (size_t n = 0; n <= 300; ++n) {
    for (size_t k = 0; k <= n; ++k) {  // Operations [0, k) finished.
      size_t probes = 0;
      const FinishedPrefixResult r = FinishedPrefix(n, [&](size_t i) {
        EXPECT_LT(i, n);
        ++probes;
        return i < k ? ProbeResult::kFinished : ProbeResult::kRunning;
      });
      ASSERT_EQ(r.finished, k) << "n " << n;
      EXPECT_FALSE(r.failed);
      if (n > 0 && k == 0) {
        EXPECT_EQ(probes, 1u) << "n " << n;
      }
      // Galloping, then bisecting what the gallop left open.
      EXPECT_LE(probes, 2 * std::log2(k + 1) + 2) << "n " << n << " k " << k;
    }
  }
}

TEST(FinishedPrefixTest, AFailedProbeStopsTheSearch) {
  for (size_t n = 1; n <= 64; ++n) {
    for (size_t k = 0; k <= n; ++k) {
      for (size_t bad = 0; bad < n; ++bad) {
        const FinishedPrefixResult r = FinishedPrefix(n, [&](size_t i) {
          if (i == bad) return ProbeResult::kFailed;
          return i < k ? ProbeResult::kFinished : ProbeResult::kRunning;
        });
        if (r.failed) {
          // Only what was seen finished is reported, and never past the
          // failure.
          EXPECT_LE(r.finished, bad);
          EXPECT_LE(r.finished, k);
        } else {
          EXPECT_EQ(r.finished, k);  // The search never looked at `bad`.
        }
      }
    }
  }
}

}  // namespace
}  // namespace relay
