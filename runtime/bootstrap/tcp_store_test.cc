#include "runtime/bootstrap/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "runtime/bootstrap/auth.h"
#include "runtime/bootstrap/socket.h"
#include "runtime/bootstrap/store_protocol.h"
#include "runtime/bootstrap/tcp_store_server.h"
#include "runtime/store.h"

namespace relay {
namespace {

namespace proto = store_protocol;

constexpr char kToken[] = "test-token";

class TcpStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = 0,
                                         .token = kToken,
                                         .handshake_timeout =
                                             absl::Milliseconds(500)});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::shared_ptr<TcpStore> Client(std::string token = kToken) {
    auto store = TcpStore::Connect({.host = "127.0.0.1",
                                    .port = server_->port(),
                                    .token = std::move(token),
                                    .connect_timeout = absl::Seconds(5)});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *store : nullptr;
  }

  // A raw connection that has passed the handshake (or not, if `token` is
  // wrong), for speaking the protocol byte by byte.
  Socket RawClient(bool authenticate) {
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    absl::StatusOr<Socket> s =
        Socket::Connect("127.0.0.1", server_->port(), deadline);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!authenticate) return *std::move(s);
    std::string hello(4 + proto::kNonceBytes, '\0');
    EXPECT_TRUE(s->RecvAll(hello.data(), hello.size(), deadline).ok());
    const std::string mine = RandomBytes(proto::kNonceBytes);
    EXPECT_TRUE(s->SendAll(absl::StrCat("RLY1", mine,
                                        Proof(ProofRole::kClient, kToken,
                                              hello.substr(4), mine)),
                           deadline)
                    .ok());
    std::string proof(proto::kProofBytes, '\0');
    EXPECT_TRUE(s->RecvAll(proof.data(), proof.size(), deadline).ok());
    return *std::move(s);
  }

  // True once the server has closed `s` (reads EOF) within 5 s.
  static bool ClosedByServer(Socket& s) {
    char buf[256];
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    for (;;) {
      absl::Status st = s.RecvAll(buf, 1, deadline);
      if (st.code() == absl::StatusCode::kUnavailable) return true;
      if (!st.ok()) return false;  // Timed out: still open.
    }
  }

  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, SetGetAddDelete) {
  auto store = Client();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Set("a", std::string("x\0y", 3)).ok());
  EXPECT_EQ(*store->Get("a", absl::Seconds(1)), std::string("x\0y", 3));
  ASSERT_TRUE(store->Set("a", "overwritten").ok());
  EXPECT_EQ(*store->Get("a", absl::Seconds(1)), "overwritten");
  EXPECT_EQ(*store->Add("n", 5), 5);
  EXPECT_EQ(*store->Add("n", -7), -2);
  EXPECT_EQ(*store->Get("n", absl::Seconds(1)), "-2");
  EXPECT_TRUE(store->Delete("a").ok());
  EXPECT_EQ(store->Delete("a").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Get("a", absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const std::string big(3 << 20, 'z');
  ASSERT_TRUE(store->Set("big", big).ok());
  EXPECT_EQ(*store->Get("big", absl::Seconds(1)), big);
}

// DeletePrefix removes exactly the keys under the prefix.
TEST_F(TcpStoreTest, DeletePrefixRemovesThatSubtreeOnly) {
  auto store = Client();
  ASSERT_NE(store, nullptr);
  for (const char* key : {"split/1/a", "split/1/b", "split/10/a", "other"}) {
    ASSERT_TRUE(store->Set(key, "v").ok());
  }
  ASSERT_TRUE(store->DeletePrefix("split/1/").ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      store->Get("split/1/a", absl::Milliseconds(50)).status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      store->Get("split/1/b", absl::Milliseconds(50)).status()));
  EXPECT_TRUE(store->Get("split/10/a", absl::Seconds(1)).ok());
  EXPECT_TRUE(store->Get("other", absl::Seconds(1)).ok());
}

TEST_F(TcpStoreTest, BadInputIsInvalidArgumentAndCountersAreChecked) {
  auto store = Client();
  EXPECT_EQ(store->Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->Set("text", "not a number").ok());
  EXPECT_EQ(store->Add("text", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->Set("max", absl::StrCat(INT64_MAX)).ok());
  EXPECT_EQ(store->Add("max", 1).status().code(),
            absl::StatusCode::kOutOfRange);
  // The connection survives error replies.
  EXPECT_EQ(*store->Add("fresh", 3), 3);
}

TEST_F(TcpStoreTest, GetWaitsForSetAndTimesOutOnTime) {
  auto store = Client();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    auto other = Client();
    ASSERT_TRUE(other->Set("late", "here").ok());
  });
  EXPECT_EQ(*store->Get("late", absl::Seconds(10)), "here");
  setter.join();

  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> missing =
      store->Get("never", absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("never"), std::string::npos);
  EXPECT_GE(took, absl::Milliseconds(195));
  EXPECT_LT(took, absl::Milliseconds(300));
}

TEST_F(TcpStoreTest, MultiGetReturnsEveryValueInOrder) {
  auto store = Client();
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(absl::StrCat("rank/", i));
  std::thread setter([&] {
    auto other = Client();
    for (int i = 49; i >= 0; --i) {
      ASSERT_TRUE(other->Set(keys[i], absl::StrCat("addr", i)).ok());
    }
  });
  absl::StatusOr<std::vector<std::string>> values =
      store->MultiGet(keys, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  for (int i = 0; i < 50; ++i) EXPECT_EQ((*values)[i], absl::StrCat("addr", i));
}

TEST_F(TcpStoreTest, PrefixStoreScopesKeysOverTcp) {
  std::shared_ptr<Store> base = Client();
  PrefixStore a(base, "a/"), b(base, "b/");
  ASSERT_TRUE(a.Set("k", "1").ok());
  ASSERT_TRUE(b.Set("k", "2").ok());
  EXPECT_EQ(*base->Get("a/k", absl::Seconds(1)), "1");
  EXPECT_EQ(*b.Get("k", absl::Seconds(1)), "2");
  EXPECT_EQ((*a.MultiGet({"k"}, absl::Seconds(1)))[0], "1");
}

TEST_F(TcpStoreTest, ManyThreadsShareOneClient) {
  auto store = Client();
  constexpr int kThreads = 16;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Everyone blocks on the last thread's key while the others set theirs.
      ASSERT_TRUE(store->Set(absl::StrCat("t", t), "v").ok());
      EXPECT_TRUE(store->Get(absl::StrCat("t", kThreads - 1), absl::Seconds(10))
                      .ok());
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->Add("count", 1).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store->Get("count", absl::Seconds(1)),
            absl::StrCat(kThreads * 20));
}

TEST_F(TcpStoreTest, WrongTokenIsRejectedAndSeesNothing) {
  auto good = Client();
  ASSERT_TRUE(good->Set("secret", "s").ok());
  auto bad = TcpStore::Connect({.host = "127.0.0.1",
                                .port = server_->port(),
                                .token = "wrong",
                                .connect_timeout = absl::Seconds(5)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnauthenticated)
      << bad.status();
  EXPECT_EQ(server_->stats().rejected_token, 1);
  // An empty token is a token too, and also wrong here.
  EXPECT_EQ(TcpStore::Connect({.host = "127.0.0.1", .port = server_->port()})
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*good->Get("secret", absl::Seconds(1)), "s");
}

TEST_F(TcpStoreTest, ClientChecksTheServerKnowsTheToken) {
  // A server with another token: the client must not trust it either.
  auto impostor =
      TcpStoreServer::Start({.host = "127.0.0.1", .port = 0, .token = "other"});
  ASSERT_TRUE(impostor.ok());
  auto store = TcpStore::Connect({.host = "127.0.0.1",
                                  .port = (*impostor)->port(),
                                  .token = kToken,
                                  .connect_timeout = absl::Seconds(5)});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(TcpStoreTest, GarbageClientsAreDroppedAndTheJobGoesOn) {
  auto store = Client();
  ASSERT_TRUE(store->Set("k", "v").ok());
  std::mt19937 rng(1234);

  // Random bytes instead of a handshake.
  Socket noise = RawClient(/*authenticate=*/false);
  std::string junk(4096, '\0');
  for (char& c : junk) c = static_cast<char>(rng());
  ASSERT_TRUE(noise.SendAll(junk, absl::Now() + absl::Seconds(1)).ok());
  EXPECT_TRUE(ClosedByServer(noise));

  // Authenticated, then a frame claiming 4 GiB.
  Socket huge = RawClient(/*authenticate=*/true);
  ASSERT_TRUE(huge.SendAll("\xff\xff\xff\xff", absl::Now() + absl::Seconds(1))
                  .ok());
  EXPECT_TRUE(ClosedByServer(huge));

  // Authenticated, then well-framed random bodies.
  for (int i = 0; i < 20; ++i) {
    Socket fuzz = RawClient(/*authenticate=*/true);
    std::string body(1 + rng() % 64, '\0');
    for (char& c : body) c = static_cast<char>(rng());
    body[0] = static_cast<char>(5 + rng() % 250);  // Not a valid op.
    std::string frame(4, '\0');
    frame[0] = static_cast<char>(body.size());
    ASSERT_TRUE(
        fuzz.SendAll(frame + body, absl::Now() + absl::Seconds(1)).ok());
    EXPECT_TRUE(ClosedByServer(fuzz));
  }

  // Silent after connecting: dropped at the handshake deadline.
  Socket silent = RawClient(/*authenticate=*/false);
  EXPECT_TRUE(ClosedByServer(silent));

  const TcpStoreServer::Stats stats = server_->stats();
  EXPECT_EQ(stats.dropped_malformed, 21);
  EXPECT_EQ(stats.rejected_token, 2);
  // The real client never noticed.
  EXPECT_EQ(*store->Get("k", absl::Seconds(1)), "v");
  EXPECT_EQ(*store->Add("c", 1), 1);
}

TEST_F(TcpStoreTest, LostServerIsUnavailable) {
  auto store = Client();
  ASSERT_TRUE(store->Set("k", "v").ok());
  std::thread waiter([&] {
    absl::StatusOr<std::string> r = store->Get("never", absl::Seconds(30));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  });
  absl::SleepFor(absl::Milliseconds(100));
  server_.reset();
  waiter.join();
  // Later calls fail at once rather than waiting for a server that is gone.
  const absl::Time start = absl::Now();
  EXPECT_EQ(store->Set("k", "v").code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(TcpStoreConnectTest, NoServerIsDeadlineExceededOnTime) {
  // Bind and close to find a port that is (very likely) free.
  int port = 0;
  {
    auto l = Listener::Bind("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    port = l->port();
  }
  const absl::Time start = absl::Now();
  auto store = TcpStore::Connect({.host = "127.0.0.1",
                                  .port = port,
                                  .token = kToken,
                                  .connect_timeout = absl::Milliseconds(300)});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
}

TEST(TcpStoreConnectTest, BadAddressesAreInvalidArgument) {
  EXPECT_EQ(TcpStoreServer::Start({.host = "no such host.invalid"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpStoreServer::Start({.host = "127.0.0.1", .port = 70000})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TcpStore::Connect({.host = "", .port = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Verifies that a server being destroyed keeps serving its connected
// clients until they hang up (the job's store host exits first, the others
// still read failures from it), and no longer than its linger time.
// CPU seconds this process has used (all threads).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Idle connections that never answer the challenge (another local user's)
// cannot keep a rank out or make the server spin: past max_unauthenticated
// the oldest are dropped, and when accept() runs out of file descriptors
// (the limit lowered here, as a rank at `ulimit -n 1024` with a flood would
// be) the server frees one and pauses instead of polling the readable
// listening socket in a loop. Before the fix the server thread burned a
// core and a real client got no greeting in time.
TEST(TcpStoreServerTest, AFloodOfIdleConnectionsNeitherStarvesNorSpins) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = 0,
                                       .token = kToken,
                                       .handshake_timeout = absl::Seconds(30),
                                       .max_unauthenticated = 64});
  ASSERT_TRUE(server.ok()) << server.status();
  // Room for about 300 more descriptors: the flood's client ends and the
  // server's accepted ends share this process's table, so the server runs
  // out of descriptors long before the flood's 1,000 connections are in.
  int highest = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fcntl(fd, F_GETFD) != -1) highest = fd;
  }
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(highest + 300);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<FileDescriptor> flood;
  for (int k = 0; k < 1000; ++k) {
    FileDescriptor fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    if (!fd.valid()) break;  // EMFILE on this side too: enough.
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    flood.push_back(std::move(fd));
  }
  ASSERT_GT(flood.size(), 100u);
  absl::SleepFor(absl::Milliseconds(300));  // The server takes what it can.
  const double cpu_before = ProcessCpuSeconds();
  absl::SleepFor(absl::Seconds(1));
  const double idle_cpu = ProcessCpuSeconds() - cpu_before;
  EXPECT_LT(idle_cpu, 0.3) << "the store spins under the flood";
  // A real client still gets in (its own socket needs a descriptor here:
  // ten of the flood's go).
  flood.resize(flood.size() - 10);
  const absl::Time start = absl::Now();
  auto client = TcpStore::Connect({.host = "127.0.0.1",
                                   .port = (*server)->port(),
                                   .token = kToken,
                                   .connect_timeout = absl::Seconds(10)});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Set("k", "v").ok());
  absl::StatusOr<std::string> got = (*client)->Get("k", absl::Seconds(5));
  EXPECT_TRUE(got.ok() && *got == "v") << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_GT((*server)->stats().evicted, 0);
  flood.clear();
  client->reset();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

TEST(TcpStoreServerTest, LingersUntilClientsHangUpOrTimeRunsOut) {
  for (const bool hang_up : {true, false}) {
    SCOPED_TRACE(hang_up ? "client hangs up" : "client stays");
    auto server = TcpStoreServer::Start(
        {.host = "127.0.0.1", .port = 0, .token = kToken,
         .linger = hang_up ? absl::Seconds(30) : absl::Milliseconds(300)});
    ASSERT_TRUE(server.ok()) << server.status();
    auto client = TcpStore::Connect({.host = "127.0.0.1",
                                     .port = (*server)->port(),
                                     .token = kToken});
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Set("failure/2", "lost").ok());
    const absl::Time start = absl::Now();
    std::thread destroy([&] { server->reset(); });
    absl::SleepFor(absl::Milliseconds(100));
    if (hang_up) {
      // Still served while it lingers; then the last client leaves.
      EXPECT_EQ(*(*client)->Get("failure/2", absl::Seconds(1)), "lost");
      EXPECT_TRUE((*client)->Add("failures", 1).ok());
      client->reset();
      destroy.join();
      EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    } else {
      destroy.join();
      EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
      EXPECT_LT(absl::Now() - start, absl::Seconds(5));
      EXPECT_EQ((*client)->Set("k", "v").code(), absl::StatusCode::kUnavailable);
    }
  }
  EXPECT_EQ(TcpStoreServer::Start({.linger = -absl::Seconds(1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TcpStoreHostTest, HostRunsTheServerAndOthersJoin) {
  auto host = TcpStore::Host({.host = "127.0.0.1", .port = 0, .token = "t"});
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_NE((*host)->server(), nullptr);
  auto peer = TcpStore::Connect(
      {.host = "127.0.0.1", .port = (*host)->port(), .token = "t"});
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_TRUE((*host)->Set("x", "1").ok());
  EXPECT_EQ(*(*peer)->Get("x", absl::Seconds(1)), "1");
}

}  // namespace
}  // namespace relay
