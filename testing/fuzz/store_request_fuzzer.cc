// File: testing/fuzz/store_request_fuzzer.cc
//
// Fuzzes what the TCP store server decodes from a client once the token
// handshake is done: a stream of length-prefixed request frames
// (runtime/bootstrap/store_protocol.h), read the way the server reads them.
// Properties: a frame size outside 1..kMaxFrameBytes is refused; a body
// that decodes re-encodes to exactly the same frame (nothing ignored,
// nothing invented); refusals are InvalidArgument.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/bootstrap/store_protocol.h"
#include "testing/fuzz/fuzz_check.h"

namespace proto = relay::store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view in(reinterpret_cast<const char*>(data), size);
  while (in.size() >= 4) {
    absl::StatusOr<uint32_t> frame = proto::DecodeFrameSize(in);
    if (!frame.ok()) {
      RELAY_FUZZ_CHECK(absl::IsInvalidArgument(frame.status()));
      return 0;  // The server drops the client.
    }
    RELAY_FUZZ_CHECK(*frame >= 1 && *frame <= proto::kMaxFrameBytes);
    if (in.size() - 4 < *frame) return 0;  // The server waits for more.
    const absl::string_view whole = in.substr(0, 4 + size_t{*frame});
    absl::StatusOr<proto::Request> request =
        proto::DecodeRequest(whole.substr(4));
    if (!request.ok()) {
      RELAY_FUZZ_CHECK(absl::IsInvalidArgument(request.status()));
      return 0;
    }
    RELAY_FUZZ_CHECK(!request->keys.empty());
    RELAY_FUZZ_CHECK(request->keys.size() <= proto::kMaxKeysPerGet);
    RELAY_FUZZ_CHECK(request->op == proto::Op::kGet ||
                     request->keys.size() == 1);
    RELAY_FUZZ_CHECK(proto::EncodeRequest(*request) == whole);
    in.remove_prefix(whole.size());
  }
  return 0;
}
