// File: testing/http_client.h
//
// HttpExchange: what a test needs to talk to relay's HTTP endpoint
// (runtime/bootstrap/metrics_server.h): connect, send raw request bytes,
// read until the server closes the connection. Raw on purpose, so tests can
// send requests no real client would.
//
// Example:
//   absl::StatusOr<std::string> r =
//       HttpExchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
//   // *r == "HTTP/1.1 200 OK\r\n..."
#ifndef RELAY_TESTING_HTTP_CLIENT_H_
#define RELAY_TESTING_HTTP_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace relay {

// Connects to 127.0.0.1:port (no retry: Unavailable if nothing listens),
// sends `request` (nothing if empty) and returns every byte the server
// sent before closing, or what arrived by `timeout`.
absl::StatusOr<std::string> HttpExchange(
    int port, absl::string_view request,
    absl::Duration timeout = absl::Seconds(10));

// The body of a response: what follows the blank line ("" if none).
std::string HttpBody(const std::string& response);

}  // namespace relay

#endif  // RELAY_TESTING_HTTP_CLIENT_H_
