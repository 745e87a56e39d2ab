#include "runtime/config.h"

#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

// Sets a variable for one scope.
class Env {
 public:
  Env(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
  }
  ~Env() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ConfigTest, SwitchReadsZeroOneAndTheDefault) {
  constexpr char kName[] = "RELAY_UCX_PROGRESS_THREAD";
  for (bool default_value : {false, true}) {
    unsetenv(kName);
    EXPECT_EQ(*ReadSwitch(kName, default_value), default_value);
    {
      Env e(kName, "");
      EXPECT_EQ(*ReadSwitch(kName, default_value), default_value);
    }
    {
      Env e(kName, "1");
      EXPECT_TRUE(*ReadSwitch(kName, default_value));
    }
    {
      Env e(kName, "0");
      EXPECT_FALSE(*ReadSwitch(kName, default_value));
    }
  }
  for (const char* bad : {"yes", "true", "2", " 1", "01"}) {
    Env e(kName, bad);
    absl::StatusOr<bool> got = ReadSwitch(kName, true);
    ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(got.status().message(), kName));
    EXPECT_TRUE(absl::StrContains(got.status().message(),
                                  std::string("'") + bad + "'"));
  }
}

// A count's range is the table's: both ends taken, past them refused.
TEST(ConfigTest, CountTakesTheTablesRange) {
  constexpr char kName[] = "RELAY_NCCL_P2P_CHANNELS";  // 0 to 1024.
  unsetenv(kName);
  EXPECT_EQ(*ReadCount(kName, 64), 64u);
  for (const char* good : {"0", "1024", "7"}) {
    Env e(kName, good);
    EXPECT_EQ(*ReadCount(kName, 64), std::stoull(good));
  }
  for (const char* bad : {"1025", "-1", "64k", " 8", "+8", "1e3"}) {
    Env e(kName, bad);
    absl::StatusOr<uint64_t> got = ReadCount(kName, 64);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(got.status().message(), "0 to 1024"))
        << got.status();
  }
}

TEST(ConfigTest, SecondsAndChoices) {
  {
    Env e("RELAY_TIMEOUT", "2.5");
    EXPECT_EQ(*ReadSeconds("RELAY_TIMEOUT", absl::Minutes(10)),
              absl::Milliseconds(2500));
  }
  for (const char* bad : {"0", "-3", "soon", "inf", "nan"}) {
    Env e("RELAY_TIMEOUT", bad);
    EXPECT_EQ(ReadSeconds("RELAY_TIMEOUT", absl::Minutes(10)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  {
    Env e("RELAY_CHECK_LEVEL", "fingerprint");
    EXPECT_EQ(*ReadChoice("RELAY_CHECK_LEVEL", "none"), "fingerprint");
  }
  Env e("RELAY_CHECK_LEVEL", "paranoid");
  absl::StatusOr<std::string> got = ReadChoice("RELAY_CHECK_LEVEL", "none");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(got.status().message(), "none, fingerprint"));
}

// Reading a name the table lacks, or as another kind, is a bug in relay:
// Internal, whatever the environment holds.
TEST(ConfigTest, UndeclaredNamesAreRefused) {
  Env e("RELAY_NOT_A_SETTING", "1");
  EXPECT_EQ(ReadSwitch("RELAY_NOT_A_SETTING", false).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(ReadCount("RELAY_UCX_PROGRESS_THREAD", 1).status().code(),
            absl::StatusCode::kInternal);
}

// Every row is complete, named RELAY_*, once; the generated page lists
// every one.
TEST(ConfigTest, TheTableIsWellFormedAndDocumented) {
  std::set<std::string> names;
  const std::string page = ConfigurationMarkdown();
  for (const Setting& s : Settings()) {
    EXPECT_TRUE(absl::StartsWith(s.name, "RELAY_")) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
    EXPECT_GT(std::string(s.description).size(), 10u) << s.name;
    EXPECT_GT(std::string(s.default_text).size(), 0u) << s.name;
    EXPECT_GT(std::string(s.group).size(), 0u) << s.name;
    EXPECT_TRUE(absl::StrContains(page, absl::StrCat("`", s.name, "`")))
        << s.name;
    EXPECT_EQ(FindSetting(s.name), &s);
  }
  EXPECT_EQ(FindSetting("RELAY_NOPE"), nullptr);
}

}  // namespace
}  // namespace relay
