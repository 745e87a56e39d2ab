// File: testing/fuzz/http_request_fuzzer.cc
//
// Fuzzes ParseHttpRequestLine (runtime/bootstrap/metrics_server.h): the
// metrics endpoint reads it from whoever connects. Properties: refusals
// are InvalidArgument; an accepted line has a non-empty method and a path
// that starts with '/' and holds only visible ASCII and no query string.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "runtime/bootstrap/metrics_server.h"
#include "testing/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view head(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<relay::HttpRequestLine> line = relay::ParseHttpRequestLine(head);
  if (!line.ok()) {
    RELAY_FUZZ_CHECK(absl::IsInvalidArgument(line.status()));
    return 0;
  }
  RELAY_FUZZ_CHECK(!line->method.empty());
  RELAY_FUZZ_CHECK(!line->path.empty() && line->path[0] == '/');
  for (char c : line->path) RELAY_FUZZ_CHECK(c > 0x20 && c < 0x7f && c != '?');
  for (char c : line->method) RELAY_FUZZ_CHECK(c > 0x20 && c < 0x7f);
  return 0;
}
