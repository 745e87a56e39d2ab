// Verifies RELAY_METRICS_PORT end to end: CreateCommunicatorFromEnvironment
// starts the scrape endpoint, it reports the collectives the communicator
// ran, and it stops with the communicator.
#include <stdlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/bootstrap/socket.h"
#include "testing/http_client.h"

namespace relay {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int FreePort() {
  absl::StatusOr<Listener> l = Listener::Bind("127.0.0.1", 0);
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? l->port() : 0;
}

absl::StatusOr<std::string> Scrape(int port) {
  return HttpExchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
}

TEST(MetricsEndpointTest, ServesTheCommunicatorsMetricsWhileItLives) {
  const int metrics_port = FreePort();
  ASSERT_GT(metrics_port, 0);
  setenv("RELAY_RANK", "0", 1);
  setenv("RELAY_WORLD_SIZE", "1", 1);
  setenv("RELAY_STORE_PORT", absl::StrCat(FreePort()).c_str(), 1);
  setenv("RELAY_METRICS_PORT", absl::StrCat(metrics_port).c_str(), 1);
  {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateCommunicatorFromEnvironment({}, absl::Seconds(30), "loopback");
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> in = {1, 2, 3}, out(3);
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<Request> r = (*comm)->AllReduce(
          ConstBuffer::Of(in), Buffer::Of(out), ReduceOp::kSum);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(r->Wait().ok());
    }
    absl::StatusOr<std::string> page = Scrape(metrics_port);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_THAT(*page, StartsWith("HTTP/1.1 200 OK"));
    EXPECT_THAT(*page, HasSubstr("relay_collective_operations_total{rank=\"0\","
                                 "size=\"1\",transport=\"loopback\","
                                 "collective=\"all_reduce\"} 2"));
    // A second communicator asking for the same port is refused, by name
    // (its job store on a port of its own).
    setenv("RELAY_STORE_PORT", absl::StrCat(FreePort()).c_str(), 1);
    absl::StatusOr<std::unique_ptr<Communicator>> clash =
        CreateCommunicatorFromEnvironment({}, absl::Seconds(30), "loopback");
    EXPECT_FALSE(clash.ok());
    EXPECT_THAT(std::string(clash.status().message()), HasSubstr("RELAY_METRICS_PORT"));
  }
  // Gone with the communicator.
  EXPECT_FALSE(Scrape(metrics_port).ok());
}

}  // namespace
}  // namespace relay
