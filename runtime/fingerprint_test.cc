#include "runtime/fingerprint.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

CollectiveArgs AllReduce(size_t count, DataType dtype, ReduceOp op) {
  CollectiveArgs a;
  a.kind = CollectiveKind::kAllReduce;
  a.send = {reinterpret_cast<const void*>(0x1000), count, dtype, Device::Host()};
  a.recv = {reinterpret_cast<void*>(0x2000), count, dtype, Device::Host()};
  a.op = op;
  a.sequence = 12;
  return a;
}

TEST(FingerprintTest, RoundTripsThroughItsEncoding) {
  CollectiveArgs a = AllReduce(1024, DataType::kBfloat16, ReduceOp::kMax);
  const Fingerprint f = Fingerprint::Of(a, 4);
  absl::StatusOr<Fingerprint> back = Fingerprint::Decode(f.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, f);
  EXPECT_EQ(f.ToString(), "all_reduce(bfloat16 x 1024, max)");
}

TEST(FingerprintTest, RejectsMalformedBytes) {
  EXPECT_FALSE(Fingerprint::Decode("").ok());
  EXPECT_FALSE(Fingerprint::Decode(std::string(100, 'x')).ok());
  std::string bad = Fingerprint::Of(AllReduce(1, DataType::kFloat32, ReduceOp::kSum), 2).Encode();
  bad[0] = 99;  // Unknown kind.
  EXPECT_FALSE(Fingerprint::Decode(bad).ok());
}

// Each field that ranks must agree on is compared; the message names rank 0,
// the differing rank and both calls.
TEST(FingerprintTest, EveryKindOfMismatchIsNamed) {
  const Fingerprint base =
      Fingerprint::Of(AllReduce(1024, DataType::kFloat32, ReduceOp::kSum), 4);
  std::vector<Fingerprint> variants;
  Fingerprint f = base;
  f.kind = CollectiveKind::kReduceScatter;
  variants.push_back(f);
  f = base;
  f.count = 512;
  variants.push_back(f);
  f = base;
  f.dtype = DataType::kFloat16;
  variants.push_back(f);
  f = base;
  f.op = ReduceOp::kMax;
  variants.push_back(f);
  f = base;
  f.root = 2;
  variants.push_back(f);
  f = base;
  f.sequence = 13;
  variants.push_back(f);
  for (const Fingerprint& v : variants) {
    const absl::Status s = CompareFingerprints({base, base, v, base});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << v.ToString();
    EXPECT_NE(s.message().find("rank 2 called"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(base.ToString()), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(v.ToString()), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(CompareFingerprints({base, base, base}).ok());
}

// Fields a collective does not use do not count: a non-root's reduce recv
// buffer is empty, a broadcast has no op.
TEST(FingerprintTest, IgnoresFieldsTheCollectiveDoesNotUse) {
  CollectiveArgs a = AllReduce(64, DataType::kFloat32, ReduceOp::kSum);
  a.kind = CollectiveKind::kBroadcast;
  a.root = 1;
  CollectiveArgs b = a;
  b.op = ReduceOp::kMax;
  EXPECT_EQ(Fingerprint::Of(a, 2), Fingerprint::Of(b, 2));
  a.kind = b.kind = CollectiveKind::kReduce;
  b.recv.count = 0;  // Not the root: no recv buffer.
  b.op = a.op;
  EXPECT_EQ(Fingerprint::Of(a, 2), Fingerprint::Of(b, 2));
}

TEST(FingerprintTest, CheckLevelFromTheEnvironment) {
  unsetenv("RELAY_CHECK_LEVEL");
  EXPECT_EQ(*ResolveCheckLevel(CheckLevel::kDefault), CheckLevel::kNone);
  setenv("RELAY_CHECK_LEVEL", "fingerprint", 1);
  EXPECT_EQ(*ResolveCheckLevel(CheckLevel::kDefault), CheckLevel::kFingerprint);
  EXPECT_EQ(*ResolveCheckLevel(CheckLevel::kNone), CheckLevel::kNone);
  setenv("RELAY_CHECK_LEVEL", "paranoid", 1);
  absl::StatusOr<CheckLevel> bad = ResolveCheckLevel(CheckLevel::kDefault);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("RELAY_CHECK_LEVEL"), absl::string_view::npos);
  unsetenv("RELAY_CHECK_LEVEL");
}

}  // namespace
}  // namespace relay
