// FastNow when the kernel moves its clocksource off the TSC while the
// process runs (VMs do: "Marking clocksource 'tsc' as unstable"). A binary
// of its own: the clock's state is the process's, and this test ends it on
// the system clock.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/fast_clock.h"

namespace relay {
namespace {

int64_t SystemNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void WriteSource(const std::string& path, const char* source) {
  std::ofstream out(path, std::ios::trunc);
  out << source << "\n";
}

// Reads FastNow between two system clock reads for `duration`; false (and
// a failure) at the first reading more than 50 us outside the bracket.
bool ReadsFollowTheSystemClock(std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    const int64_t before = SystemNs();
    const int64_t fast = FastNowNanos();
    const int64_t after = SystemNs();
    if (fast < before - 50'000 || fast > after + 50'000) {
      ADD_FAILURE() << "FastNow " << fast << " ns, system clock " << before
                    << " .. " << after;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

TEST(FastClockRefusedTest, FallsBackToTheSystemClockWhenTheKernelDropsTheTsc) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "FastNow scales the TSC on x86-64 only";
#else
  const char* dir = std::getenv("TEST_TMPDIR");
  static const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/relay_clocksource";
  WriteSource(path, "tsc");
  clock_internal::SetClocksourceFileForTest(path.c_str());

  ASSERT_TRUE(ReadsFollowTheSystemClock(std::chrono::milliseconds(30)));
  ASSERT_TRUE(FastNowUsesTsc()) << "calibrated on a 'tsc' clocksource";

  WriteSource(path, "hpet");
  // The next re-anchor, within about a second, asks the kernel again.
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (FastNowUsesTsc() && std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(ReadsFollowTheSystemClock(std::chrono::milliseconds(10)));
  }
  EXPECT_FALSE(FastNowUsesTsc()) << "still on the TSC after the kernel left it";
  EXPECT_TRUE(ReadsFollowTheSystemClock(std::chrono::milliseconds(20)));

  // For good: the kernel coming back does not bring the TSC back.
  WriteSource(path, "tsc");
  EXPECT_TRUE(ReadsFollowTheSystemClock(std::chrono::milliseconds(20)));
  EXPECT_FALSE(FastNowUsesTsc());
#endif
}

}  // namespace
}  // namespace relay
