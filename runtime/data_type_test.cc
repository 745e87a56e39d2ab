#include "runtime/data_type.h"

#include <cctype>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

// Verifies that every data type has its size in bytes, and invalid ones 0.
TEST(DataTypeTest, Sizes) {
  EXPECT_EQ(DataTypeSize(DataType::kInt8), 1u);
  EXPECT_EQ(DataTypeSize(DataType::kUint8), 1u);
  EXPECT_EQ(DataTypeSize(DataType::kInt32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kUint32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kUint64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBfloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeSize(static_cast<DataType>(99)), 0u);
  // The C++ type mapping agrees with the sizes.
  EXPECT_EQ(DataTypeSize(DataTypeOf<int8_t>::value), sizeof(int8_t));
  EXPECT_EQ(DataTypeSize(DataTypeOf<uint64_t>::value), sizeof(uint64_t));
  EXPECT_EQ(DataTypeSize(DataTypeOf<float>::value), sizeof(float));
  EXPECT_EQ(DataTypeSize(DataTypeOf<double>::value), sizeof(double));
}

// Verifies that every data type name parses back to it, in any case.
TEST(DataTypeTest, NamesRoundTrip) {
  EXPECT_EQ(AllDataTypes().size(), 10u);
  for (DataType t : AllDataTypes()) {
    const std::string name(DataTypeName(t));
    EXPECT_NE(name, "invalid");
    absl::StatusOr<DataType> parsed = ParseDataType(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, t) << name;
    std::string upper = name;
    for (char& c : upper) c = static_cast<char>(std::toupper(c));
    parsed = ParseDataType(upper);
    ASSERT_TRUE(parsed.ok()) << upper;
    EXPECT_EQ(*parsed, t) << upper;
    for (DataType u : AllDataTypes()) {
      if (u != t) {
        EXPECT_NE(DataTypeName(u), name);
      }
    }
  }
  EXPECT_EQ(DataTypeName(DataType::kBfloat16), "bfloat16");
  EXPECT_EQ(DataTypeName(static_cast<DataType>(200)), "invalid");
}

// Verifies that the aliases float, fp32, double, fp16, bf16 etc. parse.
TEST(DataTypeTest, Aliases) {
  struct Alias {
    const char* name;
    DataType type;
  };
  for (const Alias& a :
       {Alias{"float", DataType::kFloat32}, Alias{"fp32", DataType::kFloat32},
        Alias{"FLOAT", DataType::kFloat32}, Alias{"double", DataType::kFloat64},
        Alias{"fp64", DataType::kFloat64}, Alias{"half", DataType::kFloat16},
        Alias{"fp16", DataType::kFloat16}, Alias{"bf16", DataType::kBfloat16},
        Alias{"BF16", DataType::kBfloat16}, Alias{"int", DataType::kInt32}}) {
    absl::StatusOr<DataType> t = ParseDataType(a.name);
    ASSERT_TRUE(t.ok()) << a.name << ": " << t.status();
    EXPECT_EQ(*t, a.type) << a.name;
  }
}

// Verifies that unknown type names are InvalidArgument naming the input.
TEST(DataTypeTest, UnknownNames) {
  for (const char* name : {"", "float128", "int16", "fp8", " float32",
                           "float32 ", "bfloat", "invalid"}) {
    absl::StatusOr<DataType> t = ParseDataType(name);
    ASSERT_FALSE(t.ok()) << "'" << name << "' parsed";
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr(std::string("'") + name + "'"));
  }
}

// Verifies that reduce op names round-trip and unknown ones are rejected.
TEST(ReduceOpTest, NamesRoundTripAndUnknown) {
  EXPECT_EQ(AllReduceOps().size(), 5u);
  for (ReduceOp op : AllReduceOps()) {
    const std::string name(ReduceOpName(op));
    absl::StatusOr<ReduceOp> parsed = ParseReduceOp(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, op);
  }
  EXPECT_EQ(*ParseReduceOp("MAX"), ReduceOp::kMax);
  EXPECT_EQ(ReduceOpName(static_cast<ReduceOp>(77)), "invalid");
  for (const char* name : {"", "mean", "average", "sum "}) {
    EXPECT_EQ(ParseReduceOp(name).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

// Verifies that IsValid accepts enumerators, rejects cast out-of-range ones.
TEST(DataTypeTest, IsValid) {
  for (DataType t : AllDataTypes()) EXPECT_TRUE(IsValid(t));
  for (int v : {10, 11, 99, 255}) {
    EXPECT_FALSE(IsValid(static_cast<DataType>(v))) << v;
  }
  for (ReduceOp op : AllReduceOps()) EXPECT_TRUE(IsValid(op));
  for (int v : {5, 6, 99, 255}) {
    EXPECT_FALSE(IsValid(static_cast<ReduceOp>(v))) << v;
  }
}

// Verifies that exactly the four float types are floating point.
TEST(DataTypeTest, IsFloatingPoint) {
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat16));
  EXPECT_TRUE(IsFloatingPoint(DataType::kBfloat16));
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat32));
  EXPECT_TRUE(IsFloatingPoint(DataType::kFloat64));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt8));
  EXPECT_FALSE(IsFloatingPoint(DataType::kUint64));
  EXPECT_FALSE(IsFloatingPoint(static_cast<DataType>(99)));
}

// The 16-bit element types carry their DataType into buffers and convert
// to and from float by the same rounding the reductions use.
TEST(DataTypeTest, SixteenBitElementTypes) {
  static_assert(DataTypeOf<Float16>::value == DataType::kFloat16);
  static_assert(DataTypeOf<BFloat16>::value == DataType::kBfloat16);
  EXPECT_EQ(static_cast<float>(Float16(1.5f)), 1.5f);
  EXPECT_EQ(Float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(static_cast<float>(BFloat16(-2.25f)), -2.25f);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  // Round to nearest even: 1 + 2^-11 is halfway between two float16s.
  EXPECT_EQ(Float16(1.0f + 0x1p-11f).bits, 0x3c00);
  EXPECT_EQ(Float16(1.0f + 0x1p-11f + 0x1p-12f).bits, 0x3c01);
}

}  // namespace
}  // namespace relay
