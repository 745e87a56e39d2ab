// GradientBucketer on loopback ranks: mixed sizes and types, several buckets
// per flush, every element checked; and its refusals.
#include "embed/bucketing/gradient_bucketer.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

// Tensor t of rank r, element j: distinct everywhere, exact in sums.
double Value(int r, int t, int j) { return r * 1000 + t * 3 + j % 11; }

// Tensor t has 1 + (t * 37) % 900 elements: some tiny, some near 7 KiB.
int CountOf(int t) { return 1 + (t * 37) % 900; }

TEST(GradientBucketerTest, FusesAndRestoresEveryTensor) {
  constexpr int kRanks = 4, kTensors = 300;
  auto store = std::make_shared<InMemoryStore>();
  std::vector<size_t> buckets(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateCommunicator({.rank = r, .size = kRanks, .store = store,
                                      .transport = "loopback"});
      ASSERT_TRUE(comm.ok()) << comm.status();
      // Odd tensors are float64, even ones int64: two buckets fill at once.
      std::vector<std::vector<double>> f(kTensors);
      std::vector<std::vector<int64_t>> n(kTensors);
      GradientBucketer fuse(**comm, {.bucket_bytes = 64 << 10});
      for (int step = 0; step < 2; ++step) {
        for (int t = 0; t < kTensors; ++t) {
          if (t % 2) {
            f[t].resize(CountOf(t));
            for (int j = 0; j < CountOf(t); ++j) f[t][j] = Value(r, t, j);
            ASSERT_TRUE(fuse.Add(Buffer::Of(f[t])).ok());
          } else {
            n[t].resize(CountOf(t));
            for (int j = 0; j < CountOf(t); ++j) n[t][j] = Value(r, t, j);
            ASSERT_TRUE(fuse.Add(Buffer::Of(n[t])).ok());
          }
        }
        absl::StatusOr<Request> done = fuse.Flush();
        ASSERT_TRUE(done.ok()) << done.status();
        ASSERT_TRUE(done->Wait().ok());
        for (int t = 0; t < kTensors; ++t) {
          for (int j = 0; j < CountOf(t); ++j) {
            double want = 0;
            for (int q = 0; q < kRanks; ++q) want += Value(q, t, j);
            const double got = t % 2 ? f[t][j] : static_cast<double>(n[t][j]);
            ASSERT_EQ(got, want) << "rank " << r << " step " << step
                                 << " tensor " << t << " element " << j;
          }
        }
      }
      buckets[r] = fuse.buckets_started();
    });
  }
  for (std::thread& t : threads) t.join();
  // ~1 MiB of float64 and ~1 MiB of int64 per step in 64 KiB buckets.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_GT(buckets[r], 20u);
    EXPECT_LT(buckets[r], 80u);
  }
}

TEST(GradientBucketerTest, BigTensorsGoAloneAndEmptyFlushCompletes) {
  auto store = std::make_shared<InMemoryStore>();
  auto comm = CreateCommunicator({.rank = 0, .size = 1, .store = store});
  ASSERT_TRUE(comm.ok());
  GradientBucketer fuse(**comm, {.bucket_bytes = 1024, .op = ReduceOp::kMax});
  absl::StatusOr<Request> none = fuse.Flush();
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->Wait().ok());
  std::vector<float> big(1000, 2.5f), small(3, 1.5f);
  ASSERT_TRUE(fuse.Add(Buffer::Of(big)).ok());
  EXPECT_EQ(fuse.buckets_started(), 1u);  // Started at once, unstaged.
  ASSERT_TRUE(fuse.Add(Buffer::Of(small)).ok());
  EXPECT_EQ(fuse.buckets_started(), 1u);  // Waits for more.
  absl::StatusOr<Request> done = fuse.Flush();
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(done->Wait().ok());
  EXPECT_EQ(fuse.buckets_started(), 2u);
  EXPECT_EQ(big[999], 2.5f);
  EXPECT_EQ(small[2], 1.5f);
}

TEST(GradientBucketerTest, RefusesBadBuffers) {
  auto store = std::make_shared<InMemoryStore>();
  auto comm = CreateCommunicator({.rank = 0, .size = 1, .store = store});
  ASSERT_TRUE(comm.ok());
  GradientBucketer fuse(**comm);
  float x = 0;
  EXPECT_EQ(fuse.Add(Buffer{&x, 1, DataType::kFloat32, Device::Cuda(0)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fuse.Add(Buffer{&x, 1, static_cast<DataType>(99), Device::Host()})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fuse.Add(Buffer{nullptr, 4, DataType::kFloat32, Device::Host()})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fuse.buckets_started(), 0u);
}

}  // namespace
}  // namespace relay
