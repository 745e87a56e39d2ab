#include "runtime/bootstrap/metrics_server.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/time/clock.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/bootstrap/socket.h"
#include "testing/http_client.h"

namespace relay {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The whole response to `request`; "" (and a test failure) if the
// connection could not be made.
std::string Exchange(int port, absl::string_view request) {
  absl::StatusOr<std::string> r = HttpExchange(port, request);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : "";
}

// Verifies that a scrape gets the render function's current text, with
// Prometheus's content type and an exact Content-Length, once per request.
TEST(MetricsServerTest, ServesWhatRenderReturnsOnEachScrape) {
  std::atomic<int> renders{0};
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(
      {}, [&] { return absl::StrCat("relay_test_renders ", ++renders, "\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->host(), "127.0.0.1");
  EXPECT_GT((*server)->port(), 0);
  for (int i = 1; i <= 3; ++i) {
    const std::string r =
        Exchange((*server)->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK\r\n"));
    EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4"));
    const std::string want = absl::StrCat("relay_test_renders ", i, "\n");
    EXPECT_THAT(r, HasSubstr(absl::StrCat("Content-Length: ", want.size(), "\r\n")));
    EXPECT_EQ(HttpBody(r), want);
  }
  // A query string is ignored; HEAD gets the headers only.
  EXPECT_EQ(HttpBody(Exchange((*server)->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n")),
            "relay_test_renders 4\n");
  const std::string head = Exchange((*server)->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(HttpBody(head), "");
  EXPECT_EQ((*server)->scrapes(), 5u);
}

// Verifies the answers to requests that are not a scrape, and that the
// server keeps serving after each.
TEST(MetricsServerTest, RefusesWhatIsNotAScrapeAndKeepsServing) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start({}, [] { return std::string("ok 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(Exchange(port, "GET / HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 404 "));
  const std::string post = Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD\r\n"));
  EXPECT_THAT(Exchange(port, "hello\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(port, "GET /metrics SPDY/3\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  EXPECT_THAT(Exchange(port, std::string(20000, 'a')), StartsWith("HTTP/1.1 431 "));
  EXPECT_EQ(HttpBody(Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n")), "ok 1\n");
  EXPECT_EQ((*server)->scrapes(), 1u);
}

// Verifies that a client that connects and says nothing is dropped after
// the client timeout, and the next one is served.
TEST(MetricsServerTest, DropsAStalledClient) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(
      {.client_timeout = absl::Milliseconds(200)}, [] { return std::string("ok 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time start = absl::Now();
  EXPECT_THAT(Exchange((*server)->port(), "GET /metr"), StartsWith("HTTP/1.1 408 "));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(HttpBody(Exchange((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n")), "ok 1\n");
}

// Silent connections do not hold up a scrape: with 20 of them open (and 100,
// past the cap), a real scrape is answered at once, not after each silent
// one's 2 s timeout in turn (it waited 12.5 s and was then reset).
TEST(MetricsServerTest, SilentConnectionsDoNotBlindMonitoring) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start({}, [] { return std::string("ok 1\n"); });
  ASSERT_TRUE(server.ok()) << server.status();
  for (int silent : {20, 100}) {
    std::vector<Socket> idle;
    for (int k = 0; k < silent; ++k) {
      absl::StatusOr<Socket> s = Socket::Connect(
          "127.0.0.1", (*server)->port(), absl::Now() + absl::Seconds(5));
      ASSERT_TRUE(s.ok()) << s.status();
      idle.push_back(*std::move(s));
    }
    absl::SleepFor(absl::Milliseconds(50));  // All accepted.
    const absl::Time start = absl::Now();
    EXPECT_EQ(HttpBody(Exchange((*server)->port(),
                                "GET /metrics HTTP/1.1\r\n\r\n")),
              "ok 1\n")
        << silent << " silent connections";
    EXPECT_LT(absl::Now() - start, absl::Milliseconds(500))
        << silent << " silent connections";
  }
}

TEST(MetricsServerTest, RejectsBadOptions) {
  auto render = [] { return std::string(); };
  EXPECT_EQ(MetricsServer::Start({.port = 70000}, render).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({.client_timeout = absl::ZeroDuration()}, render)
                .status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A port already taken is Unavailable, naming the address.
  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Start({}, render);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<MetricsServer>> second =
      MetricsServer::Start({.port = (*first)->port()}, render);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(HttpRequestLineTest, ParsesAndRefuses) {
  absl::StatusOr<HttpRequestLine> ok = ParseHttpRequestLine("GET /metrics?a=b HTTP/1.1\r\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->method, "GET");
  EXPECT_EQ(ok->path, "/metrics");
  EXPECT_TRUE(ParseHttpRequestLine("HEAD / HTTP/1.0\n").ok());
  for (const char* bad :
       {"GET /metrics HTTP/1.1", "GET /metrics\r\n", " /metrics HTTP/1.1\r\n",
        "G(T /metrics HTTP/1.1\r\n", "GET metrics HTTP/1.1\r\n",
        "GET /me\x01trics HTTP/1.1\r\n", "GET /metrics HTTP/2\r\n",
        "GET  /metrics HTTP/1.1\r\n", ""}) {
    EXPECT_EQ(ParseHttpRequestLine(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace relay
