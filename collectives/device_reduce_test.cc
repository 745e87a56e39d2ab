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

TEST_F(DeviceReduceTest, MatchesHostKernelsBitForBit) {
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                          ReduceOp::kMax};
  for (DataType dtype : AllDataTypes()) {
    const size_t esize = DataTypeSize(dtype);
    for (ReduceOp op : ops) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{1000003}}) {
        for (size_t misalign : {size_t{0}, esize}) {
          const std::vector<char> a = Encode(dtype, InputValues(dtype, op, 1, count));
          const std::vector<char> b = Encode(dtype, InputValues(dtype, op, 2, count));
          std::vector<char> want(count * esize);
          if (count > 0) GetReduceFn(dtype, op)(a.data(), b.data(), want.data(), count);
          DeviceBytes da(a.size()), db(b.size());
          ASSERT_EQ(cudaMemcpy(da.at(misalign), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(db.at(0), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
          // In place into a (misaligned when misalign > 0).
          ASSERT_TRUE(DeviceReduce(dtype, op, da.at(misalign), db.at(0),
                                   da.at(misalign), count, nullptr).ok());
          std::vector<char> got(count * esize);
          ASSERT_EQ(cudaMemcpy(got.data(), da.at(misalign), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
          EXPECT_TRUE(got == want)
              << DataTypeName(dtype) << " " << ReduceOpName(op) << " count "
              << count << " misalign " << misalign;
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
// loop: 1, 3 and 64 blocks over a count that needs thousands, in both the
// vector and the scalar (misaligned) kernel.
TEST_F(DeviceReduceTest, ACappedGridReducesEveryElement) {
  const DataType dtype = DataType::kFloat32;
  const size_t count = 3000017, esize = 4;
  const std::vector<char> a = Encode(dtype, InputValues(dtype, ReduceOp::kSum, 1, count));
  const std::vector<char> b = Encode(dtype, InputValues(dtype, ReduceOp::kSum, 2, count));
  std::vector<char> want(count * esize);
  GetReduceFn(dtype, ReduceOp::kSum)(a.data(), b.data(), want.data(), count);
  for (int blocks : {1, 3, 64}) {
    for (size_t misalign : {size_t{0}, esize}) {
      DeviceBytes da(a.size() + esize), db(b.size()), dout(want.size() + esize);
      ASSERT_EQ(cudaMemcpy(da.at(misalign), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(db.at(0), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemset(dout.at(0), 0xff, want.size() + esize), cudaSuccess);
      ASSERT_TRUE(DeviceReduce(dtype, ReduceOp::kSum, da.at(misalign), db.at(0),
                               dout.at(misalign), count, nullptr, blocks).ok());
      std::vector<char> got(want.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dout.at(misalign), got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(got == want) << blocks << " blocks, misalign " << misalign;
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
