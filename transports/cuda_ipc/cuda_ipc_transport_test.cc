// The cuda_ipc transport with ranks as threads, one GPU each, or, run
// whole on every rank under tools/relayrun, as processes (one GPU each, or
// sharing one under RELAY_CUDA_IPC_SHARED_GPU=1; testing/rank_harness.h).
// Tests that need more ranks than that skip themselves
// (bench/gpu/run_checks.sh runs both forms).
#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/status_macros.h"
#include "runtime/bootstrap/environment.h"
#include "runtime/config.h"
#include "testing/conformance.h"
#include "testing/device_memory.h"
#include "testing/device_transport_checks.h"
#include "testing/rank_harness.h"
#include "testing/reference.h"

namespace relay {
namespace {

CudaIpcTransportFactory& Factory() {
  static CudaIpcTransportFactory* f = new CudaIpcTransportFactory();
  return *f;
}

// How many ranks the tests may run: as threads, one for every visible GPU;
// under a launcher (tools/relayrun -n N: each process one rank, see
// testing/rank_harness.h), the job's N, which share a GPU where fewer are
// visible and RELAY_CUDA_IPC_SHARED_GPU=1 (bench/gpu/run_checks.sh on a
// host with one GPU).
int Ranks() {
  const int gpus = ViableGpus(Factory());
  if (gpus == 0 || !HasLaunchEnvironment()) return gpus;
  absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
  return env.ok() ? env->size : 0;
}
constexpr char kNeedsTwo[] = "needs 2 ranks: 2 GPUs, or 2 processes under a launcher";

// Processes sharing one GPU take turns on it (time slices of about 2 ms a
// call), so tests with thousands of calls make fewer there.
bool SharedGpuSetting() {
  return ReadSwitch("RELAY_CUDA_IPC_SHARED_GPU", false).value_or(false);
}
bool SharedGpu() { return SharedGpuSetting() && VisibleDeviceCount() < Ranks(); }

absl::Status CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs an all_reduce of `count` elements on every rank (input at element
// offset `offset` of its allocation, in place or not) and checks every
// element of the result against the reference.
absl::Status CheckAllReduceAt(Communicator& comm, DataType dtype, ReduceOp op, size_t count,
                              char* src, char* dst, int salt);

absl::Status CheckAllReduce(Communicator& comm, DataType dtype, ReduceOp op,
                            size_t count, size_t offset, bool in_place,
                            int salt) {
  const size_t esize = DataTypeSize(dtype);
  RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate((count + offset) * esize));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate((count + offset) * esize));
  char* src = reinterpret_cast<char*>(in.data()) + offset * esize;
  char* dst = in_place ? src : reinterpret_cast<char*>(out.data()) + offset * esize;
  absl::Status s = CheckAllReduceAt(comm, dtype, op, count, src, dst, salt);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("offset ", offset, in_place ? " in place: " : ": ",
                                             s.message()));
}

// As CheckAllReduce, from `src` into `dst` (device buffers of `count`
// elements on this rank's GPU; the same for in place).
absl::Status CheckAllReduceAt(Communicator& comm, DataType dtype, ReduceOp op, size_t count,
                              char* src, char* dst, int salt) {
  const int rank = comm.rank();
  const size_t esize = DataTypeSize(dtype);
  std::vector<double> values = InputValues(dtype, op, rank + salt, count);
  std::vector<char> host = Encode(dtype, values);
  RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(src, host.data(), count * esize,
                                             cudaMemcpyHostToDevice), "cudaMemcpy"));
  RELAY_ASSIGN_OR_RETURN(
      Request r, comm.AllReduce(ConstBuffer{src, count, dtype, Device::Cuda(GpuOfLocalRank(rank))},
                                Buffer{dst, count, dtype, Device::Cuda(GpuOfLocalRank(rank))}, op));
  RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
  std::vector<char> got(count * esize);
  RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(got.data(), dst, count * esize,
                                             cudaMemcpyDeviceToHost), "cudaMemcpy"));
  for (size_t i = 0; i < count; ++i) {
    std::vector<double> column;
    for (int q = 0; q < comm.size(); ++q) {
      column.push_back(InputValue(dtype, op, q + salt, i));
    }
    const double want = ReduceValues(dtype, op, column);
    const double have = DecodeAt(dtype, got.data(), i);
    if (!Matches(dtype, op, want, have)) {
      return absl::InternalError(absl::StrCat(
          DataTypeName(dtype), " ", ReduceOpName(op), " count ", count, ": element ", i,
          " is ", have, ", want ", want, " (rank ", rank, ")"));
    }
  }
  return absl::OkStatus();
}

TEST(CudaIpcTransportTest, NotViableWithoutGpuSaysWhy) {
  if (Ranks() > 0) GTEST_SKIP() << "a GPU is visible";
  TransportConfig config;
  config.store = std::make_shared<InMemoryStore>();
  absl::StatusOr<std::unique_ptr<Transport>> t = Factory().Connect(config);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
}

// Two ranks as threads on one GPU are refused with the reason, with
// RELAY_CUDA_IPC_SHARED_GPU (threads share a context, so a device-wide
// wait such as cudaFree would wait for the peer's kernel) and without.
// Each rank's Connect status.
std::vector<absl::Status> ConnectTwoThreadsOnGpuZero() {
  auto store = std::make_shared<InMemoryStore>();
  std::vector<absl::Status> got(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      got[r] = CudaCheck(cudaSetDevice(0), "cudaSetDevice");
      if (!got[r].ok()) return;
      TransportConfig config;
      config.store = store;
      config.rank = r;
      config.size = 2;
      config.timeout = absl::Seconds(30);
      got[r] = Factory().Connect(config).status();
    });
  }
  for (std::thread& t : ranks) t.join();
  return got;
}

TEST(CudaIpcTransportTest, ThreadsSharingAGpuAreRefused) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const bool was_on = SharedGpuSetting();  // As the launcher set it, if it did.
  unsetenv("RELAY_CUDA_IPC_SHARED_GPU");
  for (const absl::Status& s : ConnectTwoThreadsOnGpuZero()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "needs a GPU of its own")) << s;
  }
  setenv("RELAY_CUDA_IPC_SHARED_GPU", "1", 1);
  const std::vector<absl::Status> shared = ConnectTwoThreadsOnGpuZero();
  if (!was_on) unsetenv("RELAY_CUDA_IPC_SHARED_GPU");
  for (const absl::Status& s : shared) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "must be processes")) << s;
  }
}

// Every dtype and op; low-latency words, one-shot through the slots and a
// flag barrier, two-shot, and tails that are not whole 16-byte units;
// aligned and misaligned buffers; in place and not. `settings` (name,
// value) are set for the run and unset after it.
absl::Status EveryDtypeAndOp(
    std::initializer_list<std::pair<const char*, const char*>> settings = {}) {
  for (const auto& [name, value] : settings) setenv(name, value, 1);
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        int salt = 0;
        for (DataType dtype : AllDataTypes()) {
          for (ReduceOp op : AllReduceOps()) {
            for (size_t count : {size_t{1}, size_t{13}, size_t{4099}, size_t{30011},
                                  size_t{300001}}) {
              RELAY_RETURN_IF_ERROR(
                  CheckAllReduce(comm, dtype, op, count, 0, false, ++salt));
            }
            RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, dtype, op, 5001, 1, true, ++salt));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  for (const auto& [name, value] : settings) unsetenv(name);
  return s;
}

// A process's first calls while the GPU is busy (a stream held by a host
// function): they are queued at once and run once the GPU frees, with
// right results. CUDA loads a kernel at its first launch and waits for the
// GPU to go idle to do so; the transport loads its kernels, and the engine
// the reduction kernels of relay's own algorithms (a ring all_reduce
// here), when the communicator is made (design note finding 37). First in
// this file, so that no earlier test has loaded these kernels.
TEST(CudaIpcTransportTest, FirstCallsDoNotWaitForABusyGpu) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const int ranks = std::min(Ranks(), 2);
  absl::Status s = RunRanks(
      ranks, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank(), n = comm.size();
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        constexpr size_t kCount = 3000;
        RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(kCount * 8));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes sum, DeviceBytes::Allocate(kCount * 8));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes gathered, DeviceBytes::Allocate(kCount * 8 * n));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes ring, DeviceBytes::Allocate(kCount * 8));
        auto value = [](size_t i, int r) { return static_cast<double>((i * 7 + r * 101) % 1000); };
        std::vector<double> host(kCount);
        for (size_t i = 0; i < kCount; ++i) host[i] = value(i, rank);
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(in.data(), host.data(), kCount * 8,
                                                   cudaMemcpyHostToDevice), "copy in"));
        const double* src = reinterpret_cast<const double*>(in.data());
        RELAY_ASSIGN_OR_RETURN(DeviceStream busy, DeviceStream::Create());
        RELAY_ASSIGN_OR_RETURN(DeviceStream stream, DeviceStream::Create());
        RELAY_ASSIGN_OR_RETURN(StreamHold hold, StreamHold::On(busy.get()));
        CollectiveOptions opts;
        opts.stream = stream.get();
        opts.stream_order = StreamOrder::kOnStream;
        const auto start = std::chrono::steady_clock::now();
        RELAY_ASSIGN_OR_RETURN(
            Request reduced,
            comm.AllReduce(ConstBuffer::Of(src, kCount, dev),
                           Buffer::Of(reinterpret_cast<double*>(sum.data()), kCount, dev),
                           ReduceOp::kMax, opts));
        RELAY_ASSIGN_OR_RETURN(
            Request all,
            comm.AllGather(ConstBuffer::Of(src, kCount, dev),
                           Buffer::Of(reinterpret_cast<double*>(gathered.data()), kCount * n, dev),
                           opts));
        CollectiveOptions ring_opts = opts;
        ring_opts.algorithm = Algorithm::kRing;
        RELAY_ASSIGN_OR_RETURN(
            Request ringed,
            comm.AllReduce(ConstBuffer::Of(src, kCount, dev),
                           Buffer::Of(reinterpret_cast<double*>(ring.data()), kCount, dev),
                           ReduceOp::kMin, ring_opts));
        const double queued_s = SecondsSince(start);
        hold.Release();
        RELAY_RETURN_IF_ERROR(reduced.Wait(absl::Seconds(60)));
        RELAY_RETURN_IF_ERROR(all.Wait(absl::Seconds(60)));
        RELAY_RETURN_IF_ERROR(ringed.Wait(absl::Seconds(60)));
        if (queued_s > 5) {
          return absl::InternalError(absl::StrCat(
              "the first calls waited ", queued_s, " s for the busy GPU (rank ", rank, ")"));
        }
        std::vector<double> got_sum(kCount), got_all(kCount * n), got_ring(kCount);
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(got_sum.data(), sum.data(), kCount * 8,
                                                   cudaMemcpyDeviceToHost), "copy out"));
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(got_all.data(), gathered.data(),
                                                   kCount * 8 * n, cudaMemcpyDeviceToHost),
                                        "copy out"));
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(got_ring.data(), ring.data(), kCount * 8,
                                                   cudaMemcpyDeviceToHost), "copy out"));
        for (size_t i = 0; i < kCount; ++i) {
          double want = value(i, 0), least = value(i, 0);
          for (int r = 1; r < n; ++r) {
            want = std::max(want, value(i, r));
            least = std::min(least, value(i, r));
          }
          if (got_sum[i] != want) {
            return absl::InternalError(absl::StrCat("all_reduce element ", i, ": ", got_sum[i],
                                                    ", want ", want));
          }
          if (got_ring[i] != least) {
            return absl::InternalError(absl::StrCat("ring all_reduce element ", i, ": ",
                                                    got_ring[i], ", want ", least));
          }
          for (int r = 0; r < n; ++r) {
            if (got_all[r * kCount + i] != value(i, r)) {
              return absl::InternalError(absl::StrCat("all_gather rank ", r, " element ", i,
                                                      ": ", got_all[r * kCount + i], ", want ",
                                                      value(i, r)));
            }
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcTransportTest, AllReduceEveryDtypeAndOp) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = EveryDtypeAndOp();
  EXPECT_TRUE(s.ok()) << s;
}

// The same with 128-byte lines (from 256 KiB to 3.75 MiB on 2 ranks).
TEST(CudaIpcTransportTest, AllReduceEveryDtypeAndOpOnLines) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = EveryDtypeAndOp({{"RELAY_CUDA_IPC_LINES_BYTES", "3932160"}});
  EXPECT_TRUE(s.ok()) << s;
}

// The same with two-shot on words in place of the one-shot words, so
// that every call up to 1 MiB takes it.
TEST(CudaIpcTransportTest, AllReduceEveryDtypeAndOpTwoShotOnWords) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = EveryDtypeAndOp({{"RELAY_CUDA_IPC_LOW_LATENCY_BYTES", "0"},
                                    {"RELAY_CUDA_IPC_TWO_SHOT_WORDS_BYTES", "1048576"}});
  EXPECT_TRUE(s.ok()) << s;
}

// The same with the one-shot paths off: every size two-shot.
TEST(CudaIpcTransportTest, AllReduceEveryDtypeAndOpTwoShot) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = EveryDtypeAndOp({{"RELAY_CUDA_IPC_ONE_SHOT_BYTES", "0"}});
  EXPECT_TRUE(s.ok()) << s;
}

// Calls larger than a quarter of the arena run in pieces, and many calls
// in a row use both halves in turn.
TEST(CudaIpcTransportTest, PiecesAndManyCallsInARow) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_ARENA_BYTES", "1048576", 1);
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum,
                                             (3 << 20) / 4 + 5, 0, false, 7));
        for (int i = 0; i < 100; ++i) {
          RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kBfloat16, ReduceOp::kSum,
                                               i % 2 ? 999 : 200000, 0, i % 3 == 0, i));
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  unsetenv("RELAY_CUDA_IPC_ARENA_BYTES");
  EXPECT_TRUE(s.ok()) << s;
}

// Runs `kind` (every rank's buffers at element offset `offset` of their
// allocations, which may differ by rank) and checks every element of this
// rank's output against the reference.
absl::Status CheckCollective(Communicator& comm, CollectiveKind kind, DataType dtype,
                             ReduceOp op, size_t count, size_t offset, int root) {
  const int rank = comm.rank(), n = comm.size();
  const size_t esize = DataTypeSize(dtype);
  const bool send_per_rank = kind == CollectiveKind::kReduceScatter ||
                             kind == CollectiveKind::kScatter ||
                             kind == CollectiveKind::kAllToAll;
  const bool recv_per_rank = kind == CollectiveKind::kAllGather ||
                             kind == CollectiveKind::kGather ||
                             kind == CollectiveKind::kAllToAll;
  const size_t send_count = send_per_rank ? count * n : count;
  const size_t recv_count = recv_per_rank ? count * n : count;
  std::vector<char> host = Encode(dtype, InputValues(dtype, op, rank, send_count));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate((send_count + offset) * esize));
  RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate((recv_count + offset) * esize));
  char* src = reinterpret_cast<char*>(in.data()) + offset * esize;
  char* dst = reinterpret_cast<char*>(out.data()) + offset * esize;
  RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(src, host.data(), send_count * esize,
                                             cudaMemcpyHostToDevice), "cudaMemcpy"));
  const Device dev = Device::Cuda(GpuOfLocalRank(rank));
  RELAY_ASSIGN_OR_RETURN(
      Request r, comm.Collective(kind, ConstBuffer{src, send_count, dtype, dev},
                                 Buffer{dst, recv_count, dtype, dev}, op, root));
  RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
  if ((kind == CollectiveKind::kGather || kind == CollectiveKind::kReduce) && rank != root) {
    return absl::OkStatus();
  }
  std::vector<char> got(recv_count * esize);
  RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(got.data(), dst, recv_count * esize,
                                             cudaMemcpyDeviceToHost), "cudaMemcpy"));
  for (size_t i = 0; i < recv_count; ++i) {
    const double want = ExpectedValue(kind, dtype, op, root, rank, n, count, i);
    const double have = DecodeAt(dtype, got.data(), i);
    if (!Matches(dtype, op, want, have)) {
      return absl::InternalError(absl::StrCat(
          CollectiveName(kind), " ", DataTypeName(dtype), " ", ReduceOpName(op), " count ",
          count, " offset ", offset, ": element ", i, " is ", have, ", want ", want,
          " (rank ", rank, ")"));
    }
  }
  return absl::OkStatus();
}

// Ranks whose buffers are aligned differently move the data in different
// units; every block must still take the same share on every rank.
TEST(CudaIpcTransportTest, BuffersAlignedDifferentlyOnEachRank) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const size_t offset = comm.rank() == 0 ? 0 : 1;
        // Low latency, one-shot and two-shot all_reduce.
        for (size_t count : {size_t{4099}, size_t{300001}, size_t{3000001}}) {
          RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum,
                                               count, offset, false, 3));
        }
        for (CollectiveKind kind :
             {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
              CollectiveKind::kAllToAll, CollectiveKind::kBroadcast,
              CollectiveKind::kGather, CollectiveKind::kScatter, CollectiveKind::kReduce}) {
          for (size_t count : {size_t{13}, size_t{300001}}) {
            RELAY_RETURN_IF_ERROR(CheckCollective(comm, kind, DataType::kBfloat16,
                                                  ReduceOp::kSum, count, offset, 1));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Small all_gathers, all_to_alls and reduce_scatters (low-latency words
// where the setting allows, ipc_low_latency.cu): every dtype, and every op
// for reduce_scatter, with chunks of 1 element, a tail after the last
// whole 8-byte unit, and the largest low-latency chunk (`largest_bytes`:
// the limit) and one element more; buffers aligned on one rank and not on
// the other. Then 300 calls in a row that mix them with all_reduces on
// both paths and flag-barrier broadcasts and reduces, so every kind of call
// follows every other in both arena halves.
absl::Status SmallExchanges(size_t largest_bytes) {
  return RunRanks(
      2, Factory(), DefaultEngine(),
      [largest_bytes](Communicator& comm) -> absl::Status {
        const size_t offset = comm.rank();
        for (DataType dtype : AllDataTypes()) {
          const size_t esize = DataTypeSize(dtype);
          const size_t largest = largest_bytes / esize;
          for (size_t count : {size_t{1}, size_t{13}, largest, largest + 1}) {
            for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kAllToAll}) {
              RELAY_RETURN_IF_ERROR(
                  CheckCollective(comm, kind, dtype, ReduceOp::kSum, count, offset, 0));
            }
            for (ReduceOp op : AllReduceOps()) {
              RELAY_RETURN_IF_ERROR(CheckCollective(comm, CollectiveKind::kReduceScatter, dtype,
                                                    op, count, offset, 0));
            }
          }
        }
        const CollectiveKind kinds[] = {CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                        CollectiveKind::kReduceScatter,
                                        CollectiveKind::kAllToAll, CollectiveKind::kReduce};
        for (int i = 0; i < 300; ++i) {
          const size_t count = i % 7 == 0 ? 40000 : 1 + (i * 37) % 5000;
          if (i % 3 == 0) {
            RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum,
                                                 count, 0, i % 2 == 0, i));
          } else {
            RELAY_RETURN_IF_ERROR(CheckCollective(comm, kinds[i % 5], DataType::kFloat32,
                                                  ReduceOp::kSum, count, 0, i % 2));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
}

TEST(CudaIpcTransportTest, SmallExchangesOnLowLatencyWords) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = SmallExchanges(256 << 10);  // The default limit on 2 ranks.
  EXPECT_TRUE(s.ok()) << s;
}

// Up to what the region holds on 2 ranks (1 MiB, the setting's most).
TEST(CudaIpcTransportTest, SmallExchangesUpToTheRegion) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_LOW_LATENCY_BYTES", "1048576", 1);
  absl::Status s = SmallExchanges(1 << 20);
  unsetenv("RELAY_CUDA_IPC_LOW_LATENCY_BYTES");
  EXPECT_TRUE(s.ok()) << s;
}

// The same with the low-latency path off: small calls take the flag path.
TEST(CudaIpcTransportTest, SmallExchangesWithFlagBarriers) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_LOW_LATENCY_BYTES", "0", 1);
  absl::Status s = SmallExchanges(256 << 10);
  unsetenv("RELAY_CUDA_IPC_LOW_LATENCY_BYTES");
  EXPECT_TRUE(s.ok()) << s;
}

// Calls of 64 MiB and more move in steps (ipc_exchange.cu): every kind,
// with data that 4 steps do not divide evenly and a tail after the last
// whole 16-byte unit, aligned and misaligned differently per rank; and
// large all_reduces, one in two pieces.
TEST(CudaIpcTransportTest, LargeChunksGoInSteps) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        for (size_t offset : {size_t{0}, static_cast<size_t>(comm.rank())}) {
          // 40 MiB + 28 bytes of float32, 26 MiB + 2 bytes of bfloat16,
          // 100 MiB (in 64 MiB pieces).
          RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum,
                                               (10 << 20) + 7, offset, false, 5));
          RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kBfloat16, ReduceOp::kMax,
                                               (13 << 20) + 1, offset, true, 6));
          RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum,
                                               25 << 20, offset, false, 7));
          for (CollectiveKind kind :
               {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                CollectiveKind::kAllToAll, CollectiveKind::kBroadcast,
                CollectiveKind::kGather, CollectiveKind::kScatter, CollectiveKind::kReduce}) {
            // Chunks of 32 MiB + 20 bytes of float32 and 36 MiB + 6 bytes
            // of bfloat16 (on 2 ranks, 64 MiB or more a call: 4 steps).
            RELAY_RETURN_IF_ERROR(CheckCollective(comm, kind, DataType::kFloat32,
                                                  ReduceOp::kSum, (8 << 20) + 5, offset, 1));
            RELAY_RETURN_IF_ERROR(CheckCollective(comm, kind, DataType::kBfloat16,
                                                  ReduceOp::kMax, (18 << 20) + 3, offset, 0));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// all_gather into a symmetric window: every element checked, for sizes
// from 1 element (staged: windows serve calls from 32 MiB) to 32 MiB a rank
// (stored straight into the peers' outputs), aligned and misaligned, in
// place and not, and around a staged call; then bad registrations are
// InvalidArgument on every rank (a rank refusing its region alone fails
// its peers too), and after DeregisterWindow the same buffers take the
// staged path again.
TEST(CudaIpcTransportTest, AllGatherIntoAWindow) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const int rank = comm.rank(), n = comm.size();
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        constexpr size_t kMost = (8 << 20) + 5;  // Floats per rank.
        // The window sits 256 bytes into its allocation on rank 1 only.
        const size_t lead = rank == 1 ? 256 : 0;
        const size_t window_bytes = (kMost * n + 64) * 4;
        RELAY_ASSIGN_OR_RETURN(DeviceBytes alloc, DeviceBytes::Allocate(window_bytes + lead));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(kMost * 4 + 64));
        char* window = alloc.data() + lead;
        RELAY_RETURN_IF_ERROR(comm.RegisterWindow(
            Buffer{window, window_bytes / 4, DataType::kFloat32, dev}));
        auto check = [&](size_t count, size_t out_offset, bool in_place, int salt,
                         bool also_staged) -> absl::Status {
          float* out = reinterpret_cast<float*>(window + out_offset);
          float* src = in_place ? out + rank * count : reinterpret_cast<float*>(in.data() + 4);
          std::vector<float> mine(count), got(count * n);
          for (size_t i = 0; i < count; ++i) {
            mine[i] = static_cast<float>((i * 7 + rank * 1000 + salt * 13) % 100003);
          }
          RELAY_RETURN_IF_ERROR(CudaCheck(
              cudaMemcpy(src, mine.data(), count * 4, cudaMemcpyHostToDevice), "copy in"));
          RELAY_ASSIGN_OR_RETURN(Request r, comm.AllGather(ConstBuffer::Of(src, count, dev),
                                                           Buffer::Of(out, count * n, dev)));
          RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
          if (also_staged) {  // A staged call between direct ones.
            RELAY_RETURN_IF_ERROR(CheckCollective(comm, CollectiveKind::kAllGather,
                                                  DataType::kFloat32, ReduceOp::kSum, 1001,
                                                  0, 0));
          }
          RELAY_RETURN_IF_ERROR(CudaCheck(
              cudaMemcpy(got.data(), out, count * n * 4, cudaMemcpyDeviceToHost), "copy out"));
          for (size_t i = 0; i < count * n; ++i) {
            const size_t q = i / count, j = i % count;
            const float want = static_cast<float>((j * 7 + q * 1000 + salt * 13) % 100003);
            if (got[i] != want) {
              return absl::InternalError(absl::StrCat(
                  "count ", count, " offset ", out_offset, in_place ? " in place" : "",
                  ": element ", i, " is ", got[i], ", want ", want, " (rank ", rank, ")"));
            }
          }
          return absl::OkStatus();
        };
        int salt = 0;
        for (size_t count : {size_t{1}, size_t{4099}, size_t{300001}, kMost}) {
          RELAY_RETURN_IF_ERROR(check(count, 0, false, ++salt, false));
          RELAY_RETURN_IF_ERROR(check(count, 4, false, ++salt, true));
          RELAY_RETURN_IF_ERROR(check(count, 256, true, ++salt, false));
        }
        // Refused alike on every rank: sizes that differ, a region that
        // overlaps the window.
        absl::Status differ = comm.RegisterWindow(
            Buffer{in.data(), rank == 0 ? size_t{64} : size_t{32}, DataType::kFloat32, dev});
        if (differ.code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("sizes differ: ", differ.ToString()));
        }
        absl::Status overlap = comm.RegisterWindow(
            Buffer{window + 1024, 16, DataType::kFloat32, dev});
        if (overlap.code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("overlap: ", overlap.ToString()));
        }
        // Host memory on rank 0 only: rank 1 fails too, and nothing hangs.
        std::vector<float> host(16);
        absl::Status on_host = comm.RegisterWindow(
            rank == 0 ? Buffer::Of(host.data(), 16, dev)
                      : Buffer{in.data(), 16, DataType::kFloat32, dev});
        if (on_host.code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("host memory: ", on_host.ToString()));
        }
        RELAY_RETURN_IF_ERROR(comm.DeregisterWindow(window));
        absl::Status again = comm.DeregisterWindow(window);
        if (again.code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat("deregistered twice: ", again.ToString()));
        }
        // The same buffers, staged now.
        return check(4099, 4, false, ++salt, false);
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// all_reduce into a symmetric window: every element checked, float32 and
// bfloat16, from 4099 elements (staged: windows serve calls from 32 MiB)
// to past 32 MiB with a tail (two-shot, the reduced slices stored straight
// into the peers' outputs), aligned and misaligned, in place and not, and
// around a staged call. In a 64 MiB arena a window call's pieces are
// 32 MiB, so these calls go in 2 to 4 of them.
TEST(CudaIpcTransportTest, AllReduceIntoAWindow) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_ARENA_BYTES", "67108864", 1);
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const Device dev = Device::Cuda(GpuOfLocalRank(comm.rank()));
        constexpr size_t kMost = (size_t{24} << 20) + 5;  // float32: 96 MiB and a tail.
        const size_t window_bytes = kMost * 4 + 256;
        RELAY_ASSIGN_OR_RETURN(DeviceBytes alloc, DeviceBytes::Allocate(window_bytes));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(window_bytes));
        char* window = alloc.data();
        RELAY_RETURN_IF_ERROR(comm.RegisterWindow(
            Buffer{window, window_bytes / 4, DataType::kFloat32, dev}));
        int salt = 0;
        for (DataType dtype : {DataType::kFloat32, DataType::kBfloat16}) {
          const size_t esize = DataTypeSize(dtype);
          for (size_t count : {size_t{4099}, (size_t{32} << 20) / esize + 3, kMost * 4 / esize}) {
            for (size_t offset : {size_t{0}, size_t{4}}) {
              if (offset + count * esize > window_bytes) continue;
              RELAY_RETURN_IF_ERROR(CheckAllReduceAt(comm, dtype, ReduceOp::kSum, count,
                                                     in.data() + offset, window + offset,
                                                     ++salt));
              RELAY_RETURN_IF_ERROR(CheckCollective(comm, CollectiveKind::kAllReduce, dtype,
                                                    ReduceOp::kMax, 1001, 0, 0));
            }
          }
          // In place, in the window.
          RELAY_RETURN_IF_ERROR(CheckAllReduceAt(comm, dtype, ReduceOp::kAvg,
                                                 (size_t{40} << 20) / esize + 1, window + 16,
                                                 window + 16, ++salt));
        }
        return comm.DeregisterWindow(window);
      },
      {}, OneGpuPerRank());
  unsetenv("RELAY_CUDA_IPC_ARENA_BYTES");
  EXPECT_TRUE(s.ok()) << s;
}

// A window whose memory one rank frees while it is registered: that
// rank's call (`kind`: all_gather or all_reduce of 32 MiB) into it is
// InvalidArgument, its peer's fails naming it (not a deadline), nothing is
// stored into the peer's window, and each communicator is aborted: later
// calls fail.
void WindowFreedWhileRegistered(CollectiveKind kind) {
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [kind](Communicator& comm) { return CheckWindowFreedWhileRegistered(comm, kind, 1); },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcTransportTest, WindowFreedWhileRegistered) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  WindowFreedWhileRegistered(CollectiveKind::kAllGather);
}

// In a 32 MiB arena the all_reduce goes in three pieces: the peer's
// later pieces must give up at once after its first reports the refusal
// (the watchdog aborts on a kernel's error), not wait for the deadline.
TEST(CudaIpcTransportTest, WindowFreedWhileRegisteredAllReduceInPieces) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_ARENA_BYTES", "33554432", 1);
  WindowFreedWhileRegistered(CollectiveKind::kAllReduce);
  unsetenv("RELAY_CUDA_IPC_ARENA_BYTES");
}

// The conformance matrix on `n` GPUs, ranks as threads: the native
// collectives (every collective; counts 0, 1, one not divisible by the
// ranks, one over a million; every root; in place and not; every dtype and
// op for the reductions), and relay's own algorithms over cuda_ipc's
// point-to-point (collectives/stream_executor.h).
void RunConformance(int n) {
  std::vector<std::string> failures;
  absl::Status s = RunDeviceConformance(Factory(), n, &failures);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcConformanceTest, TwoGpus) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  RunConformance(2);
}

// With a 1 MiB arena every large case runs in pieces.
TEST(CudaIpcConformanceTest, TwoGpusInPieces) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_ARENA_BYTES", "1048576", 1);
  RunConformance(2);
  unsetenv("RELAY_CUDA_IPC_ARENA_BYTES");
}

TEST(CudaIpcConformanceTest, AllGpus) {
  if (Ranks() < 3) GTEST_SKIP() << "needs 3 or more ranks, " << Ranks() << " here";
  RunConformance(std::min(Ranks(), 8));
}

// Fills `count` bytes at `p` with a pattern of (seed, index).
absl::Status FillPattern(char* p, size_t count, int seed) {
  std::vector<unsigned char> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<unsigned char>(i * 31 + seed * 7 + (i >> 11));
  return CudaCheck(cudaMemcpy(p, host.data(), count, cudaMemcpyHostToDevice), "cudaMemcpy");
}
absl::Status CheckPattern(const char* p, size_t count, int seed, const std::string& what) {
  std::vector<unsigned char> host(count);
  RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(host.data(), p, count, cudaMemcpyDeviceToHost),
                                  "cudaMemcpy"));
  for (size_t i = 0; i < count; ++i) {
    const auto want = static_cast<unsigned char>(i * 31 + seed * 7 + (i >> 11));
    if (host[i] != want) {
      return absl::InternalError(absl::StrCat(what, ": byte ", i, " of ", count, " is ",
                                              host[i], ", want ", want));
    }
  }
  return absl::OkStatus();
}

// Sends and receives: both ways at once in one batch, sizes from nothing to
// many chunks, buffers misaligned, two messages to one peer in one batch,
// a message to itself, and 200 small ones in a row (the chunk counters).
TEST(CudaIpcTransportTest, SendAndReceive) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const int rank = comm.rank(), peer = 1 - rank;
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        auto bytes_of = [&](size_t n, char* p) {
          return ConstBuffer{p, n, DataType::kUint8, dev};
        };
        int round = 0;
        for (size_t n : {size_t{0}, size_t{1}, size_t{4099}, size_t{(1 << 20) + 16},
                         size_t{3 << 20} + 5, size_t{40} << 20}) {
          for (size_t offset : {size_t{0}, size_t{3}}) {
            ++round;
            RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate(2 * n + 64));
            RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(2 * n + 64));
            char* send_a = reinterpret_cast<char*>(out.data()) + offset;
            char* send_b = send_a + n;
            char* recv_a = reinterpret_cast<char*>(in.data()) + offset;
            char* recv_b = recv_a + n;
            RELAY_RETURN_IF_ERROR(FillPattern(send_a, n, round * 4 + rank * 2));
            RELAY_RETURN_IF_ERROR(FillPattern(send_b, n, round * 4 + rank * 2 + 1));
            // Two messages each way; the receives posted before the sends
            // on one rank and after them on the other.
            std::vector<P2POp> ops = {
                P2POp::Send(bytes_of(n, send_a), peer), P2POp::Send(bytes_of(n, send_b), peer),
                P2POp::Recv(Buffer{recv_a, n, DataType::kUint8, dev}, peer),
                P2POp::Recv(Buffer{recv_b, n, DataType::kUint8, dev}, peer)};
            if (rank == 1) std::rotate(ops.begin(), ops.begin() + 2, ops.end());
            RELAY_ASSIGN_OR_RETURN(Request r, comm.BatchSendRecv(ops));
            RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
            const std::string what = absl::StrCat(n, " bytes at offset ", offset);
            RELAY_RETURN_IF_ERROR(CheckPattern(recv_a, n, round * 4 + peer * 2, what));
            RELAY_RETURN_IF_ERROR(CheckPattern(recv_b, n, round * 4 + peer * 2 + 1, what));
          }
        }
        // To itself, 2.5 chunks.
        const size_t n = (5 << 19) + 7;
        RELAY_ASSIGN_OR_RETURN(DeviceBytes a, DeviceBytes::Allocate(n));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes b, DeviceBytes::Allocate(n));
        char* pa = reinterpret_cast<char*>(a.data());
        char* pb = reinterpret_cast<char*>(b.data());
        RELAY_RETURN_IF_ERROR(FillPattern(pa, n, 99 + rank));
        const P2POp self[] = {P2POp::Recv(Buffer{pb, n, DataType::kUint8, dev}, rank),
                              P2POp::Send(bytes_of(n, pa), rank)};
        RELAY_ASSIGN_OR_RETURN(Request r, comm.BatchSendRecv(self));
        RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
        RELAY_RETURN_IF_ERROR(CheckPattern(pb, n, 99 + rank, "to itself"));
        // 200 small messages, one Send and one Recv each (rank 0 sends
        // first, rank 1 receives first).
        for (int i = 0; i < 200; ++i) {
          const size_t m = 1 + (i * 37) % 3000;
          RELAY_RETURN_IF_ERROR(FillPattern(pa, m, i + rank));
          absl::StatusOr<Request> first =
              rank == 0 ? comm.Send(bytes_of(m, pa), peer, i)
                        : comm.Recv(Buffer{pb, m, DataType::kUint8, dev}, peer, i);
          RELAY_RETURN_IF_ERROR(first.status());
          absl::StatusOr<Request> second =
              rank == 0 ? comm.Recv(Buffer{pb, m, DataType::kUint8, dev}, peer, i)
                        : comm.Send(bytes_of(m, pa), peer, i);
          RELAY_RETURN_IF_ERROR(second.status());
          RELAY_RETURN_IF_ERROR(first->Wait(absl::Seconds(60)));
          RELAY_RETURN_IF_ERROR(second->Wait(absl::Seconds(60)));
          RELAY_RETURN_IF_ERROR(CheckPattern(pb, m, i + peer, absl::StrCat("message ", i)));
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// A receive whose count differs from its send's fails with InvalidArgument
// naming the sender, and nothing crashes.
TEST(CudaIpcTransportTest, ReceiveOfAnotherSizeIsAnError) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const Device dev = Device::Cuda(GpuOfLocalRank(comm.rank()));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(4096));
        float* p = reinterpret_cast<float*>(d.data());
        if (comm.rank() == 0) {
          RELAY_ASSIGN_OR_RETURN(Request r, comm.Send(ConstBuffer::Of(p, 100, dev), 1));
          return r.Wait(absl::Seconds(60));
        }
        RELAY_ASSIGN_OR_RETURN(Request r, comm.Recv(Buffer::Of(p, 50, dev), 0));
        absl::Status w = r.Wait(absl::Seconds(60));
        if (w.code() != absl::StatusCode::kInvalidArgument ||
            std::string(w.message()).find("rank 0") == std::string::npos) {
          return absl::InternalError(absl::StrCat("want InvalidArgument, got ", w.ToString()));
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// The arena's bytes show in the communicator's metrics.
TEST(CudaIpcTransportTest, ArenaBytesInTheMetrics) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  setenv("RELAY_CUDA_IPC_ARENA_BYTES", "1048576", 1);
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        // 2 x 512 KiB halves, after 32 KiB of flags, 8 MiB of low-latency
        // words, 16 MiB of point-to-point channels and 16 MiB of lines.
        const uint64_t want = (1 << 20) + (32 << 10) + (40 << 20);
        const std::string text = comm.MetricsText();
        const std::string line = absl::StrCat("relay_transport_device_bytes{rank=\"",
                                              comm.rank(), "\",size=\"2\",transport=\"cuda_ipc\"} ", want);
        if (text.find(line) == std::string::npos) {
          return absl::InternalError(absl::StrCat("no line '", line, "' in:\n", text));
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  unsetenv("RELAY_CUDA_IPC_ARENA_BYTES");
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcTransportTest, RejectsMemoryItCannotMove) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::StatusOr<std::vector<DeviceBytes>> every_gpu = AllocateOnEveryGpu();
  ASSERT_TRUE(every_gpu.ok()) << every_gpu.status();
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [&](Communicator& comm) { return CheckRejectsMemoryItCannotMove(comm, *every_gpu); }, {},
      OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcTransportTest, OnDoneRunsWithoutAWaiter) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(2, Factory(), DefaultEngine(), CheckOnDoneRunsWithoutAWaiter, {},
                            OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Rank 1 stops after a first call: rank 0's next call of `count` floats
// ends at its deadline with DeadlineExceeded, its kernel gives up on rank 1
// then too (so the GPU is free again), and Abort returns promptly.
// all_reduce of 1 MiB waits at a flag barrier, of 256 bytes and all_gather
// on low-latency words.
void PeerStopsParticipating(CollectiveKind kind, size_t count) {
  std::atomic<bool> rank0_done{false};
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(4 << 20));
        float* p = reinterpret_cast<float*>(d.data());
        const size_t out_count = kind == CollectiveKind::kAllGather ? 2 * count : count;
        const ConstBuffer in = ConstBuffer::Of(p, count, Device::Cuda(GpuOfLocalRank(rank)));
        const Buffer out =
            Buffer::Of(p + (1 << 20) / 4, out_count, Device::Cuda(GpuOfLocalRank(rank)));
        auto call = [&](CollectiveOptions opts) {
          return comm.Collective(kind, in, out, ReduceOp::kSum, 0, opts);
        };
        RELAY_ASSIGN_OR_RETURN(Request warm, call({}));
        RELAY_RETURN_IF_ERROR(warm.Wait(absl::Seconds(60)));
        if (rank == 1) {
          // Ranks as processes (under a launcher) cannot see rank 0's flag:
          // rank 1 then stays out for 10 s, longer than rank 0's part, and
          // aborts so that its teardown does not wait for rank 0's.
          const absl::Time until = absl::Now() + absl::Seconds(10);
          while (!rank0_done && absl::Now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          return rank0_done ? absl::OkStatus() : comm.Abort();
        }
        CollectiveOptions opts;
        opts.timeout = absl::Seconds(2);
        const absl::Time start = absl::Now();
        RELAY_ASSIGN_OR_RETURN(Request r, call(opts));
        absl::Status w = r.Wait();
        const absl::Duration took = absl::Now() - start;
        EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded) << w;
        EXPECT_LT(took, absl::Seconds(3)) << "took " << took;
        // The kernel gave up on rank 1 at the same deadline (its own
        // clock): the request completes, failed, without an Abort.
        for (int i = 0; i < 2000 && !r.Test(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_TRUE(r.Test());
        EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
        const absl::Time abort_start = absl::Now();
        EXPECT_TRUE(comm.Abort().ok());
        EXPECT_LT(absl::Now() - abort_start, absl::Seconds(5));
        rank0_done = true;
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  rank0_done = true;
  EXPECT_TRUE(s.ok()) << s;
}

TEST(CudaIpcTransportTest, PeerThatStopsParticipatingIsADeadline) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  PeerStopsParticipating(CollectiveKind::kAllReduce, 1 << 18);
  PeerStopsParticipating(CollectiveKind::kAllReduce, 64);
  PeerStopsParticipating(CollectiveKind::kAllGather, 64);
}

// Calls alternate between the transport's stream after the caller's
// (kAfterStream) and two caller streams (kOnStream), with no host wait
// between them: each still runs after the previous one (the transport
// orders them on the device), and a third stream that StreamWaits on a
// request reads that call's result: right after the call (the request is
// the transport's latest) or once every call is queued (an older one).
// Every element of every call is checked.
TEST(CudaIpcTransportTest, CallsOnSeveralStreamsStayInOrder) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  constexpr int kCalls = 60;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        RELAY_ASSIGN_OR_RETURN(DeviceStream a, DeviceStream::Create());
        RELAY_ASSIGN_OR_RETURN(DeviceStream b, DeviceStream::Create());
        RELAY_ASSIGN_OR_RETURN(DeviceStream reader, DeviceStream::Create());
        cudaStream_t reader_stream = static_cast<cudaStream_t>(reader.get());
        // Low-latency, one-shot and two-shot sizes (floats).
        const size_t counts[] = {1000, 70001, 1200001};
        size_t total = 0;
        for (int k = 0; k < kCalls; ++k) total += counts[k % 3];
        RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(total * 4));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate(total * 4));
        float* host_in = nullptr;
        float* host_out = nullptr;
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMallocHost(&host_in, total * 4), "cudaMallocHost"));
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMallocHost(&host_out, total * 4), "cudaMallocHost"));
        auto value = [](size_t i, int k, int r) {
          return static_cast<float>((i * 7 + k * 13 + r * 101) % 1000);
        };
        absl::Status result = absl::OkStatus();
        std::vector<Request> requests;
        // Reads call k's result on the reader stream, after the call.
        std::vector<std::function<absl::Status()>> deferred;
        size_t offset = 0;
        for (int k = 0; k < kCalls && result.ok(); ++k) {
          const size_t count = counts[k % 3];
          for (size_t i = 0; i < count; ++i) host_in[offset + i] = value(i, k, rank);
          CollectiveOptions opts;
          opts.stream = (k % 3 == 2 ? b : a).get();
          opts.stream_order = k % 3 == 0 ? StreamOrder::kAfterStream : StreamOrder::kOnStream;
          float* src = reinterpret_cast<float*>(in.data()) + offset;
          float* dst = reinterpret_cast<float*>(out.data()) + offset;
          result = CudaCheck(cudaMemcpyAsync(src, host_in + offset, count * 4,
                                             cudaMemcpyHostToDevice,
                                             static_cast<cudaStream_t>(opts.stream)),
                             "copy in");
          if (!result.ok()) break;
          absl::StatusOr<Request> r = comm.AllReduce(ConstBuffer::Of(src, count, dev),
                                                     Buffer::Of(dst, count, dev),
                                                     ReduceOp::kSum, opts);
          if (!r.ok()) {
            result = r.status();
            break;
          }
          requests.push_back(*std::move(r));
          auto read = [&, k, dst, count, at = offset]() -> absl::Status {
            RELAY_RETURN_IF_ERROR(requests[k].StreamWait(reader_stream));
            return CudaCheck(cudaMemcpyAsync(host_out + at, dst, count * 4,
                                             cudaMemcpyDeviceToHost, reader_stream),
                             "copy out");
          };
          if (k % 2 == 0) {
            result = read();
          } else {
            deferred.push_back(read);
          }
          offset += count;
        }
        for (auto& read : deferred) {
          if (result.ok()) result = read();
        }
        for (Request& r : requests) {
          absl::Status w = r.Wait(absl::Seconds(60));
          if (result.ok()) result = w;
        }
        if (result.ok()) result = CudaCheck(cudaStreamSynchronize(reader_stream), "sync");
        offset = 0;
        for (int k = 0; k < kCalls && result.ok(); ++k) {
          const size_t count = counts[k % 3];
          for (size_t i = 0; i < count; ++i) {
            const float want = value(i, k, 0) + value(i, k, 1);
            if (host_out[offset + i] != want) {
              result = absl::InternalError(absl::StrCat("call ", k, " element ", i, ": ",
                                                        host_out[offset + i], ", want ",
                                                        want, " (rank ", rank, ")"));
              break;
            }
          }
          offset += count;
        }
        cudaFreeHost(host_in);
        cudaFreeHost(host_out);
        return result;
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// A caller's stream may be destroyed once its call is queued: the next
// call on another stream, and StreamWait on the old request, must not
// touch it.
TEST(CudaIpcTransportTest, CallerStreamDestroyedAfterItsCall) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const Device dev = Device::Cuda(GpuOfLocalRank(comm.rank()));
        RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(4096));
        float* p = reinterpret_cast<float*>(d.data());
        Request first;
        {
          RELAY_ASSIGN_OR_RETURN(DeviceStream gone, DeviceStream::Create());
          CollectiveOptions opts;
          opts.stream = gone.get();
          opts.stream_order = StreamOrder::kOnStream;
          RELAY_ASSIGN_OR_RETURN(first, comm.AllReduce(ConstBuffer::Of(p, 1024, dev),
                                                       Buffer::Of(p, 1024, dev),
                                                       ReduceOp::kMax, opts));
          RELAY_RETURN_IF_ERROR(
              CudaCheck(cudaStreamSynchronize(static_cast<cudaStream_t>(gone.get())), "sync"));
        }
        RELAY_ASSIGN_OR_RETURN(DeviceStream other, DeviceStream::Create());
        RELAY_RETURN_IF_ERROR(first.StreamWait(other.get()));
        RELAY_RETURN_IF_ERROR(CheckAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, 5000,
                                             0, false, 9));
        return first.Wait(absl::Seconds(60));
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// A call after the caller's stream (the default order) reads what the
// stream's last copy wrote, the copy held behind other work: on the
// caller's own stream, and on a blocking stream with the call on the
// legacy default stream, whose work waits for every blocking stream's.
// Small calls relaunch graphs, larger ones launch as dependents: both.
TEST(CudaIpcTransportTest, CallsAfterABusyStreamWaitForIt) {
  if (Ranks() < 2) GTEST_SKIP() << kNeedsTwo;
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        auto value = [](size_t i, int r, int round) {
          return static_cast<float>((i * 13 + r * 7 + round * 1000) % 4093);
        };
        for (size_t count : {size_t{4096}, size_t{131072}}) {
          const size_t bytes = count * sizeof(float);
          RELAY_ASSIGN_OR_RETURN(DeviceBytes in, DeviceBytes::Allocate(bytes));
          RELAY_ASSIGN_OR_RETURN(DeviceBytes fresh, DeviceBytes::Allocate(bytes));
          RELAY_ASSIGN_OR_RETURN(DeviceBytes out, DeviceBytes::Allocate(bytes));
          std::vector<float> stale(count), next(count);
          for (size_t i = 0; i < count; ++i) {
            stale[i] = value(i, rank, 0);
            next[i] = value(i, rank, 1);
          }
          RELAY_RETURN_IF_ERROR(fresh.CopyFrom(next.data(), bytes));
          for (bool legacy : {false, true}) {
            RELAY_RETURN_IF_ERROR(in.CopyFrom(stale.data(), bytes));
            cudaStream_t busy = nullptr;
            RELAY_RETURN_IF_ERROR(CudaCheck(
                cudaStreamCreateWithFlags(&busy, legacy ? cudaStreamDefault
                                                        : cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags"));
            absl::StatusOr<StreamHold> hold = StreamHold::On(busy);
            Request reduced;
            absl::Status called = hold.status();
            if (called.ok()) {
              called = CudaCheck(cudaMemcpyAsync(in.data(), fresh.data(), bytes,
                                                 cudaMemcpyDeviceToDevice, busy),
                                 "cudaMemcpyAsync");
            }
            if (called.ok()) {
              CollectiveOptions opts;  // After the stream.
              opts.stream = legacy ? nullptr : busy;
              absl::StatusOr<Request> r = comm.AllReduce(
                  ConstBuffer::Of(reinterpret_cast<const float*>(in.data()), count, dev),
                  Buffer::Of(reinterpret_cast<float*>(out.data()), count, dev),
                  ReduceOp::kSum, opts);
              called = r.status();
              if (r.ok()) reduced = *std::move(r);
            }
            absl::SleepFor(absl::Milliseconds(20));  // The copy is still held.
            if (hold.ok()) hold->Release();
            if (called.ok()) called = reduced.Wait(absl::Seconds(60));
            cudaStreamSynchronize(busy);
            cudaStreamDestroy(busy);
            RELAY_RETURN_IF_ERROR(called);
            std::vector<float> got(count);
            RELAY_RETURN_IF_ERROR(out.CopyTo(got.data(), bytes));
            for (size_t i = 0; i < count; ++i) {
              const float want = value(i, 0, 1) + value(i, 1, 1);
              if (got[i] != want) {
                return absl::InternalError(absl::StrCat(
                    "rank ", rank, ", ", count, " floats after ",
                    legacy ? "the legacy stream (copy on a blocking one)" : "its own stream",
                    ": element ", i, " is ", got[i], ", want ", want,
                    " (the call did not wait for the stream's copy)"));
              }
            }
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// A caller's stream destroyed while its call (an all_reduce) still waits
// behind other work (a StreamHold until the test releases it), then a new
// stream: a call there (a broadcast: another kernel, so another of the
// launcher's graphs, which would order calls of one kernel by themselves)
// must not run before the first one. CUDA hands the destroyed stream's
// handle out again while its work is pending (the test tries 256 new
// streams to get it, and says whether it did), so the transport tells
// streams apart by cudaStreamGetId, never by handle.
TEST(CudaIpcTransportTest, CallOnANewStreamWaitsForADestroyedStreamsCall) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const int ranks = std::min(Ranks(), 2);
  std::atomic<int> reused{0};
  absl::Status s = RunRanks(
      ranks, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const Device dev = Device::Cuda(GpuOfLocalRank(rank));
        constexpr size_t kCount = 4096;
        RELAY_ASSIGN_OR_RETURN(DeviceBytes d, DeviceBytes::Allocate(2 * kCount * 4));
        float* first_data = reinterpret_cast<float*>(d.data());
        float* second_data = first_data + kCount;
        std::vector<float> host(2 * kCount);
        for (size_t i = 0; i < host.size(); ++i) {
          host[i] = static_cast<float>((i * 7 + rank * 101) % 1000);
        }
        RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(first_data, host.data(), host.size() * 4,
                                                   cudaMemcpyHostToDevice), "copy in"));
        CollectiveOptions opts;
        opts.stream_order = StreamOrder::kOnStream;
        // One call of each kind first, unheld: this test checks ordering;
        // FirstCallsDoNotWaitForABusyGpu checks first calls.
        {
          RELAY_ASSIGN_OR_RETURN(DeviceStream warm, DeviceStream::Create());
          opts.stream = warm.get();
          RELAY_ASSIGN_OR_RETURN(
              Request r, comm.AllReduce(ConstBuffer::Of(second_data, kCount, dev),
                                        Buffer::Of(second_data, kCount, dev), ReduceOp::kSum,
                                        opts));
          RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
          RELAY_ASSIGN_OR_RETURN(r, comm.Broadcast(ConstBuffer::Of(second_data, kCount, dev),
                                                   Buffer::Of(second_data, kCount, dev), 0, opts));
          RELAY_RETURN_IF_ERROR(r.Wait(absl::Seconds(60)));
          RELAY_RETURN_IF_ERROR(CudaCheck(cudaMemcpy(second_data, host.data() + kCount,
                                                     kCount * 4, cudaMemcpyHostToDevice),
                                          "copy in"));
        }
        StreamHold hold;
        const auto held_at = std::chrono::steady_clock::now();
        Request first, second;
        void* gone_handle = nullptr;
        {
          RELAY_ASSIGN_OR_RETURN(DeviceStream gone, DeviceStream::Create());
          gone_handle = gone.get();
          RELAY_ASSIGN_OR_RETURN(hold, StreamHold::On(gone.get()));
          opts.stream = gone.get();
          RELAY_ASSIGN_OR_RETURN(first, comm.AllReduce(ConstBuffer::Of(first_data, kCount, dev),
                                                       Buffer::Of(first_data, kCount, dev),
                                                       ReduceOp::kSum, opts));
        }
        DeviceStream next;
        for (int tries = 0; tries < 256; ++tries) {
          RELAY_ASSIGN_OR_RETURN(next, DeviceStream::Create());
          if (next.get() == gone_handle) {
            reused.fetch_add(1);
            break;
          }
        }
        opts.stream = next.get();
        RELAY_ASSIGN_OR_RETURN(second, comm.Broadcast(ConstBuffer::Of(second_data, kCount, dev),
                                                      Buffer::Of(second_data, kCount, dev), 0,
                                                      opts));
        const double queued_s = SecondsSince(held_at);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const cudaError_t pending = cudaStreamQuery(static_cast<cudaStream_t>(next.get()));
        const bool second_done = second.Test();
        hold.Release();
        absl::Status result = first.Wait(absl::Seconds(60));
        absl::Status w = second.Wait(absl::Seconds(60));
        if (result.ok()) result = w;
        if (result.ok() && queued_s > 5) {
          result = absl::InternalError(absl::StrCat(
              "queueing the calls waited for the held stream (", queued_s, " s, rank ", rank,
              ")"));
        }
        if (result.ok() && (pending != cudaErrorNotReady || second_done)) {
          result = absl::InternalError(absl::StrCat(
              "the call on the new stream finished while the destroyed stream's call was held "
              "(stream query ", cudaGetErrorString(pending), ", request done ", second_done,
              ", rank ", rank, ")"));
        }
        std::vector<float> got(2 * kCount);
        if (result.ok()) {
          result = CudaCheck(cudaMemcpy(got.data(), first_data, got.size() * 4,
                                        cudaMemcpyDeviceToHost), "copy out");
        }
        for (size_t i = 0; result.ok() && i < got.size(); ++i) {
          // The all_reduce's sum over ranks, then the broadcast of rank 0's.
          float want = static_cast<float>((i * 7) % 1000);
          for (int r = 1; r < comm.size() && i < kCount; ++r) {
            want += static_cast<float>((i * 7 + r * 101) % 1000);
          }
          if (got[i] != want) {
            result = absl::InternalError(absl::StrCat(i < kCount ? "first" : "second",
                                                      " call, element ", i % kCount, ": ",
                                                      got[i], ", want ", want));
          }
        }
        return result;
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
  std::cout << "a destroyed stream's handle came back while its work was pending on "
            << reused.load() << " of " << ranks << " ranks\n";
}

// CheckCapturedCallsReplay (testing/device_transport_checks.h): 1,000
// replays (20 where processes share a GPU), on 2 ranks or on 1 (one GPU
// without a launcher: the host path and the capture are the same).
// `order`: a captured call goes on the caller's stream either way.
absl::Status CaptureAndReplay(StreamOrder order) {
  const int replays = SharedGpu() ? 20 : 1000;
  return RunRanks(
      std::min(Ranks(), 2), Factory(), DefaultEngine(),
      [&](Communicator& comm) { return CheckCapturedCallsReplay(comm, order, replays); }, {},
      OneGpuPerRank());
}

TEST(CudaIpcTransportTest, CapturedInAGraphAndReplayed) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const absl::Status s = CaptureAndReplay(StreamOrder::kOnStream);
  EXPECT_TRUE(s.ok()) << s;
}

// relay's own ring over the transport's point-to-point cannot be captured
// (its steps run on the stream executor's streams), and says so.
TEST(CudaIpcTransportTest, RelayAlgorithmRefusedInACapture) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const absl::Status s = RunRanks(std::min(Ranks(), 2), Factory(), DefaultEngine(),
                                  CheckRelayAlgorithmRefusedInCapture, {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// After the caller's stream is the default order; inside a capture it
// would fork the transport's stream into the graph, which EndCapture
// refuses as unjoined.
TEST(CudaIpcTransportTest, CapturedWithTheDefaultOrder) {
  if (Ranks() < 1) GTEST_SKIP() << "needs a GPU";
  const absl::Status s = CaptureAndReplay(StreamOrder::kAfterStream);
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace relay
