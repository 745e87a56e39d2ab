#include "runtime/env_switch.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace relay {
namespace {

constexpr char kName[] = "RELAY_ENV_SWITCH_TEST";

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

}  // namespace
}  // namespace relay
