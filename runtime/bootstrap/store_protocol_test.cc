#include "runtime/bootstrap/store_protocol.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/bootstrap/auth.h"

namespace relay {
namespace store_protocol {
namespace {

using ::testing::HasSubstr;

absl::string_view Body(const std::string& frame) {
  return absl::string_view(frame).substr(4);
}

TEST(StoreProtocolTest, RequestsRoundTrip) {
  const Request requests[] = {
      {.op = Op::kSet, .keys = {"k"}, .value = std::string("v\0w", 3)},
      {.op = Op::kGet, .keys = {"a", "bb", "ccc"}, .timeout_ms = 1234},
      {.op = Op::kAdd, .keys = {"n"}, .delta = -42},
      {.op = Op::kDelete, .keys = {"gone"}},
  };
  for (const Request& want : requests) {
    const std::string frame = EncodeRequest(want);
    ASSERT_EQ(*DecodeFrameSize(frame), frame.size() - 4);
    absl::StatusOr<Request> got = DecodeRequest(Body(frame));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->op, want.op);
    EXPECT_EQ(got->keys, want.keys);
    EXPECT_EQ(got->value, want.value);
    EXPECT_EQ(got->delta, want.delta);
    EXPECT_EQ(got->timeout_ms, want.timeout_ms);
  }
}

TEST(StoreProtocolTest, ResponsesRoundTrip) {
  Response values{.values = {"x", "", "zzz"}};
  absl::StatusOr<Response> got =
      DecodeResponse(Op::kGet, Body(EncodeResponse(Op::kGet, values)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->values, values.values);

  Response counter{.counter = -7};
  got = DecodeResponse(Op::kAdd, Body(EncodeResponse(Op::kAdd, counter)));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->counter, -7);

  Response error{.status = absl::DeadlineExceededError("key \"a\" not set")};
  got = DecodeResponse(Op::kGet, Body(EncodeResponse(Op::kGet, error)));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, error.status);
}

// Every proper prefix of a valid body, and every body with a byte appended,
// must be rejected: each field is checked against what is really there.
TEST(StoreProtocolTest, TruncatedOrPaddedFramesAreRejected) {
  const Request requests[] = {
      {.op = Op::kSet, .keys = {"key"}, .value = "value"},
      {.op = Op::kGet, .keys = {"a", "b"}, .timeout_ms = 5},
      {.op = Op::kAdd, .keys = {"n"}, .delta = 1},
      {.op = Op::kDelete, .keys = {"k"}},
  };
  for (const Request& r : requests) {
    const std::string body(Body(EncodeRequest(r)));
    for (size_t n = 0; n < body.size(); ++n) {
      EXPECT_FALSE(DecodeRequest(body.substr(0, n)).ok())
          << "op " << int(r.op) << " prefix " << n;
    }
    EXPECT_FALSE(DecodeRequest(body + "x").ok());
  }
  const std::string get_body(
      Body(EncodeResponse(Op::kGet, Response{.values = {"ab", "c"}})));
  for (size_t n = 0; n < get_body.size(); ++n) {
    EXPECT_FALSE(DecodeResponse(Op::kGet, get_body.substr(0, n)).ok()) << n;
  }
}

TEST(StoreProtocolTest, RejectsBadOpsCountsAndSizes) {
  EXPECT_FALSE(DecodeRequest(std::string(1, '\0')).ok());
  EXPECT_FALSE(DecodeRequest(std::string(1, '\x09')).ok());
  // A kGet claiming 0 keys, and one claiming more than the limit.
  std::string zero(Body(EncodeRequest({.op = Op::kGet, .keys = {"a"}})));
  zero[9] = zero[10] = zero[11] = zero[12] = 0;
  EXPECT_FALSE(DecodeRequest(zero).ok());
  std::string many = zero;
  many[9] = many[10] = many[11] = many[12] = '\xff';
  EXPECT_FALSE(DecodeRequest(many).ok());
  // A key whose length runs past the end.
  std::string set(Body(EncodeRequest({.op = Op::kSet, .keys = {"k"}})));
  set[1] = '\x7f';
  EXPECT_FALSE(DecodeRequest(set).ok());

  // Counts within the limit but beyond what the bytes left could hold
  // (each field needs its 4-byte size) are refused before anything is
  // sized by them.
  std::string few(Body(EncodeRequest({.op = Op::kGet, .keys = {"a", "b"}})));
  few[9] = 3;  // 3 keys claimed, 2 present.
  absl::StatusOr<Request> short_get = DecodeRequest(few);
  EXPECT_FALSE(short_get.ok());
  EXPECT_THAT(std::string(short_get.status().message()), HasSubstr("key count"));
  std::string values(Body(EncodeResponse(Op::kGet, Response{.values = {"x"}})));
  values[1] = '\x60';
  values[2] = '\xea';  // 60,000 values claimed in a 10-byte body.
  absl::StatusOr<Response> short_values = DecodeResponse(Op::kGet, values);
  EXPECT_FALSE(short_values.ok());
  EXPECT_THAT(std::string(short_values.status().message()),
              HasSubstr("value count"));

  EXPECT_FALSE(DecodeFrameSize(std::string(4, '\0')).ok());
  EXPECT_FALSE(DecodeFrameSize(std::string(4, '\xff')).ok());
  EXPECT_FALSE(DecodeFrameSize("ab").ok());
  EXPECT_FALSE(DecodeResponse(Op::kSet, std::string(1, '\x63')).ok());
}

TEST(AuthTest, ProofsDependOnTokenRoleAndNonces) {
  const std::string a = RandomBytes(kNonceBytes), b = RandomBytes(kNonceBytes);
  EXPECT_NE(a, b);
  const std::string proof = Proof(ProofRole::kClient, "token", a, b);
  EXPECT_EQ(proof.size(), kProofBytes);
  EXPECT_TRUE(ProofsEqual(proof, Proof(ProofRole::kClient, "token", a, b)));
  EXPECT_FALSE(ProofsEqual(proof, Proof(ProofRole::kClient, "tokem", a, b)));
  EXPECT_FALSE(ProofsEqual(proof, Proof(ProofRole::kServer, "token", a, b)));
  EXPECT_FALSE(ProofsEqual(proof, Proof(ProofRole::kClient, "token", b, a)));
  EXPECT_FALSE(ProofsEqual(proof, proof.substr(1)));
  // The empty token still yields a well-formed proof.
  EXPECT_EQ(Proof(ProofRole::kClient, "", a, b).size(), kProofBytes);
  const std::string token = GenerateToken();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_NE(token, GenerateToken());
}

// Known answers computed independently (Python's hmac module):
//   hmac.new(b"Jefe", b"relay-store-client" b"what do ya want for nothing?",
//            hashlib.sha256).hexdigest()
TEST(AuthTest, ProofIsHmacSha256OfLabelAndNonces) {
  EXPECT_EQ(absl::BytesToHexString(Proof(ProofRole::kClient, "Jefe",
                                         "what do ya ", "want for nothing?")),
            "e27146a4cfbed4ba53875b605105e66dbda0d0845d664f63fdd2a15cdd00c464");
  EXPECT_EQ(absl::BytesToHexString(Proof(ProofRole::kServer, "", "a", "b")),
            "5166f0d49a72f79144e63916a0f8552e5293ee21ab0d501b32d0379db54c4b26");
}

}  // namespace
}  // namespace store_protocol
}  // namespace relay
