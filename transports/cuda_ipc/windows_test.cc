// Windows on one GPU (skips itself with no GPU visible): two ranks as
// threads of this process over one in-memory store, so a peer's region is
// its address (no IPC handle is opened). Registration succeeds or fails
// alike on both ranks; Find places a buffer in every rank's window and
// sees a freed allocation; Remove forgets a window.
#include "transports/cuda_ipc/windows.h"

#include <cuda_runtime.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/device_memory.h"

namespace relay {
namespace cuda_ipc {
namespace {

class TwoRanksWindows : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DeviceMemoryAvailable()) GTEST_SKIP() << "no GPU visible";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    absl::StatusOr<Allocations> a = Allocations::Load();
    ASSERT_TRUE(a.ok()) << a.status();
    auto store = std::make_shared<InMemoryStore>();
    for (int r = 0; r < 2; ++r) {
      windows_[r] = std::make_unique<Windows>(r, 2, store, *a,
                                              [this](absl::Status) { ++aborts_; });
    }
  }
  // Both ranks register at once, each its own region and refusal.
  std::array<absl::Status, 2> RegisterBoth(const std::array<Buffer, 2>& regions,
                                           const std::array<std::string, 2>& refusals) {
    std::array<absl::Status, 2> got;
    std::thread other([&] {
      cudaSetDevice(0);
      got[1] = windows_[1]->Register(regions[1], refusals[1], absl::Now() + absl::Seconds(10));
    });
    got[0] = windows_[0]->Register(regions[0], refusals[0], absl::Now() + absl::Seconds(10));
    other.join();
    return got;
  }
  static Buffer Floats(char* data, size_t count) {
    return Buffer{data, count, DataType::kFloat32, Device::Cuda(0)};
  }

  std::unique_ptr<Windows> windows_[2];
  int aborts_ = 0;
};

TEST_F(TwoRanksWindows, RegisterFindFreeAndRemove) {
  const size_t count = 1 << 20;
  char* region[2] = {};
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaMalloc(&region[r], count * 4 + 512), cudaSuccess);
  // Rank 1's window starts 256 bytes into its allocation.
  char* base[2] = {region[0], region[1] + 256};
  std::array<absl::Status, 2> got =
      RegisterBoth({Floats(base[0], count), Floats(base[1], count)}, {"", ""});
  ASSERT_TRUE(got[0].ok()) << got[0];
  ASSERT_TRUE(got[1].ok()) << got[1];
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(windows_[r]->Contains(base[r]));
    // 1000 bytes at offset 4096: the same offset in both ranks' windows.
    std::optional<Windows::Placement> placed = windows_[r]->Find(base[r] + 4096, 1000);
    ASSERT_TRUE(placed.has_value());
    EXPECT_EQ(placed->outputs[0], base[0] + 4096);
    EXPECT_EQ(placed->outputs[1], base[1] + 4096);
    EXPECT_EQ(placed->base, base[r]);
    EXPECT_FALSE(placed->freed);
    // Past the window's end, or not in it: no placement.
    EXPECT_FALSE(windows_[r]->Find(base[r] + count * 4 - 8, 16).has_value());
    EXPECT_FALSE(windows_[r]->Find(region[r] + count * 4 + 300, 4).has_value());
  }
  // A region overlapping a window is refused by its rank, and so on both.
  got = RegisterBoth({Floats(base[0] + 1024, 16), Floats(base[1] + 1024, 16)}, {"", ""});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kInvalidArgument) << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), "overlaps")) << got[r];
  }
  // Rank 1 frees its window's memory: its Find says so; rank 0's does not.
  ASSERT_EQ(cudaFree(region[1]), cudaSuccess);
  EXPECT_TRUE(windows_[1]->Find(base[1], 64)->freed);
  EXPECT_FALSE(windows_[0]->Find(base[0], 64)->freed);
  // An allocation made now may take the freed address; still "freed".
  char* again = nullptr;
  ASSERT_EQ(cudaMalloc(&again, count * 4 + 512), cudaSuccess);
  EXPECT_TRUE(windows_[1]->Find(base[1], 64)->freed) << (again == region[1] ? "same address" : "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(windows_[r]->Remove(base[r]).ok());
    EXPECT_FALSE(windows_[r]->Contains(base[r]));
    EXPECT_EQ(windows_[r]->Remove(base[r]).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(windows_[r]->Find(base[r], 64).has_value());
  }
  EXPECT_EQ(aborts_, 0);
  cudaFree(again);
  cudaFree(region[0]);
}

// One rank's refusal, or sizes that differ, fail both ranks, each naming
// the reason; nothing is registered.
TEST_F(TwoRanksWindows, RefusalsFailEveryRank) {
  char* region[2] = {};
  for (int r = 0; r < 2; ++r) ASSERT_EQ(cudaMalloc(&region[r], 4096), cudaSuccess);
  std::array<absl::Status, 2> got =
      RegisterBoth({Floats(region[0], 256), Floats(region[1], 256)}, {"", "not device memory"});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kInvalidArgument) << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), "rank 1: not device memory")) << got[r];
    EXPECT_FALSE(windows_[r]->Contains(region[r]));
  }
  got = RegisterBoth({Floats(region[0], 256), Floats(region[1], 128)}, {"", ""});
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(got[r].code(), absl::StatusCode::kInvalidArgument) << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), "bytes by rank: 1024, 512")) << got[r];
  }
  got = RegisterBoth({Floats(nullptr, 0), Floats(region[1], 256)}, {"", ""});
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::StrContains(got[r].message(), "rank 0: its region is empty")) << got[r];
  }
  // A region past its allocation's end.
  got = RegisterBoth({Floats(region[0] + 2048, 1024), Floats(region[1] + 2048, 1024)}, {"", ""});
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::StrContains(got[r].message(), "past the end of its allocation")) << got[r];
  }
  EXPECT_EQ(aborts_, 0);
  cudaFree(region[0]);
  cudaFree(region[1]);
}

}  // namespace
}  // namespace cuda_ipc
}  // namespace relay
