// The job store under launchers that set no RELAY_TOKEN (torchrun, mpirun,
// srun): ranks on one host share a token only this user can read, so a
// process without it is refused; a job across hosts without a token is
// refused unless RELAY_ALLOW_OPEN_STORE=1 says so.
#include <stdlib.h>

#include <string>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/bootstrap/job_store.h"
#include "runtime/bootstrap/socket.h"
#include "runtime/bootstrap/tcp_store.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

int FreePort() {
  absl::StatusOr<Listener> l = Listener::Bind("127.0.0.1", 0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->port() : 0;
}

LaunchEnvironment Torchrun(int rank, int size, int local_size,
                           std::string host, int port) {
  LaunchEnvironment env;
  env.launcher = "torchrun";
  env.rank = rank;
  env.size = size;
  env.local_rank = local_size == size ? rank : 0;
  env.local_size = local_size;
  env.store_host = std::move(host);
  env.store_port = port;
  return env;  // No token: torchrun sets none.
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/job_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    runtime_ = tmpl;
    setenv("XDG_RUNTIME_DIR", runtime_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("XDG_RUNTIME_DIR");
    unsetenv("RELAY_ALLOW_OPEN_STORE");
    std::system(absl::StrCat("rm -rf ", runtime_).c_str());
  }
  std::string runtime_;
};

// Rank 0's store on a free port. A port found free can be taken before
// rank 0 binds it (other tests run beside this one), so a few tries. Rank
// 0's ConnectJobStore returns once its server is up, so the other ranks
// connect after it on this thread.
absl::StatusOr<std::shared_ptr<TcpStore>> HostRankZero(
    const std::function<LaunchEnvironment(int port)>& env, int* port) {
  absl::StatusOr<std::shared_ptr<TcpStore>> store;
  for (int attempt = 0; attempt < 5; ++attempt) {
    *port = FreePort();
    store = ConnectJobStore(env(*port), absl::Seconds(10));
    if (store.ok() ||
        !absl::StrContains(store.status().message(), "already in use")) {
      break;
    }
  }
  return store;
}

// One host, no token: the ranks meet, and a process that does not know the
// token rank 0 wrote (another local user, or anything with an empty token,
// as every process had before) is refused.
TEST_F(JobStoreTest, OneHostWithoutATokenSharesAPrivateOne) {
  int port = 0;
  absl::StatusOr<std::shared_ptr<TcpStore>> rank0 = HostRankZero(
      [](int p) { return Torchrun(0, 2, 2, "127.0.0.1", p); }, &port);
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  absl::StatusOr<std::shared_ptr<TcpStore>> rank1 = ConnectJobStore(
      Torchrun(1, 2, 2, "127.0.0.1", port), absl::Seconds(10));
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  ASSERT_TRUE((*rank0)->Set("k", "v").ok());
  absl::StatusOr<std::string> got = (*rank1)->Get("k", absl::Seconds(5));
  EXPECT_TRUE(got.ok() && *got == "v") << got.status();
  absl::StatusOr<std::shared_ptr<TcpStore>> intruder = TcpStore::Connect(
      {.host = "127.0.0.1", .port = port, .token = "",
       .connect_timeout = absl::Seconds(5)});
  EXPECT_TRUE(absl::IsUnauthenticated(intruder.status())) << intruder.status();
}

// Across hosts, no token: refused before anything listens, naming the fix.
TEST_F(JobStoreTest, AcrossHostsWithoutATokenIsRefused) {
  absl::StatusOr<std::shared_ptr<TcpStore>> store = ConnectJobStore(
      Torchrun(0, 2, 1, "0.0.0.0", FreePort()), absl::Seconds(5));
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument)
      << store.status();
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("RELAY_TOKEN"));
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("RELAY_ALLOW_OPEN_STORE"));
  // With the opt-out it runs (and warns once).
  setenv("RELAY_ALLOW_OPEN_STORE", "1", 1);
  int port = 0;
  absl::StatusOr<std::shared_ptr<TcpStore>> rank0 = HostRankZero(
      [](int p) { return Torchrun(0, 2, 1, "0.0.0.0", p); }, &port);
  EXPECT_TRUE(rank0.ok()) << rank0.status();
  absl::StatusOr<std::shared_ptr<TcpStore>> rank1 = ConnectJobStore(
      Torchrun(1, 2, 1, "0.0.0.0", port), absl::Seconds(10));
  EXPECT_TRUE(rank1.ok()) << rank1.status();
}

}  // namespace
}  // namespace relay
