// File: runtime/bootstrap/store_protocol.h
//
// The TCP store's wire format: length-prefixed binary frames, little-endian,
// encoded and decoded here and nowhere else. Every decoder checks every field
// against the bytes it actually has; a frame that does not parse exactly is
// rejected (the server then drops the client).
//
// Connection:
//   server -> client  "RLY1" | server_nonce[32]
//   client -> server  "RLY1" | client_nonce[32] | client_proof[32]
//   server -> client  server_proof[32]            (only if the proof matched)
// Proofs are HMAC-SHA256 over the two nonces keyed with the job token
// (auth.h), so the token never crosses the wire and each side proves it
// knows it. Then request/response frames, one request in flight per
// connection:
//   frame    = u32 body_size | body            (body_size <= kMaxFrameBytes)
//   request  = u8 op | op fields
//     kSet     bytes key | bytes value
//     kGet     u64 timeout_ms | u32 n | n x bytes key   (all keys, or timeout)
//     kAdd     bytes key | i64 delta
//     kDelete  bytes key
//   response = u8 code | code-specific fields
//     kOk        u32 n | n x bytes value (kGet) / i64 (kAdd) / nothing
//     otherwise  bytes message (an absl::StatusCode and its text)
//   bytes    = u32 size | size bytes
#ifndef RELAY_RUNTIME_BOOTSTRAP_STORE_PROTOCOL_H_
#define RELAY_RUNTIME_BOOTSTRAP_STORE_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace relay {
namespace store_protocol {

inline constexpr absl::string_view kMagic = "RLY1";
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;
// Bounds one frame (and so one key or value); a bigger length prefix is
// garbage, not a reason to allocate.
inline constexpr uint32_t kMaxFrameBytes = 16u << 20;
// Bounds the keys of one kGet.
inline constexpr uint32_t kMaxKeysPerGet = 1u << 16;

enum class Op : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kDelete = 4,
  kDeletePrefix = 5,  // Every key starting with keys[0] (which may be "").
};

struct Request {
  Op op = Op::kSet;
  std::vector<std::string> keys;  // One, except for kGet.
  std::string value;              // kSet.
  int64_t delta = 0;              // kAdd.
  uint64_t timeout_ms = 0;        // kGet.
};

struct Response {
  absl::Status status;              // The code and message crossing the wire.
  std::vector<std::string> values;  // kGet.
  int64_t counter = 0;              // kAdd.
};

// A whole frame, length prefix included.
std::string EncodeRequest(const Request& request);
std::string EncodeResponse(Op op, const Response& response);

// Decode a frame body (without its length prefix). InvalidArgument naming
// the first field that does not fit.
absl::StatusOr<Request> DecodeRequest(absl::string_view body);
absl::StatusOr<Response> DecodeResponse(Op op, absl::string_view body);

// Reads a frame's length prefix; InvalidArgument above kMaxFrameBytes or 0.
absl::StatusOr<uint32_t> DecodeFrameSize(absl::string_view prefix4);

}  // namespace store_protocol
}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_STORE_PROTOCOL_H_
