// BucketedBuffers on loopback ranks: the layout (packing, buffers larger
// than a bucket, zero-length buffers), every element of every buffer after
// a whole-layout and a per-bucket all_reduce, and the refusals.
#include "embed/bucketing/bucketed_buffers.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

// Buffer t has CountOf(t) elements: tiny ones, empty ones, and every 50th
// larger than a 16 KiB bucket.
size_t CountOf(int t) {
  if (t % 50 == 49) return 5000;
  if (t % 17 == 3) return 0;
  return 1 + (t * 37) % 900;
}

double Value(int r, int t, size_t j) { return r * 1000 + t * 3 + j % 11; }

TEST(BucketedBuffersTest, LayoutPacksInOrderAndIsolatesLargeBuffers) {
  const std::vector<size_t> counts = {10, 20, 100, 5, 0, 200, 30};
  // 100 float64 = 800 bytes per bucket.
  absl::StatusOr<BucketedBuffers> b =
      BucketedBuffers::Create(DataType::kFloat64, counts, 800);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->size(), counts.size());
  // {10, 20} | {100} | {5, 0} | {200} | {30}
  EXPECT_EQ(b->buckets(), 5u);
  const std::vector<size_t> want_bucket = {0, 0, 1, 2, 2, 3, 4};
  for (size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(b->BucketOf(i), want_bucket[i]) << i;
    EXPECT_EQ(b->buffer(i).count, counts[i]);
    EXPECT_EQ(b->buffer(i).dtype, DataType::kFloat64);
    if (i > 0) {  // Contiguous, in order: a bucket is one range.
      EXPECT_EQ(static_cast<char*>(b->buffer(i).data),
                static_cast<char*>(b->buffer(i - 1).data) + 8 * counts[i - 1]);
    }
  }
}

TEST(BucketedBuffersTest, EveryElementIsReducedInPlace) {
  constexpr int kRanks = 4, kBuffers = 300;
  std::vector<size_t> counts;
  for (int t = 0; t < kBuffers; ++t) counts.push_back(CountOf(t));
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateCommunicator({.rank = r, .size = kRanks, .store = store,
                                      .transport = "loopback"});
      ASSERT_TRUE(comm.ok()) << comm.status();
      absl::StatusOr<BucketedBuffers> grads =
          BucketedBuffers::Create(DataType::kFloat64, counts, 16 << 10);
      ASSERT_TRUE(grads.ok()) << grads.status();
      ASSERT_GT(grads->buckets(), 10u);
      // Step 0 reduces the whole layout in one call; step 1 bucket by
      // bucket, last bucket first (as a backward pass finishes them).
      for (int step = 0; step < 2; ++step) {
        for (int t = 0; t < kBuffers; ++t) {
          double* g = static_cast<double*>(grads->buffer(t).data);
          for (size_t j = 0; j < counts[t]; ++j) g[j] = Value(r, t, j) + step;
        }
        if (step == 0) {
          absl::StatusOr<Request> done = grads->AllReduce(**comm, ReduceOp::kSum);
          ASSERT_TRUE(done.ok()) << done.status();
          ASSERT_TRUE(done->Wait().ok());
        } else {
          for (size_t b = grads->buckets(); b-- > 0;) {
            absl::StatusOr<Request> done =
                grads->AllReduceBucket(**comm, b, ReduceOp::kSum);
            ASSERT_TRUE(done.ok()) << done.status();
            ASSERT_TRUE(done->Wait().ok());
          }
        }
        for (int t = 0; t < kBuffers; ++t) {
          const double* g = static_cast<const double*>(grads->buffer(t).data);
          for (size_t j = 0; j < counts[t]; ++j) {
            double want = 0;
            for (int q = 0; q < kRanks; ++q) want += Value(q, t, j) + step;
            ASSERT_EQ(g[j], want) << "rank " << r << " step " << step
                                  << " buffer " << t << " element " << j;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(BucketedBuffersTest, RefusesBadLayoutsAndBuckets) {
  const std::vector<size_t> one = {4};
  EXPECT_EQ(BucketedBuffers::Create(static_cast<DataType>(99), one, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BucketedBuffers::Create(DataType::kFloat32, {}, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BucketedBuffers::Create(DataType::kFloat32, one, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<size_t> huge = {SIZE_MAX / 2, SIZE_MAX / 2};
  EXPECT_EQ(BucketedBuffers::Create(DataType::kFloat32, huge, 64).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto store = std::make_shared<InMemoryStore>();
  auto comm = CreateCommunicator({.rank = 0, .size = 1, .store = store,
                                  .transport = "loopback"});
  ASSERT_TRUE(comm.ok()) << comm.status();
  absl::StatusOr<BucketedBuffers> b = BucketedBuffers::Create(DataType::kFloat32, one, 64);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->AllReduceBucket(**comm, 1, ReduceOp::kSum).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace relay
