// Device reduction kernels against the host kernels, bit for bit: every
// dtype x op, empty/one/odd/large counts, aligned and misaligned pointers,
// in place. A GPU test (tags = ["gpu"]): skips where no GPU is visible.
#include "collectives/device_reduce.h"

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "collectives/reduce.h"
#include "gtest/gtest.h"
#include "testing/reference.h"

namespace relay {
namespace {

class DeviceReduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DeviceReduceAvailable()) GTEST_SKIP() << "no GPU visible";
  }
};

// Device copies of host bytes, freed at scope exit.
struct DeviceBytes {
  explicit DeviceBytes(size_t n) : size(n) {
    EXPECT_EQ(cudaMalloc(&ptr, n + 64), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(ptr); }
  char* at(size_t offset) { return static_cast<char*>(ptr) + offset; }
  void* ptr = nullptr;
  size_t size;
};

// Where the inputs and the output sit: all 16-byte aligned, only the first
// input one element off (the element-by-element kernel), or all three one
// element off alike (the vector kernel after a head of up to 15 elements).
enum class Placement { kAligned, kFirstInputShifted, kAllShifted };

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kAligned: return "aligned";
    case Placement::kFirstInputShifted: return "first input shifted";
    case Placement::kAllShifted: return "all shifted";
  }
  return "?";
}

TEST_F(DeviceReduceTest, MatchesHostKernelsBitForBit) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                          ReduceOp::kMax};
  const Placement placements[] = {Placement::kAligned,
                                  Placement::kFirstInputShifted,
                                  Placement::kAllShifted};
  for (DataType dtype : AllDataTypes()) {
    const size_t esize = DataTypeSize(dtype);
    for (ReduceOp op : ops) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{1000003}}) {
        for (Placement placement : placements) {
          const size_t a_at = placement == Placement::kAligned ? 0 : esize;
          const size_t b_at = placement == Placement::kAllShifted ? esize : 0;
          const std::vector<char> a = Encode(dtype, InputValues(dtype, op, 1, count));
          const std::vector<char> b = Encode(dtype, InputValues(dtype, op, 2, count));
          std::vector<char> want(count * esize);
          if (count > 0) GetReduceFn(dtype, op)(a.data(), b.data(), want.data(), count);
          DeviceBytes da(a.size()), db(b.size());
          ASSERT_EQ(cudaMemcpy(da.at(a_at), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(db.at(b_at), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
          // In place into a, so the output sits where a does.
          ASSERT_TRUE(DeviceReduce(dtype, op, da.at(a_at), db.at(b_at),
                                   da.at(a_at), count, nullptr).ok());
          std::vector<char> got(count * esize);
          ASSERT_EQ(cudaMemcpy(got.data(), da.at(a_at), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
          EXPECT_TRUE(got == want)
              << DataTypeName(dtype) << " " << ReduceOpName(op) << " count "
              << count << " " << PlacementName(placement);
        }
      }
    }
  }
}

TEST_F(DeviceReduceTest, DivideMatchesHost) {
  for (DataType dtype : AllDataTypes()) {
    const size_t count = 4099;
    std::vector<char> data = Encode(dtype, InputValues(dtype, ReduceOp::kSum, 3, count));
    std::vector<char> want = data;
    DivideInPlace(dtype, want.data(), count, 3);
    DeviceBytes d(data.size());
    ASSERT_EQ(cudaMemcpy(d.ptr, data.data(), data.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(DeviceDivide(dtype, d.ptr, count, 3, nullptr).ok());
    std::vector<char> got(data.size());
    ASSERT_EQ(cudaMemcpy(got.data(), d.ptr, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(got == want) << DataTypeName(dtype);
  }
}

TEST(DeviceReduceInputTest, BadInputIsInvalidArgument) {
  // Checked before anything is launched, GPU or not.
  EXPECT_EQ(DeviceReduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                         nullptr, 4, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  int x = 0;
  EXPECT_EQ(DeviceReduce(DataType::kFloat32, ReduceOp::kAvg, &x, &x, &x, 1,
                         nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceReduce(static_cast<DataType>(99), ReduceOp::kSum, &x, &x, &x,
                         1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DeviceDivide(DataType::kInt32, &x, 1, 0, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // Zero elements is a no-op, valid with null pointers.
  if (DeviceReduceAvailable()) {
    EXPECT_TRUE(DeviceReduce(DataType::kFloat32, ReduceOp::kSum, nullptr,
                             nullptr, nullptr, 0, nullptr).ok());
  }
}

// A capped grid (max_blocks) covers every element with its grid-stride
// loop: 1, 3 and 64 blocks over a count that needs thousands, in the
// vector kernel (with and without a head before the first 16-byte
// boundary) and the scalar one (pointers at different offsets).
TEST_F(DeviceReduceTest, ACappedGridReducesEveryElement) {
  const DataType dtype = DataType::kFloat32;
  const size_t count = 3000017, esize = 4;
  const std::vector<char> a = Encode(dtype, InputValues(dtype, ReduceOp::kSum, 1, count));
  const std::vector<char> b = Encode(dtype, InputValues(dtype, ReduceOp::kSum, 2, count));
  std::vector<char> want(count * esize);
  GetReduceFn(dtype, ReduceOp::kSum)(a.data(), b.data(), want.data(), count);
  for (int blocks : {1, 3, 64}) {
    for (Placement placement : {Placement::kAligned, Placement::kFirstInputShifted,
                                Placement::kAllShifted}) {
      const size_t a_at = placement == Placement::kAligned ? 0 : esize;
      const size_t b_at = placement == Placement::kAllShifted ? esize : 0;
      DeviceBytes da(a.size() + esize), db(b.size() + esize), dout(want.size() + esize);
      ASSERT_EQ(cudaMemcpy(da.at(a_at), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.at(b_at), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dout.at(0), 0xff, want.size() + esize), cudaSuccess);
      ASSERT_TRUE(DeviceReduce(dtype, ReduceOp::kSum, da.at(a_at), db.at(b_at),
                               dout.at(a_at), count, nullptr, blocks).ok());
      std::vector<char> got(want.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dout.at(a_at), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(got == want) << blocks << " blocks, " << PlacementName(placement);
      // Nothing written before the output.
      if (a_at > 0) {
        unsigned char before[8];
        ASSERT_EQ(cudaMemcpy(before, dout.at(0), a_at, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < a_at; ++i) EXPECT_EQ(before[i], 0xff) << i;
      }
    }
  }
}

TEST(DeviceReduceArgumentsTest, NegativeMaxBlocksIsInvalid) {
  EXPECT_EQ(DeviceReduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr,
                         nullptr, 0, nullptr, -1)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace relay
