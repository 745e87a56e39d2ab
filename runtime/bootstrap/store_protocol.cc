#include "runtime/bootstrap/store_protocol.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/base/internal/endian.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace relay {
namespace store_protocol {
namespace {

class Writer {
 public:
  Writer() { out_.resize(4); }  // Room for the frame's size.
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    char b[4];
    absl::little_endian::Store32(b, v);
    out_.append(b, 4);
  }
  void U64(uint64_t v) {
    char b[8];
    absl::little_endian::Store64(b, v);
    out_.append(b, 8);
  }
  void Bytes(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  std::string Finish() && {
    absl::little_endian::Store32(out_.data(),
                                 static_cast<uint32_t>(out_.size() - 4));
    return std::move(out_);
  }

 private:
  std::string out_;
};

// Reads fields front to back; each getter fails (and the reader stays
// failed) when the field does not fit in what is left.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}

  bool U8(uint8_t* v) {
    if (in_.size() < 1) return false;
    *v = static_cast<uint8_t>(in_[0]);
    in_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (in_.size() < 4) return false;
    *v = absl::little_endian::Load32(in_.data());
    in_.remove_prefix(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = absl::little_endian::Load64(in_.data());
    in_.remove_prefix(8);
    return true;
  }
  bool Bytes(std::string* v) {
    uint32_t size = 0;
    if (!U32(&size) || in_.size() < size) return false;
    v->assign(in_.data(), size);
    in_.remove_prefix(size);
    return true;
  }
  bool AtEnd() const { return in_.empty(); }
  // Whether `n` length-prefixed fields could still fit: each takes at
  // least its 4-byte size. Checked before sizing a vector by a count read
  // off the wire, so a few bytes cannot make the decoder allocate for
  // tens of thousands of entries that are not there.
  bool CouldHoldFields(uint32_t n) const { return n <= in_.size() / 4; }

 private:
  absl::string_view in_;
};

absl::Status Malformed(absl::string_view what, absl::string_view field) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed store ", what, ": bad or missing ", field));
}

bool ValidOp(uint8_t op) {
  return op >= static_cast<uint8_t>(Op::kSet) &&
         op <= static_cast<uint8_t>(Op::kDeletePrefix);
}

}  // namespace

std::string EncodeRequest(const Request& request) {
  Writer w;
  w.U8(static_cast<uint8_t>(request.op));
  switch (request.op) {
    case Op::kSet:
      w.Bytes(request.keys.empty() ? "" : request.keys[0]);
      w.Bytes(request.value);
      break;
    case Op::kGet:
      w.U64(request.timeout_ms);
      w.U32(static_cast<uint32_t>(request.keys.size()));
      for (const std::string& key : request.keys) w.Bytes(key);
      break;
    case Op::kAdd:
      w.Bytes(request.keys.empty() ? "" : request.keys[0]);
      w.U64(static_cast<uint64_t>(request.delta));
      break;
    case Op::kDelete:
    case Op::kDeletePrefix:
      w.Bytes(request.keys.empty() ? "" : request.keys[0]);
      break;
  }
  return std::move(w).Finish();
}

absl::StatusOr<Request> DecodeRequest(absl::string_view body) {
  Reader r(body);
  uint8_t op = 0;
  if (!r.U8(&op) || !ValidOp(op)) return Malformed("request", "op");
  Request request;
  request.op = static_cast<Op>(op);
  std::string key;
  switch (request.op) {
    case Op::kSet:
      if (!r.Bytes(&key)) return Malformed("set", "key");
      if (!r.Bytes(&request.value)) return Malformed("set", "value");
      request.keys.push_back(std::move(key));
      break;
    case Op::kGet: {
      uint32_t n = 0;
      if (!r.U64(&request.timeout_ms)) return Malformed("get", "timeout");
      if (!r.U32(&n) || n == 0 || n > kMaxKeysPerGet ||
          !r.CouldHoldFields(n)) {
        return Malformed("get", "key count");
      }
      request.keys.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        if (!r.Bytes(&key)) return Malformed("get", "key");
        request.keys.push_back(std::move(key));
      }
      break;
    }
    case Op::kAdd: {
      uint64_t delta = 0;
      if (!r.Bytes(&key)) return Malformed("add", "key");
      if (!r.U64(&delta)) return Malformed("add", "delta");
      request.delta = static_cast<int64_t>(delta);
      request.keys.push_back(std::move(key));
      break;
    }
    case Op::kDelete:
    case Op::kDeletePrefix:
      if (!r.Bytes(&key)) return Malformed("delete", "key");
      request.keys.push_back(std::move(key));
      break;
  }
  if (!r.AtEnd()) return Malformed("request", "length (trailing bytes)");
  return request;
}

std::string EncodeResponse(Op op, const Response& response) {
  Writer w;
  w.U8(static_cast<uint8_t>(response.status.code()));
  if (!response.status.ok()) {
    w.Bytes(response.status.message());
    return std::move(w).Finish();
  }
  if (op == Op::kGet) {
    w.U32(static_cast<uint32_t>(response.values.size()));
    for (const std::string& v : response.values) w.Bytes(v);
  } else if (op == Op::kAdd) {
    w.U64(static_cast<uint64_t>(response.counter));
  }
  return std::move(w).Finish();
}

absl::StatusOr<Response> DecodeResponse(Op op, absl::string_view body) {
  Reader r(body);
  uint8_t code = 0;
  // absl::StatusCode values run 0..16.
  if (!r.U8(&code) || code > 16) return Malformed("response", "status code");
  Response response;
  if (code != 0) {
    std::string message;
    if (!r.Bytes(&message)) return Malformed("response", "message");
    response.status =
        absl::Status(static_cast<absl::StatusCode>(code), message);
  } else if (op == Op::kGet) {
    uint32_t n = 0;
    if (!r.U32(&n) || n > kMaxKeysPerGet || !r.CouldHoldFields(n)) {
      return Malformed("response", "value count");
    }
    response.values.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      if (!r.Bytes(&response.values[i])) return Malformed("response", "value");
    }
  } else if (op == Op::kAdd) {
    uint64_t counter = 0;
    if (!r.U64(&counter)) return Malformed("response", "counter");
    response.counter = static_cast<int64_t>(counter);
  }
  if (!r.AtEnd()) return Malformed("response", "length (trailing bytes)");
  return response;
}

absl::StatusOr<uint32_t> DecodeFrameSize(absl::string_view prefix4) {
  if (prefix4.size() < 4) return Malformed("frame", "size");
  const uint32_t size = absl::little_endian::Load32(prefix4.data());
  if (size == 0 || size > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store frame of ", size, " bytes is outside 1..",
                     kMaxFrameBytes));
  }
  return size;
}

}  // namespace store_protocol
}  // namespace relay
