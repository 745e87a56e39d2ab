// The cuda_ipc kernels alone, 2, 4 or 8 ranks on one GPU: every rank's
// arena in this GPU's memory, each rank's kernel on a stream of its own,
// running at once. No NVLink and no transport, but every protocol's
// layout, epochs, arena halves, peer order and arithmetic, on any machine
// with one GPU. Grids stay small so that all ranks' blocks fit the GPU
// together (a kernel waits for its peers'); a deadline turns a miss into a
// failure, not a hang.
// Kernels load with the context (CUDA_MODULE_LOADING=EAGER): loaded lazily,
// a kernel's first launch waited for the GPU to go idle, which the other
// rank's kernel, waiting for it, never did (seen: every first use of a
// kernel timed out).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/device_memory.h"
#include "runtime/collective.h"
#include "runtime/data_type.h"
#include "testing/reference.h"
#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {
namespace {

// Before any CUDA call of the process.
const bool kEagerLoading = setenv("CUDA_MODULE_LOADING", "EAGER", 1) == 0;

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr size_t kHalfBytes = size_t{4} << 20;

IpcType TypeOf(DataType t) {
  switch (t) {
    case DataType::kInt8: return IpcType::kInt8;
    case DataType::kBfloat16: return IpcType::kBfloat16;
    case DataType::kFloat64: return IpcType::kFloat64;
    case DataType::kFloat32: return IpcType::kFloat32;
    default: break;
  }
  ADD_FAILURE() << "no IpcType for " << DataTypeName(t) << " in this test";
  return IpcType::kFloat32;
}

// `n_` ranks' kernels on one GPU: their arenas, streams, and the abort
// flag and error words (words_[0], then one per rank).
class RanksOnOneGpu : public ::testing::Test {
 protected:
  explicit RanksOnOneGpu(int ranks) : n_(ranks) {}
  void SetUp() override {
    if (!DeviceMemoryAvailable()) GTEST_SKIP() << "no GPU visible";
    ASSERT_CUDA(cudaSetDevice(0));
    for (int r = 0; r < n_; ++r) {
      ASSERT_CUDA(cudaMalloc(&arena_[r], ArenaLayout::Bytes(kHalfBytes)));
      ASSERT_CUDA(cudaMemset(arena_[r], 0, ArenaLayout::kZeroedBytes));
      // Blocking streams: each test's setup (cudaMemset, and cudaMemcpy from
      // pageable memory, which may return before its copy lands) goes on
      // the legacy default stream, and the kernels must run after it. One
      // run on non-blocking streams found zeros and stale values in 1 MiB
      // results with no error reported, as an input read too early gives.
      ASSERT_CUDA(cudaStreamCreate(&stream_[r]));
    }
    ASSERT_CUDA(cudaMalloc(&words_, (1 + n_) * sizeof(int)));
    ASSERT_CUDA(cudaMemset(words_, 0, (1 + n_) * sizeof(int)));
  }
  void TearDown() override {
    for (int r = 0; r < n_; ++r) {
      if (arena_[r] != nullptr) cudaFree(arena_[r]);
      if (stream_[r] != nullptr) cudaStreamDestroy(stream_[r]);
    }
    if (words_ != nullptr) cudaFree(words_);
  }

  IpcLaunch Base(int rank) const {
    IpcLaunch l;
    l.rank = rank;
    l.size = n_;
    for (int r = 0; r < n_; ++r) l.arenas[r] = arena_[r];
    l.half_bytes = half_bytes_;
    l.slot_bytes = ArenaLayout::SlotBytes(half_bytes_, n_);
    l.abort_flag = words_;
    l.error = words_ + 1 + rank;
    l.timeout_ns = 5'000'000'000ull;
    return l;
  }

  // Waits for every rank's kernels, expects none reported an error, and
  // checks the first `elements` of each rank's output against want(rank, i).
  void FinishAndCheck(char* const out[], DataType dtype, ReduceOp op, size_t elements,
                      const std::function<double(int, size_t)>& want) {
    for (int r = 0; r < n_; ++r) ASSERT_CUDA(cudaStreamSynchronize(stream_[r]));
    std::vector<int> errors(n_);
    ASSERT_CUDA(cudaMemcpy(errors.data(), words_ + 1, n_ * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n_; ++r) EXPECT_EQ(errors[r], 0) << "rank " << r;
    for (int r = 0; r < n_; ++r) {
      std::vector<char> got(elements * DataTypeSize(dtype));
      ASSERT_CUDA(cudaMemcpy(got.data(), out[r], got.size(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < elements; ++i) {
        const double have = DecodeAt(dtype, got.data(), i);
        if (!Matches(dtype, op, want(r, i), have)) {
          ADD_FAILURE() << "rank " << r << " element " << i << " is " << have << ", want "
                        << want(r, i);
          break;
        }
      }
    }
  }

  // `count`, or fewer elements where more ranks than 2 share the GPU: so
  // many that all ranks' grids (a block per `block_bytes` of a rank's
  // data) stay within 128 blocks, which the GPU runs at once whatever the
  // kernel (one block of kThreads per SM). Past that, a rank's blocks
  // can wait for SMs its peers' waiting blocks hold (seen on 8 ranks: the
  // last ranks launched never started before the deadline). On 2 ranks the
  // sizes stay whole: the region's limits are tested there.
  size_t Fit(size_t count, size_t esize, size_t block_bytes) const {
    if (n_ <= 2) return count;
    const size_t most = (size_t{128} / n_) * block_bytes / esize;
    return std::max<size_t>(1, std::min(count, most));
  }

  // Where an all_reduce's result goes (flags): its own buffer, the input
  // (kInPlace), and from the reducing rank straight into every rank's
  // output (kIntoWindows, as into symmetric windows; two-shot flag path).
  enum Where : int { kApart = 0, kInPlace = 1, kIntoWindows = 2 };

  // An all_reduce of `count` elements on every rank by `protocol`
  // (two-shot where `two_shot`), the input `offset` elements into the odd
  // ranks' allocations; every element of every output checked.
  void AllReduce(DataType dtype, ReduceOp op, size_t count, int protocol, bool two_shot,
                 size_t offset, int salt, int where = kApart) {
    const bool in_place = (where & kInPlace) != 0;
    SCOPED_TRACE(absl::StrCat(DataTypeName(dtype), " ", ReduceOpName(op), " count ", count,
                              " protocol ", protocol, two_shot ? " two-shot" : "",
                              " offset ", offset, in_place ? " in place" : "",
                              (where & kIntoWindows) != 0 ? " into windows" : ""));
    const size_t esize = DataTypeSize(dtype);
    // Bytes of a rank's data a block of each kind takes.
    const size_t block_bytes = protocol == kLowLatencyLines ? 61440
                               : protocol == kLowLatencyWords ? 4096
                                                              : 8192;
    count = Fit(count, esize, two_shot ? block_bytes * n_ : block_bytes);
    SCOPED_TRACE(absl::StrCat("elements ", count));
    char* in[kMaxRanks] = {};
    char* out[kMaxRanks] = {};
    for (int r = 0; r < n_; ++r) {
      const size_t shift = r % 2 == 1 ? offset * esize : 0;
      ASSERT_CUDA(cudaMalloc(&in[r], count * esize + shift));
      ASSERT_CUDA(cudaMalloc(&out[r], count * esize + shift));
      in[r] += shift;
      out[r] += shift;
      if (in_place) {
        cudaFree(out[r] - shift);
        out[r] = in[r];
      }
      const std::vector<char> host = Encode(dtype, InputValues(dtype, op, r + salt, count));
      ASSERT_CUDA(cudaMemcpy(in[r], host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    ASSERT_CUDA(cudaMemset(words_ + 1, 0, n_ * sizeof(int)));  // The error words.
    for (int r = 0; r < n_; ++r) {
      IpcLaunch l = Base(r);
      l.input = in[r];
      l.output = out[r];
      l.count = count;
      l.type = TypeOf(dtype);
      l.op = static_cast<IpcOp>(static_cast<int>(op));
      l.low_latency = protocol;
      l.two_shot = two_shot ? 1 : 0;
      if ((where & kIntoWindows) != 0) {  // No result slots: larger ones.
        for (int q = 0; q < n_; ++q) l.peer_outputs[q] = out[q];
        l.slot_bytes = ArenaLayout::ExchangeSlotBytes(half_bytes_, n_);
      }
      ASSERT_EQ(LaunchAllReduce(l, stream_[r], via_[r]), 0);
    }
    FinishAndCheck(out, dtype, op, count, [&](int, size_t i) {
      std::vector<double> each(n_);
      for (int r = 0; r < n_; ++r) each[r] = InputValue(dtype, op, r + salt, i);
      return ReduceValues(dtype, op, each);
    });
    for (int r = 0; r < n_; ++r) {
      const size_t shift = r % 2 == 1 ? offset * esize : 0;
      cudaFree(in[r] - shift);
      if (!in_place) cudaFree(out[r] - shift);
    }
  }

  // `kind` (all_gather, all_to_all or reduce_scatter) with chunks of
  // `count` elements on every rank by `protocol`; every element of every
  // output checked against the reference (ranks sent InputValues(r)).
  void Exchange(CollectiveKind kind, ExchangeKind as, DataType dtype, size_t count,
                int protocol) {
    SCOPED_TRACE(absl::StrCat(CollectiveName(kind), " ", DataTypeName(dtype), " count ",
                              count, " protocol ", protocol));
    const size_t esize = DataTypeSize(dtype);
    count = Fit(count, esize, protocol == kLowLatencyWords ? 4096 : 8192);
    SCOPED_TRACE(absl::StrCat("elements ", count));
    const bool reduces = kind == CollectiveKind::kReduceScatter;
    const size_t send = kind == CollectiveKind::kAllGather ? count : n_ * count;
    const size_t recv = reduces ? count : n_ * count;
    char* in[kMaxRanks] = {};
    char* out[kMaxRanks] = {};
    for (int r = 0; r < n_; ++r) {
      ASSERT_CUDA(cudaMalloc(&in[r], send * esize));
      ASSERT_CUDA(cudaMalloc(&out[r], recv * esize));
      const std::vector<char> host =
          Encode(dtype, InputValues(dtype, ReduceOp::kSum, r, send));
      ASSERT_CUDA(cudaMemcpy(in[r], host.data(), host.size(), cudaMemcpyHostToDevice));
    }
    ASSERT_CUDA(cudaMemset(words_ + 1, 0, n_ * sizeof(int)));
    for (int r = 0; r < n_; ++r) {
      IpcLaunch l = Base(r);
      l.slot_bytes = ArenaLayout::ExchangeSlotBytes(kHalfBytes, n_);
      l.input = in[r];
      l.output = out[r];
      l.count = reduces ? count : count * esize;  // Copies move bytes.
      l.stride = l.count;
      l.type = TypeOf(dtype);
      l.op = IpcOp::kSum;
      l.low_latency = protocol;
      ASSERT_EQ(LaunchExchange(l, as, stream_[r], via_[r]), 0);
    }
    FinishAndCheck(out, dtype, ReduceOp::kSum, recv, [&](int r, size_t i) {
      return ExpectedValue(kind, dtype, ReduceOp::kSum, 0, r, n_, count, i);
    });
    for (int r = 0; r < n_; ++r) {
      cudaFree(in[r]);
      cudaFree(out[r]);
    }
  }

  // Queues `launch` for rank 0 alone (rank 1 never calls, as if killed)
  // on fresh arenas and expects its kernel to give up with `code`, naming
  // rank 1: at the deadline (20 ms), or at once with the abort flag up (and
  // a deadline of a minute, which the wait must not reach).
  void ExpectLoneRankGivesUp(const char* what, int code,
                             const std::function<int(IpcLaunch, cudaStream_t)>& launch) {
    SCOPED_TRACE(absl::StrCat(what, code == kErrorAborted ? " aborted" : " deadline"));
    for (int r = 0; r < n_; ++r) {
      ASSERT_CUDA(cudaMemset(arena_[r], 0, ArenaLayout::kZeroedBytes));
    }
    const int abort_and_errors[3] = {code == kErrorAborted ? 1 : 0, 0, 0};
    ASSERT_CUDA(cudaMemcpy(words_, abort_and_errors, sizeof(abort_and_errors),
                           cudaMemcpyHostToDevice));
    IpcLaunch l = Base(0);
    l.timeout_ns = code == kErrorAborted ? 60'000'000'000ull : 20'000'000ull;
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(launch(l, stream_[0]), 0);
    ASSERT_CUDA(cudaStreamSynchronize(stream_[0]));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    int error = 0;
    ASSERT_CUDA(cudaMemcpy(&error, words_ + 1, sizeof(error), cudaMemcpyDeviceToHost));
    EXPECT_EQ(ErrorCode(error), code) << "error word " << error;
    EXPECT_EQ(ErrorPeer(error), 1) << "error word " << error;
    ASSERT_CUDA(cudaMemset(words_, 0, sizeof(int)));  // Lower the abort flag.
  }

  // After rank 0's call into windows met rank 1's refusal: rank 0
  // reported it, naming rank 1, rank 1 reported nothing, and the first
  // `bytes` of both outputs (filled with 0x5a before) are unchanged.
  void ExpectRefusedByRank1(char* const out[2], size_t bytes) {
    for (int r = 0; r < 2; ++r) ASSERT_CUDA(cudaStreamSynchronize(stream_[r]));
    int errors[2] = {};
    ASSERT_CUDA(cudaMemcpy(errors, words_ + 1, sizeof(errors), cudaMemcpyDeviceToHost));
    EXPECT_EQ(ErrorCode(errors[0]), kErrorWindowFreed) << errors[0];
    EXPECT_EQ(ErrorPeer(errors[0]), 1) << errors[0];
    EXPECT_EQ(errors[1], 0);
    for (int r = 0; r < 2; ++r) {
      std::vector<unsigned char> got(bytes);
      ASSERT_CUDA(cudaMemcpy(got.data(), out[r], bytes, cudaMemcpyDeviceToHost));
      const size_t changed =
          got.size() - static_cast<size_t>(std::count(got.begin(), got.end(), 0x5a));
      EXPECT_EQ(changed, 0u) << "bytes of rank " << r << "'s output written after the refusal";
    }
  }

  const int n_;
  // The arena halves' bytes the launches use (at most kHalfBytes; the same
  // for every call of a test, as in a communicator).
  size_t half_bytes_ = kHalfBytes;
  void* arena_[kMaxRanks] = {};
  cudaStream_t stream_[kMaxRanks] = {};
  int* words_ = nullptr;
  // Where set, AllReduce and Exchange queue each rank's kernel through its
  // launcher.
  KernelLauncher* via_[kMaxRanks] = {};
};

// Launches as cudaLaunchKernel does, as the transport's GraphLauncher
// stands in for.
class PlainLauncher final : public KernelLauncher {
 public:
  int Launch(const void* func, int blocks, int threads, void** args, size_t,
             void* stream) override {
    ++launched;
    return static_cast<int>(cudaLaunchKernel(func, dim3(blocks), dim3(threads), args, 0,
                                             static_cast<cudaStream_t>(stream)));
  }
  int launched = 0;
};

class TwoRanksOnOneGpu : public RanksOnOneGpu {
 protected:
  TwoRanksOnOneGpu() : RanksOnOneGpu(2) {}
};

// 2, 4 and 8 ranks: the layouts, peer orders and reductions of more ranks
// than the GPUs lent so far. Each case keeps the grids of all ranks
// together within what the GPU runs at once (Fit), since a rank's blocks
// wait for every peer's.
class ManyRanksOnOneGpu : public RanksOnOneGpu, public ::testing::WithParamInterface<int> {
 protected:
  ManyRanksOnOneGpu() : RanksOnOneGpu(GetParam()) {}
};

TEST_P(ManyRanksOnOneGpu, TwoShot) {
  int salt = 0;
  for (size_t offset : {size_t{0}, size_t{1}}) {
    for (size_t count : {size_t{60013}, size_t{400001}, size_t{64}}) {
      AllReduce(DataType::kFloat32, ReduceOp::kSum, count, kFlagBarriers, true, offset, ++salt);
    }
  }
}

TEST_P(ManyRanksOnOneGpu, EveryProtocolEveryDtype) {
  int salt = 0;
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBfloat16, DataType::kInt8, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      for (size_t count : {size_t{1}, size_t{13}, size_t{4099}}) {
        AllReduce(dtype, op, count, kLowLatencyWords, false, 0, ++salt);
      }
      // Lines: one slice, a partial last line, many slices per warp (up to
      // what the region holds on n_ ranks).
      const size_t most =
          std::min<size_t>(300001, ArenaLayout::LinesBytes(n_) / DataTypeSize(dtype));
      for (size_t count : {size_t{7}, size_t{5003}, most}) {
        AllReduce(dtype, op, count, kLowLatencyLines, false, 0, ++salt);
        AllReduce(dtype, op, count, kLowLatencyLines, false, 1, ++salt);
      }
      AllReduce(dtype, op, 20011, kFlagBarriers, false, 0, ++salt);
      AllReduce(dtype, op, 60013, kFlagBarriers, true, 1, ++salt);
    }
  }
}

// Two-shot all_reduce storing the reduced slices straight into every
// rank's output (as into symmetric windows): every dtype and op, a tail
// (counts not whole 16-byte units), misaligned, in place.
TEST_P(ManyRanksOnOneGpu, TwoShotIntoWindows) {
  int salt = 0;
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBfloat16, DataType::kInt8, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      AllReduce(dtype, op, 60013, kFlagBarriers, true, 0, ++salt, kIntoWindows);
    }
  }
  for (size_t offset : {size_t{0}, size_t{1}}) {
    for (size_t count : {size_t{60013}, size_t{400001}, size_t{64}}) {
      AllReduce(DataType::kFloat32, ReduceOp::kSum, count, kFlagBarriers, true, offset, ++salt,
                kIntoWindows);
    }
  }
  AllReduce(DataType::kBfloat16, ReduceOp::kSum, 60013, kFlagBarriers, true, 1, ++salt,
            kInPlace | kIntoWindows);
}

// Into windows a call's contributions fill the whole half: a call past
// what the result slots leave room for (in 1 MiB halves, so that the
// grids stay small), and at the limit, mixed with calls through the slots.
TEST_P(ManyRanksOnOneGpu, TwoShotIntoWindowsFillsTheHalf) {
  half_bytes_ = size_t{1} << 20;
  const size_t staged_most = (ArenaLayout::SlotBytes(half_bytes_, n_) - 64) / 16 * 16 * n_ / 4;
  const size_t most = (ArenaLayout::ExchangeSlotBytes(half_bytes_, n_) - 64) / 16 * 16 * n_ / 4;
  int salt = 0;
  for (size_t count : {staged_most + 1001, most, most - 3}) {
    AllReduce(DataType::kFloat32, ReduceOp::kSum, count, kFlagBarriers, true, 0, ++salt,
              kIntoWindows);
    AllReduce(DataType::kFloat32, ReduceOp::kMax, staged_most, kFlagBarriers, true, 0, ++salt);
  }
}

// Two-shot all_reduce on words: every dtype and op, a slice of part of a
// unit, many units, up to the region's limit, misaligned and in place.
TEST_P(ManyRanksOnOneGpu, TwoShotOnWords) {
  int salt = 0;
  for (DataType dtype :
       {DataType::kFloat32, DataType::kBfloat16, DataType::kInt8, DataType::kFloat64}) {
    const size_t most = ArenaLayout::LowLatencyTwoShotBytes(n_) / DataTypeSize(dtype);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      for (size_t count : {size_t{1}, size_t{13}, size_t{40009}, most}) {
        AllReduce(dtype, op, count, kLowLatencyWords, true, 0, ++salt);
      }
      AllReduce(dtype, op, 40009, kLowLatencyWords, true, 1, ++salt);
      AllReduce(dtype, op, 40009, kLowLatencyWords, true, 0, ++salt, kInPlace);
    }
  }
}

// all_gather, all_to_all and reduce_scatter on words (up to what the
// region holds a chunk: 1 MiB on 2 ranks, 256 KiB on 8) and through the
// slots.
TEST_P(ManyRanksOnOneGpu, Exchanges) {
  const struct {
    CollectiveKind kind;
    ExchangeKind as;
  } kinds[] = {{CollectiveKind::kAllGather, ExchangeKind::kAllGather},
               {CollectiveKind::kAllToAll, ExchangeKind::kAllToAll},
               {CollectiveKind::kReduceScatter, ExchangeKind::kReduceScatter}};
  for (const auto& k : kinds) {
    for (DataType dtype : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt8}) {
      const size_t largest = ArenaLayout::LowLatencyBytes(n_) / DataTypeSize(dtype);
      for (size_t count : {size_t{1}, size_t{4099}, largest / 2, largest}) {
        Exchange(k.kind, k.as, dtype, count, kLowLatencyWords);
      }
      Exchange(k.kind, k.as, dtype, 30011, kFlagBarriers);
    }
  }
}

// Calls in a row alternate the arena halves and mix the protocols: each
// call's epoch must tell its data from what the call two before left.
TEST_P(ManyRanksOnOneGpu, ManyCallsInARow) {
  const int protocols[] = {kLowLatencyWords, kLowLatencyLines, kFlagBarriers};
  for (int i = 0; i < 60; ++i) {
    AllReduce(DataType::kFloat32, ReduceOp::kSum, i % 2 ? 3001 : 50001, protocols[i % 3],
              false, 0, i);
    if (i % 5 == 0) {  // Two-shot words between them.
      AllReduce(DataType::kFloat32, ReduceOp::kSum, 20011, kLowLatencyWords, true, 0, 100 + i);
    }
    if (i % 7 == 0) {  // And two-shot into windows.
      AllReduce(DataType::kFloat32, ReduceOp::kSum, 50001, kFlagBarriers, true, 0, 200 + i,
                kIntoWindows);
    }
  }
}

// Kernels queued through a launcher (as the transport's GraphLauncher
// queues eager calls, with no programmatic dependency on the call before)
// and launched directly, mixed: all_reduces of every protocol and
// exchanges, every result checked, each of them through the launcher.
TEST_P(ManyRanksOnOneGpu, KernelsThroughALauncher) {
  std::vector<PlainLauncher> launchers(n_);
  for (int r = 0; r < n_; ++r) via_[r] = &launchers[r];
  int calls = 0;
  for (int i = 0; i < 6; ++i) {
    const int protocol = i % 3 == 0 ? kLowLatencyWords : (i % 3 == 1 ? kLowLatencyLines
                                                                      : kFlagBarriers);
    AllReduce(DataType::kFloat32, ReduceOp::kSum, i % 2 ? 3001 : 50001, protocol, false, 0, i);
    AllReduce(DataType::kBfloat16, ReduceOp::kMax, 60013, kFlagBarriers, true, 1, 10 + i);
    Exchange(CollectiveKind::kAllGather, ExchangeKind::kAllGather, DataType::kFloat32, 4099,
             i % 2 ? kLowLatencyWords : kFlagBarriers);
    Exchange(CollectiveKind::kReduceScatter, ExchangeKind::kReduceScatter, DataType::kInt8,
             30011, kFlagBarriers);
    calls += 4;
    for (int r = 0; r < n_; ++r) via_[r] = i % 2 ? &launchers[r] : nullptr;
  }
  for (int r = 0; r < n_; ++r) {
    EXPECT_EQ(launchers[r].launched, calls / 2) << "rank " << r;
    via_[r] = nullptr;
  }
}

// A ring of sends and receives (each rank to the next, from the one
// before) of several chunks and a tail, three batches in a row, so that the
// pairs' chunk counters carry from batch to batch; every byte checked.
TEST_P(ManyRanksOnOneGpu, SendAndReceiveInARing) {
  const size_t bytes = 3 * kP2PChunkBytes + 4099;
  std::vector<char*> send(n_), recv(n_);
  for (int r = 0; r < n_; ++r) {
    ASSERT_CUDA(cudaMalloc(&send[r], bytes));
    ASSERT_CUDA(cudaMalloc(&recv[r], bytes));
  }
  auto byte = [](int rank, int batch, size_t i) {
    return static_cast<char>((i * 31 + static_cast<size_t>(rank) * 7 + batch * 3) & 0xff);
  };
  for (int batch = 0; batch < 3; ++batch) {
    SCOPED_TRACE(absl::StrCat("batch ", batch));
    std::vector<char> host(bytes);
    for (int r = 0; r < n_; ++r) {
      for (size_t i = 0; i < bytes; ++i) host[i] = byte(r, batch, i);
      ASSERT_CUDA(cudaMemcpy(send[r], host.data(), bytes, cudaMemcpyHostToDevice));
    }
    ASSERT_CUDA(cudaMemset(words_ + 1, 0, n_ * sizeof(int)));
    for (int r = 0; r < n_; ++r) {
      P2PLaunch l;
      l.base = Base(r);
      l.ops = 2;
      l.op[0] = {send[r], bytes, (r + 1) % n_, true};
      l.op[1] = {recv[r], bytes, (r + n_ - 1) % n_, false};
      ASSERT_EQ(LaunchP2P(l, stream_[r]), 0);
    }
    for (int r = 0; r < n_; ++r) ASSERT_CUDA(cudaStreamSynchronize(stream_[r]));
    std::vector<int> errors(n_);
    ASSERT_CUDA(cudaMemcpy(errors.data(), words_ + 1, n_ * sizeof(int), cudaMemcpyDeviceToHost));
    for (int r = 0; r < n_; ++r) {
      EXPECT_EQ(errors[r], 0) << "rank " << r;
      ASSERT_CUDA(cudaMemcpy(host.data(), recv[r], bytes, cudaMemcpyDeviceToHost));
      const int from = (r + n_ - 1) % n_;
      for (size_t i = 0; i < bytes; ++i) {
        if (host[i] != byte(from, batch, i)) {
          ADD_FAILURE() << "rank " << r << " byte " << i << " is not rank " << from << "'s";
          break;
        }
      }
    }
  }
  for (int r = 0; r < n_; ++r) {
    cudaFree(send[r]);
    cudaFree(recv[r]);
  }
}

// all_gather straight into every rank's output (as into symmetric
// windows): every element of every output checked.
TEST_P(ManyRanksOnOneGpu, DirectAllGather) {
  const DataType dtype = DataType::kFloat32;
  const size_t count = Fit(40009, 4, 8192);
  const size_t chunk = count * 4;
  char* in[kMaxRanks] = {};
  char* out[kMaxRanks] = {};
  for (int r = 0; r < n_; ++r) {
    ASSERT_CUDA(cudaMalloc(&in[r], chunk));
    ASSERT_CUDA(cudaMalloc(&out[r], n_ * chunk));
    const std::vector<char> host = Encode(dtype, InputValues(dtype, ReduceOp::kSum, r, count));
    ASSERT_CUDA(cudaMemcpy(in[r], host.data(), chunk, cudaMemcpyHostToDevice));
  }
  ASSERT_CUDA(cudaMemset(words_ + 1, 0, n_ * sizeof(int)));
  for (int r = 0; r < n_; ++r) {
    IpcLaunch l = Base(r);
    l.input = in[r];
    l.output = out[r];
    l.count = chunk;
    l.stride = chunk;
    for (int q = 0; q < n_; ++q) l.peer_outputs[q] = out[q];
    ASSERT_EQ(LaunchDirectAllGather(l, stream_[r]), 0);
  }
  FinishAndCheck(out, dtype, ReduceOp::kSum, n_ * count, [&](int r, size_t i) {
    return ExpectedValue(CollectiveKind::kAllGather, dtype, ReduceOp::kSum, 0, r, n_, count, i);
  });
  for (int r = 0; r < n_; ++r) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ManyRanksOnOneGpu, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat(info.param, "Ranks");
                         });

// Every kind of wait for a peer gives up when the peer never comes: at the
// deadline or on the abort flag, reporting which peer. Both ranks' calls
// work afterwards on the same GPU and arenas.
TEST_F(TwoRanksOnOneGpu, ALoneRankGivesUp) {
  char* in = nullptr;
  char* out = nullptr;
  const size_t bytes = size_t{1} << 20;
  ASSERT_CUDA(cudaMalloc(&in, bytes));
  ASSERT_CUDA(cudaMalloc(&out, 2 * bytes));
  ASSERT_CUDA(cudaMemset(in, 1, bytes));
  auto all_reduce = [&](size_t count, int protocol, bool two_shot) {
    return [=](IpcLaunch l, cudaStream_t stream) {
      l.input = in;
      l.output = out;
      l.count = count;
      l.low_latency = protocol;
      l.two_shot = two_shot ? 1 : 0;
      return LaunchAllReduce(l, stream);
    };
  };
  auto exchange = [&](ExchangeKind kind, size_t count, int protocol) {
    return [=](IpcLaunch l, cudaStream_t stream) {
      l.slot_bytes = ArenaLayout::ExchangeSlotBytes(kHalfBytes, 2);
      l.input = in;
      l.output = out;
      l.count = count;
      l.stride = count;
      l.root = 1;
      l.low_latency = protocol;
      return LaunchExchange(l, kind, stream);
    };
  };
  auto receive = [&](IpcLaunch l, cudaStream_t stream) {
    P2PLaunch p2p;
    p2p.base = l;
    p2p.ops = 1;
    p2p.op[0] = {out, 5000, 1, false};
    return LaunchP2P(p2p, stream);
  };
  auto direct = [&](IpcLaunch l, cudaStream_t stream) {
    l.input = in;
    l.output = out;
    l.count = 4096;
    l.stride = 4096;
    l.peer_outputs[0] = out;
    l.peer_outputs[1] = out + 4096;  // Never written: the peer never comes.
    return LaunchDirectAllGather(l, stream);
  };
  auto into_windows = [&](IpcLaunch l, cudaStream_t stream) {
    l.input = in;
    l.output = out;
    l.count = 60013;
    l.two_shot = 1;
    l.peer_outputs[0] = out;
    l.peer_outputs[1] = out + bytes;  // Never written: the peer never comes.
    return LaunchAllReduce(l, stream);
  };
  auto teardown = [](IpcLaunch l, cudaStream_t stream) {
    return LaunchTeardownBarrier(l, stream);
  };
  const struct {
    const char* what;
    std::function<int(IpcLaunch, cudaStream_t)> launch;
  } waits[] = {
      {"all_reduce on words", all_reduce(13, kLowLatencyWords, false)},
      {"all_reduce on lines", all_reduce(5003, kLowLatencyLines, false)},
      {"one-shot all_reduce", all_reduce(20011, kFlagBarriers, false)},
      {"two-shot all_reduce", all_reduce(60013, kFlagBarriers, true)},
      {"two-shot all_reduce into windows", into_windows},
      {"all_gather on words", exchange(ExchangeKind::kAllGather, 1000, kLowLatencyWords)},
      {"all_gather", exchange(ExchangeKind::kAllGather, 30011, kFlagBarriers)},
      {"broadcast from rank 1", exchange(ExchangeKind::kBroadcast, 30011, kFlagBarriers)},
      {"direct all_gather", direct},
      {"receive from rank 1", receive},
      {"teardown barrier", teardown},
  };
  for (const auto& w : waits) {
    ExpectLoneRankGivesUp(w.what, kErrorTimeout, w.launch);
    ExpectLoneRankGivesUp(w.what, kErrorAborted, w.launch);
  }
  cudaFree(in);
  cudaFree(out);
  for (int r = 0; r < 2; ++r) {
    ASSERT_CUDA(cudaMemset(arena_[r], 0, ArenaLayout::kZeroedBytes));
  }
  AllReduce(DataType::kFloat32, ReduceOp::kSum, 4099, kLowLatencyWords, false, 0, 1);
  AllReduce(DataType::kFloat32, ReduceOp::kSum, 60013, kFlagBarriers, true, 0, 2);
}

// A rank's error word keeps its first error: a kernel queued after one
// that timed out gives up on the abort that follows, and must not hide
// the timeout's cause.
TEST_F(TwoRanksOnOneGpu, TheFirstErrorStays) {
  char* buffer = nullptr;
  ASSERT_CUDA(cudaMalloc(&buffer, 4096));
  const int abort_and_errors[3] = {0, 0, 0};
  ASSERT_CUDA(cudaMemcpy(words_, abort_and_errors, sizeof(abort_and_errors),
                         cudaMemcpyHostToDevice));
  IpcLaunch l = Base(0);  // Rank 1 never comes.
  l.input = buffer;
  l.output = buffer + 2048;
  l.count = 13;
  l.low_latency = kLowLatencyWords;
  l.timeout_ns = 20'000'000ull;
  ASSERT_EQ(LaunchAllReduce(l, stream_[0]), 0);
  ASSERT_CUDA(cudaStreamSynchronize(stream_[0]));
  const int up = 1;
  ASSERT_CUDA(cudaMemcpy(words_, &up, sizeof(up), cudaMemcpyHostToDevice));
  ASSERT_EQ(LaunchAllReduce(l, stream_[0]), 0);  // Gives up on the abort flag.
  ASSERT_CUDA(cudaStreamSynchronize(stream_[0]));
  int error = 0;
  ASSERT_CUDA(cudaMemcpy(&error, words_ + 1, sizeof(error), cudaMemcpyDeviceToHost));
  EXPECT_EQ(ErrorCode(error), kErrorTimeout) << "error word " << error;
  EXPECT_EQ(ErrorPeer(error), 1) << "error word " << error;
  // Without the first error, the abort is reported.
  ASSERT_CUDA(cudaMemset(words_ + 1, 0, sizeof(int)));
  ASSERT_EQ(LaunchAllReduce(l, stream_[0]), 0);
  ASSERT_CUDA(cudaStreamSynchronize(stream_[0]));
  ASSERT_CUDA(cudaMemcpy(&error, words_ + 1, sizeof(error), cudaMemcpyDeviceToHost));
  EXPECT_EQ(ErrorCode(error), kErrorAborted) << "error word " << error;
  ASSERT_CUDA(cudaMemset(words_, 0, sizeof(int)));
  cudaFree(buffer);
}

// all_gather straight into both ranks' outputs (as into symmetric
// windows), aligned and not: every element checked. Then rank 1 refuses
// (its window was freed): rank 0 reports it, naming rank 1, and neither
// output changes; the ranks' next direct call works.
TEST_F(TwoRanksOnOneGpu, DirectAllGatherAndItsRefusal) {
  const DataType dtype = DataType::kFloat32;
  const size_t count = 300001;
  const size_t chunk = count * 4;
  char* in[2] = {};
  char* out[2] = {};
  std::vector<char> host[2];
  for (int r = 0; r < 2; ++r) {
    ASSERT_CUDA(cudaMalloc(&in[r], chunk + 4));
    ASSERT_CUDA(cudaMalloc(&out[r], 2 * chunk + 4));
    host[r] = Encode(dtype, InputValues(dtype, ReduceOp::kSum, r, count));
  }
  // `shift` bytes into every buffer (4: moved in 4-byte units, not 16).
  auto launch = [&](int r, size_t shift, bool refuse) {
    IpcLaunch l = Base(r);
    l.input = in[r] + shift;
    l.output = out[r] + shift;
    l.count = chunk;
    l.stride = chunk;
    l.peer_outputs[0] = out[0] + shift;
    l.peer_outputs[1] = out[1] + shift;
    return refuse ? LaunchRefusedDirectAllGather(l, stream_[r])
                  : LaunchDirectAllGather(l, stream_[r]);
  };
  auto gathered = [&](size_t shift) {
    SCOPED_TRACE(absl::StrCat("shift ", shift));
    for (int r = 0; r < 2; ++r) {
      ASSERT_CUDA(cudaMemcpy(in[r] + shift, host[r].data(), chunk, cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaMemset(out[r], 0, 2 * chunk + 4));
    }
    ASSERT_CUDA(cudaMemset(words_ + 1, 0, 2 * sizeof(int)));
    for (int r = 0; r < 2; ++r) ASSERT_EQ(launch(r, shift, false), 0);
    char* shifted[2] = {out[0] + shift, out[1] + shift};
    FinishAndCheck(shifted, dtype, ReduceOp::kSum, 2 * count, [&](int r, size_t i) {
      return ExpectedValue(CollectiveKind::kAllGather, dtype, ReduceOp::kSum, 0, r, 2, count, i);
    });
  };
  gathered(0);
  gathered(4);

  for (int r = 0; r < 2; ++r) ASSERT_CUDA(cudaMemset(out[r], 0x5a, 2 * chunk + 4));
  ASSERT_CUDA(cudaMemset(words_ + 1, 0, 2 * sizeof(int)));
  ASSERT_EQ(launch(0, 0, false), 0);
  ASSERT_EQ(launch(1, 0, true), 0);
  ExpectRefusedByRank1(out, 2 * chunk);

  gathered(4);  // The ranks are still in step.
  for (int r = 0; r < 2; ++r) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
}

// Two-shot all_reduce into windows, then rank 1 refuses (its window was
// freed): rank 0 reports it, naming rank 1, and neither output changes;
// the ranks' next call into windows works.
TEST_F(TwoRanksOnOneGpu, AllReduceIntoWindowsAndItsRefusal) {
  const DataType dtype = DataType::kFloat32;
  AllReduce(dtype, ReduceOp::kSum, 300001, kFlagBarriers, true, 0, 1, kIntoWindows);

  const size_t count = 300001;
  const size_t bytes = count * 4;
  char* in[2] = {};
  char* out[2] = {};
  for (int r = 0; r < 2; ++r) {
    ASSERT_CUDA(cudaMalloc(&in[r], bytes));
    ASSERT_CUDA(cudaMalloc(&out[r], bytes));
    const std::vector<char> host = Encode(dtype, InputValues(dtype, ReduceOp::kSum, r, count));
    ASSERT_CUDA(cudaMemcpy(in[r], host.data(), bytes, cudaMemcpyHostToDevice));
    ASSERT_CUDA(cudaMemset(out[r], 0x5a, bytes));
  }
  ASSERT_CUDA(cudaMemset(words_ + 1, 0, 2 * sizeof(int)));
  for (int r = 0; r < 2; ++r) {
    IpcLaunch l = Base(r);
    l.input = in[r];
    l.output = out[r];
    l.count = count;
    l.two_shot = 1;
    l.slot_bytes = ArenaLayout::ExchangeSlotBytes(half_bytes_, 2);
    l.peer_outputs[0] = out[0];
    l.peer_outputs[1] = out[1];
    ASSERT_EQ(r == 1 ? LaunchRefusedAllReduce(l, stream_[r]) : LaunchAllReduce(l, stream_[r]),
              0);
  }
  ExpectRefusedByRank1(out, bytes);
  for (int r = 0; r < 2; ++r) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }

  // The ranks are still in step.
  AllReduce(dtype, ReduceOp::kSum, 300001, kFlagBarriers, true, 1, 2, kIntoWindows);
}

}  // namespace
}  // namespace cuda_ipc
}  // namespace relay
