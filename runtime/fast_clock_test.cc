#include "runtime/fast_clock.h"

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

// How far FastNow may stray from the system clock: a 10 ms calibration
// with readings good to tens of nanoseconds (the best of five) is off by
// about a microsecond at its refinement, 100 ms later.
constexpr int64_t kToleranceNs = 50'000;

int64_t SystemNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads FastNow between two system clock reads, about every 50 us for
// `duration`; returns the first reading outside the bracket (widened by
// the tolerance), or an empty string.
std::string FirstStray(std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    const int64_t before = SystemNs();
    const int64_t fast = absl::ToUnixNanos(FastNow());
    const int64_t after = SystemNs();
    if (fast < before - kToleranceNs || fast > after + kToleranceNs) {
      return absl::StrCat("FastNow ", fast, " ns, system clock ", before,
                          " .. ", after, " ns");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return "";
}

// Through the calibration (the first 10 ms), its refinement (100 ms later)
// and a re-anchor (1 s after that), on several threads at once: each
// reading lies where the system clock says it should.
TEST(FastClockTest, FollowsTheSystemClockThroughCalibrationAndReanchors) {
  std::vector<std::string> strays(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < strays.size(); ++t) {
    threads.emplace_back([&strays, t] {
      strays[t] = FirstStray(std::chrono::milliseconds(1400));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& stray : strays) EXPECT_EQ(stray, "");
}

bool KernelClocksourceIsTsc() {
  std::ifstream in(
      "/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  return static_cast<bool>(in >> source) && source == "tsc";
}

TEST(FastClockTest, ScalesTheCounterExactlyWhereTheKernelKeepsTimeWithIt) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  while (std::chrono::steady_clock::now() < end) (void)FastNow();
#if defined(__x86_64__)
  EXPECT_EQ(FastNowUsesTsc(), KernelClocksourceIsTsc());
#else
  EXPECT_FALSE(FastNowUsesTsc());
#endif
}

}  // namespace
}  // namespace relay
