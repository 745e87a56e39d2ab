#include "runtime/bootstrap/host_token.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

// Each test gets a private runtime directory of its own.
class HostTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/host_token_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    runtime_ = tmpl;
    ASSERT_EQ(setenv("XDG_RUNTIME_DIR", runtime_.c_str(), 1), 0);
  }
  void TearDown() override {
    unsetenv("XDG_RUNTIME_DIR");
    std::system(absl::StrCat("rm -rf ", runtime_).c_str());
  }
  std::string runtime_;
};

TEST_F(HostTokenTest, OtherRanksReadWhatRankZeroWrote) {
  absl::StatusOr<std::unique_ptr<HostToken>> made = HostToken::Create(4321);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->token().size(), 64u);
  struct stat st {};
  ASSERT_EQ(stat((*made)->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(HostTokenDirectory().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  absl::StatusOr<std::string> read =
      ReadHostToken(4321, absl::Now() + absl::Seconds(1), "");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, (*made)->token());
  // Another job's token differs.
  absl::StatusOr<std::unique_ptr<HostToken>> other = HostToken::Create(4322);
  ASSERT_TRUE(other.ok());
  EXPECT_NE((*other)->token(), (*made)->token());
  // The file goes with rank 0's object.
  const std::string path = (*made)->path();
  made->reset();
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST_F(HostTokenTest, ReaderWaitsForANewTokenAndTimesOut) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> none =
      ReadHostToken(4323, start + absl::Milliseconds(200), "");
  EXPECT_TRUE(absl::IsDeadlineExceeded(none.status())) << none.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  // A stale token (the store refused it) is not taken again; the new one is.
  absl::StatusOr<std::unique_ptr<HostToken>> old = HostToken::Create(4323);
  ASSERT_TRUE(old.ok());
  const std::string stale = (*old)->token();
  std::unique_ptr<HostToken> fresh;
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    fresh = *HostToken::Create(4323);
  });
  absl::StatusOr<std::string> read =
      ReadHostToken(4323, absl::Now() + absl::Seconds(5), stale);
  writer.join();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, fresh->token());
}

TEST_F(HostTokenTest, ADirectoryOthersCanReadIsRefused) {
  ASSERT_EQ(mkdir(HostTokenDirectory().c_str(), 0755), 0);
  absl::StatusOr<std::unique_ptr<HostToken>> made = HostToken::Create(4324);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition)
      << made.status();
  EXPECT_NE(made.status().message().find("not private"),
            absl::string_view::npos);
}

}  // namespace
}  // namespace relay
