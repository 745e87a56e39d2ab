// File: testing/fuzz/store_response_fuzzer.cc
//
// Fuzzes what a TCP store client decodes from the server: a response body
// to one of the four requests (the first input byte picks which; the rest
// is the body). Properties: refusals are InvalidArgument; a body that
// decodes re-encodes to exactly the same bytes; a decoded status code is
// one of Abseil's.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/bootstrap/store_protocol.h"
#include "testing/fuzz/fuzz_check.h"

namespace proto = relay::store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const proto::Op op = static_cast<proto::Op>(1 + data[0] % 4);
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  absl::StatusOr<proto::Response> response = proto::DecodeResponse(op, body);
  if (!response.ok()) {
    RELAY_FUZZ_CHECK(absl::IsInvalidArgument(response.status()));
    return 0;
  }
  RELAY_FUZZ_CHECK(static_cast<int>(response->status.code()) >= 0 &&
                   static_cast<int>(response->status.code()) <= 16);
  RELAY_FUZZ_CHECK(response->values.size() <= proto::kMaxKeysPerGet);
  const std::string again = proto::EncodeResponse(op, *response);
  RELAY_FUZZ_CHECK(again.size() == 4 + body.size());
  RELAY_FUZZ_CHECK(absl::string_view(again).substr(4) == body);
  return 0;
}
