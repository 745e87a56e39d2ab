// Allocations on one GPU (skips itself with no GPU visible): ranges and
// ids of live allocations, and what a freed one, or one made later at the
// same address, answers.
#include "transports/cuda_ipc/allocations.h"

#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "testing/device_memory.h"

namespace relay {
namespace cuda_ipc {
namespace {

TEST(AllocationsTest, RangesAndIdsOfLiveAndFreedAllocations) {
  if (!DeviceMemoryAvailable()) GTEST_SKIP() << "no GPU visible";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  absl::StatusOr<Allocations> loaded = Allocations::Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Allocations& a = *loaded;
  const size_t bytes = size_t{8} << 20;
  char* first = nullptr;
  char* second = nullptr;
  ASSERT_EQ(cudaMalloc(&first, bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&second, bytes), cudaSuccess);

  absl::StatusOr<Allocations::Range> range = a.RangeOf(first + 1000);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->base, first);
  EXPECT_EQ(range->bytes, bytes);
  absl::StatusOr<uint64_t> id = a.IdOf(first);
  absl::StatusOr<uint64_t> inside = a.IdOf(first + bytes - 1);
  absl::StatusOr<uint64_t> other = a.IdOf(second);
  ASSERT_TRUE(id.ok() && inside.ok() && other.ok());
  EXPECT_EQ(*id, *inside);
  EXPECT_NE(*id, *other);

  ASSERT_EQ(cudaFree(first), cudaSuccess);
  EXPECT_EQ(a.IdOf(first).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.RangeOf(first).status().code(), absl::StatusCode::kInvalidArgument);
  // The next allocation of the same size may well land at the same
  // address; its id is another either way.
  char* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, bytes), cudaSuccess);
  absl::StatusOr<uint64_t> later = a.IdOf(again);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_NE(*later, *id) << (again == first ? "same address" : "another address");
  EXPECT_EQ(a.IdOf(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  int on_host = 0;
  EXPECT_EQ(a.IdOf(&on_host).status().code(), absl::StatusCode::kInvalidArgument);
  cudaFree(again);
  cudaFree(second);
}

}  // namespace
}  // namespace cuda_ipc
}  // namespace relay
