#include "runtime/env_var.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

constexpr char kName[] = "RELAY_ENV_VAR_TEST";

// Verifies the default where the variable is unset or empty, and 0 and 1
// either way round from both defaults.
TEST(ReadEnvSwitchTest, ReadsZeroOneAndTheDefault) {
  for (bool default_value : {false, true}) {
    unsetenv(kName);
    absl::StatusOr<bool> got = ReadEnvSwitch(kName, default_value, "x");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, default_value);
    setenv(kName, "", 1);
    got = ReadEnvSwitch(kName, default_value, "x");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, default_value);
    setenv(kName, "1", 1);
    got = ReadEnvSwitch(kName, default_value, "x");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got);
    setenv(kName, "0", 1);
    got = ReadEnvSwitch(kName, default_value, "x");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_FALSE(*got);
  }
  unsetenv(kName);
}

// Verifies that anything else is InvalidArgument naming the variable, its
// value and what it switches.
TEST(ReadEnvSwitchTest, RefusesAnythingElse) {
  for (const char* bad : {"yes", "true", "on", "2", "-1", " 1", "1 ", "01"}) {
    setenv(kName, bad, 1);
    absl::StatusOr<bool> got = ReadEnvSwitch(kName, true, "the test thing");
    ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    const std::string message(got.status().message());
    EXPECT_NE(message.find(kName), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("the test thing"), std::string::npos) << message;
  }
  unsetenv(kName);
}

// Verifies a count: the default where unset or empty (even out of range),
// the value where it is a whole number in range, both ends included.
TEST(ReadEnvCountTest, ReadsCountsInRange) {
  unsetenv(kName);
  absl::StatusOr<uint64_t> got = ReadEnvCount(kName, 0, 1, 8, "x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 0u);
  setenv(kName, "", 1);
  got = ReadEnvCount(kName, 5, 1, 8, "x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 5u);
  for (const auto& [text, value] :
       std::vector<std::pair<const char*, uint64_t>>{{"1", 1}, {"8", 8}, {"3", 3}, {"007", 7}}) {
    setenv(kName, text, 1);
    got = ReadEnvCount(kName, 0, 1, 8, "x");
    ASSERT_TRUE(got.ok()) << text << ": " << got.status();
    EXPECT_EQ(*got, value) << text;
  }
  setenv(kName, "18446744073709551615", 1);
  got = ReadEnvCount(kName, 0, 0, UINT64_MAX, "x");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, UINT64_MAX);
  unsetenv(kName);
}

// Verifies that anything else is InvalidArgument naming the variable, its
// value, the range and what it counts.
TEST(ReadEnvCountTest, RefusesAnythingElse) {
  for (const char* bad : {"0", "9", "-1", "+3", " 3", "3 ", "3k", "lots",
                          "0x4", "18446744073709551616"}) {
    setenv(kName, bad, 1);
    absl::StatusOr<uint64_t> got = ReadEnvCount(kName, 2, 1, 8, "test units");
    ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    const std::string message(got.status().message());
    EXPECT_NE(message.find(kName), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("'") + bad + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("from 1 to 8"), std::string::npos) << message;
    EXPECT_NE(message.find("test units"), std::string::npos) << message;
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace relay
