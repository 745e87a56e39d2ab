// The NCCL transport with ranks as threads, one GPU each (one process for
// all GPUs). Tests that need GPUs skip themselves where none (or too few)
// are visible; the process form of the conformance suite runs under
// tools/relayrun (bench/gpu/run_checks.sh).
#include "transports/nccl/nccl_transport.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "runtime/status_macros.h"
#include "testing/conformance.h"
#include "testing/device_memory.h"
#include "testing/device_transport_checks.h"
#include "testing/rank_harness.h"

namespace relay {
namespace {

NcclTransportFactory& Factory() {
  static NcclTransportFactory* f = new NcclTransportFactory();
  return *f;
}

int Gpus() { return ViableGpus(Factory()); }

TEST(NcclTransportFactoryTest, NotViableWithoutGpuSaysWhy) {
  if (Gpus() > 0) GTEST_SKIP() << "a GPU is visible";
  EXPECT_FALSE(Factory().IsViable());
  auto store = std::make_shared<InMemoryStore>();
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(
      {.rank = 0, .size = 1, .store = store, .transport = "nccl"});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition)
      << comm.status();
}

// The conformance matrix on `n` GPUs driven by one thread each: NCCL's
// native collectives and relay's own algorithms on device buffers.
void RunConformance(int n) {
  std::vector<std::string> failures;
  absl::Status s = RunDeviceConformance(Factory(), n, &failures);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(s.ok()) << s;
}

TEST(NcclConformanceTest, TwoGpus) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << Gpus() << " visible";
  RunConformance(2);
}

TEST(NcclConformanceTest, AllGpus) {
  if (Gpus() < 3) GTEST_SKIP() << "needs 3 or more GPUs, " << Gpus() << " visible";
  RunConformance(Gpus());
}

TEST(NcclConformanceTest, OneGpu) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  RunConformance(1);
}

// Transport::Abort's contract: a post after Abort is not refused; it
// completes at once with the abort's reason (so a collective still running
// when a peer's loss aborted the transport fails with that loss).
TEST(NcclTransportTest, PostAfterAbortCompletesWithTheReason) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  TransportConfig config;
  config.store = std::make_shared<InMemoryStore>();
  absl::StatusOr<std::unique_ptr<Transport>> t = Factory().Connect(config);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<DeviceBytes> dev = DeviceBytes::Allocate(64);
  ASSERT_TRUE(dev.ok()) << dev.status();
  float* d = reinterpret_cast<float*>(dev->data());
  (*t)->Abort(absl::UnavailableError("rank 7 left the group"));
  const P2POp ops[2] = {
      {P2POp::Kind::kSend, 0, 1, Buffer::Of(d, 8, Device::Cuda(0))},
      {P2POp::Kind::kRecv, 0, 1, Buffer::Of(d + 8, 8, Device::Cuda(0))}};
  absl::StatusOr<Request> r =
      (*t)->PostBatch(ops, nullptr, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Status s = r->Wait(absl::Seconds(5));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("rank 7"), absl::string_view::npos) << s;
}

// Bad input is InvalidArgument before anything is queued; one rank, and
// another GPU's memory where two are visible.
TEST(NcclTransportTest, RejectsMemoryItCannotMove) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  absl::StatusOr<std::vector<DeviceBytes>> every_gpu = AllocateOnEveryGpu();
  ASSERT_TRUE(every_gpu.ok()) << every_gpu.status();
  absl::Status s = RunRanks(
      1, Factory(), DefaultEngine(),
      [&](Communicator& comm) { return CheckRejectsMemoryItCannotMove(comm, *every_gpu); }, {},
      OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Two streams: a producer stream writes the gradients, the all_reduce waits
// for it on the GPU, and a consumer stream waits for the all_reduce with
// StreamWait; the host synchronizes the consumer stream only, never the
// device, and the values are right.
TEST(NcclTransportTest, StreamWaitOrdersWithoutHostBlocking) {
  const int n = std::min(Gpus(), 2);
  if (n < 1) GTEST_SKIP() << "no GPU visible";
  constexpr size_t kCount = 1 << 20;
  absl::Status s = RunRanks(
      n, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        cudaStream_t producer, consumer;
        cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking);
        cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking);
        std::vector<float> input(kCount), output(kCount, -1.0f);
        for (size_t i = 0; i < kCount; ++i) input[i] = float(rank + 1) * float(i % 1000);
        absl::StatusOr<DeviceBytes> grads = DeviceBytes::Allocate(kCount * 4);
        if (!grads.ok()) return grads.status();
        float* g = reinterpret_cast<float*>(grads->data());
        // "Compute" on the producer stream: the upload of this step's values.
        cudaMemcpyAsync(g, input.data(), kCount * 4, cudaMemcpyHostToDevice,
                        producer);
        CollectiveOptions opts;
        opts.stream = producer;
        absl::StatusOr<Request> r =
            comm.AllReduce(ConstBuffer::Of(g, kCount, Device::Cuda(rank)),
                           Buffer::Of(g, kCount, Device::Cuda(rank)),
                           ReduceOp::kSum, opts);
        if (!r.ok()) return r.status();
        if (absl::Status w = r->StreamWait(consumer); !w.ok()) return w;
        cudaMemcpyAsync(output.data(), g, kCount * 4, cudaMemcpyDeviceToHost,
                        consumer);
        if (cudaStreamSynchronize(consumer) != cudaSuccess) {
          return absl::InternalError("cudaStreamSynchronize");
        }
        const float factor = float(n * (n + 1) / 2);
        for (size_t i = 0; i < kCount; ++i) {
          if (output[i] != factor * float(i % 1000)) {
            return absl::InternalError(absl::StrCat(
                "element ", i, " is ", output[i], ", expected ",
                factor * float(i % 1000)));
          }
        }
        // The request completes on the host too, without a Wait.
        for (int i = 0; i < 10000 && !r->Test(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (!r->Test()) return absl::InternalError("Test never became true");
        cudaStreamDestroy(producer);
        cudaStreamDestroy(consumer);
        return r->status();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// StreamOrder::kOnStream: later work on the caller's stream sees the
// result with no StreamWait, for NCCL's native all_reduce (queued on that
// stream) and relay's ring (the communicator's StreamWait). The calls go
// on two streams in turn with no host wait between them, so only the
// transport's own ordering (each operation after the one posted before it,
// Core::last_done) keeps two of them from running at once; every request
// completes on the host too.
TEST(NcclTransportTest, OnStreamOrdersLaterWorkOnThatStream) {
  const int n = std::min(Gpus(), 2);
  if (n < 1) GTEST_SKIP() << "no GPU visible";
  constexpr size_t kCount = 1 << 18;
  constexpr int kCalls = 8;
  absl::Status s = RunRanks(
      n, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        cudaStream_t streams[2];
        for (cudaStream_t& st : streams) {
          cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        }
        std::vector<std::vector<float>> outputs(
            kCalls, std::vector<float>(kCount));
        absl::StatusOr<DeviceBytes> bytes =
            DeviceBytes::Allocate(kCalls * kCount * 4);
        if (!bytes.ok()) return bytes.status();
        float* base = reinterpret_cast<float*>(bytes->data());
        // Shared with the callbacks, which may outlive a failed run.
        auto completed = std::make_shared<std::atomic<int>>(0);
        std::vector<float> input(kCount);
        for (int call = 0; call < kCalls; ++call) {
          cudaStream_t st = streams[call % 2];
          float* g = base + call * kCount;
          for (size_t i = 0; i < kCount; ++i) {
            input[i] = float(rank + 1) * float((i + call) % 1000);
          }
          // From pageable memory: returns once `input` may be reused.
          cudaMemcpyAsync(g, input.data(), kCount * 4, cudaMemcpyHostToDevice,
                          st);
          CollectiveOptions opts;
          opts.stream = st;
          opts.stream_order = StreamOrder::kOnStream;
          opts.algorithm = call % 4 < 2 ? Algorithm::kNative : Algorithm::kRing;
          absl::StatusOr<Request> r = comm.AllReduce(
              ConstBuffer::Of(g, kCount, Device::Cuda(rank)),
              Buffer::Of(g, kCount, Device::Cuda(rank)), ReduceOp::kSum, opts);
          if (!r.ok()) return r.status();
          r->OnDone([completed](absl::Status) { completed->fetch_add(1); });
        }
        // Only now the copies out, each on its call's stream, with no
        // StreamWait: the stream itself is ordered after the call.
        for (int call = 0; call < kCalls; ++call) {
          cudaMemcpyAsync(outputs[call].data(), base + call * kCount,
                          kCount * 4, cudaMemcpyDeviceToHost,
                          streams[call % 2]);
        }
        for (cudaStream_t st : streams) {
          if (cudaStreamSynchronize(st) != cudaSuccess) {
            return absl::InternalError("cudaStreamSynchronize");
          }
        }
        const float factor = float(n * (n + 1) / 2);
        for (int call = 0; call < kCalls; ++call) {
          for (size_t i = 0; i < kCount; ++i) {
            const float want = factor * float((i + call) % 1000);
            if (outputs[call][i] != want) {
              return absl::InternalError(absl::StrCat(
                  "call ", call, " (", call % 4 < 2 ? "native" : "ring",
                  "): element ", i, " is ", outputs[call][i], ", expected ",
                  want));
            }
          }
        }
        for (int i = 0; i < 10000 && completed->load() < kCalls; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (cudaStream_t st : streams) cudaStreamDestroy(st);
        if (completed->load() != kCalls) {
          return absl::InternalError(absl::StrCat(
              completed->load(), " of ", kCalls, " requests completed"));
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Contracts a client written from the public headers found broken on
// device buffers (each of these failed before its fix):
//   - an empty collective with a forced relay algorithm returned a host
//     request, so StreamWait on it was Unimplemented;
//   - a non-root's 1-element root-only send buffer made an empty broadcast
//     with kOnStream a device call, which then returned Unimplemented after
//     starting (its sequence number spent, the ranks out of step);
//   - a batch refused for a bad device pointer aborted the communicator;
//   - kOnStream was ignored by Send/Recv: work queued on the stream later
//     read the receive buffer before the data arrived.
TEST(NcclTransportTest, DevicePathContractsHold) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  constexpr size_t kCount = 1 << 20;  // 4 MB of float.
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const Device gpu = Device::Cuda(rank);
        cudaStream_t stream;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        absl::StatusOr<DeviceBytes> bytes = DeviceBytes::Allocate(kCount * 4);
        if (!bytes.ok()) return bytes.status();
        float* d = reinterpret_cast<float*>(bytes->data());
        CollectiveOptions ring;
        ring.algorithm = Algorithm::kRing;
        ring.stream = stream;
        // Empty all_reduce, forced ring: a device request.
        absl::StatusOr<Request> r = comm.AllReduce(
            ConstBuffer::Of(d, 0, gpu), Buffer::Of(d, 0, gpu), ReduceOp::kSum,
            ring);
        if (!r.ok()) return r.status();
        if (absl::Status w = r->StreamWait(stream); !w.ok()) {
          return absl::InternalError(absl::StrCat("empty all_reduce: ", w.ToString()));
        }
        RELAY_RETURN_IF_ERROR(r->Wait(absl::Seconds(30)));
        // Empty broadcast, kOnStream, the non-root with a root-only buffer.
        CollectiveOptions on_stream = ring;
        on_stream.algorithm = Algorithm::kBinomialTree;
        on_stream.stream_order = StreamOrder::kOnStream;
        r = comm.Broadcast(ConstBuffer::Of(d, rank == 0 ? 0 : 1, gpu),
                           Buffer::Of(d, 0, gpu), 0, on_stream);
        if (!r.ok()) {
          return absl::InternalError(absl::StrCat("empty broadcast: ", r.status().ToString()));
        }
        RELAY_RETURN_IF_ERROR(r->Wait(absl::Seconds(30)));
        // A batch with a pointer CUDA does not know: refused, nothing
        // sent, the communicator usable.
        std::vector<float> host(16, 1.0f);
        const P2POp bad[] = {
            P2POp::Send(ConstBuffer::Of(host.data(), 16, gpu), 1 - rank, 1),
            P2POp::Recv(Buffer::Of(d, 16, gpu), 1 - rank, 1)};
        absl::StatusOr<Request> refused = comm.BatchSendRecv(bad);
        if (refused.status().code() != absl::StatusCode::kInvalidArgument) {
          return absl::InternalError(absl::StrCat(
              "bad pointer in a batch: ", refused.status().ToString()));
        }
        // kOnStream receive: a copy queued on the stream afterwards, with no
        // Wait or StreamWait, sees the data.
        std::vector<float> pattern(kCount), got(kCount, -1.0f);
        for (size_t i = 0; i < kCount; ++i) pattern[i] = float(i % 9973) + 0.5f;
        if (rank == 0) {
          cudaMemcpy(d, pattern.data(), kCount * 4, cudaMemcpyHostToDevice);
        } else {
          cudaMemset(d, 0, kCount * 4);
        }
        CollectiveOptions p2p;
        p2p.stream = stream;
        p2p.stream_order = StreamOrder::kOnStream;
        r = rank == 0 ? comm.Send(ConstBuffer::Of(d, kCount, gpu), 1, 7, p2p)
                      : comm.Recv(Buffer::Of(d, kCount, gpu), 0, 7, p2p);
        if (!r.ok()) return r.status();
        if (rank == 1) {
          cudaMemcpyAsync(got.data(), d, kCount * 4, cudaMemcpyDeviceToHost,
                          stream);
          cudaStreamSynchronize(stream);
          for (size_t i = 0; i < kCount; ++i) {
            if (got[i] != pattern[i]) {
              return absl::InternalError(absl::StrCat(
                  "kOnStream recv: element ", i, " is ", got[i], ", expected ",
                  pattern[i]));
            }
          }
        }
        RELAY_RETURN_IF_ERROR(r->Wait(absl::Seconds(30)));
        // Still in step and usable after all of the above.
        r = comm.AllReduce(ConstBuffer::Of(d, 1024, gpu),
                           Buffer::Of(d, 1024, gpu), ReduceOp::kSum, ring);
        if (!r.ok()) return r.status();
        RELAY_RETURN_IF_ERROR(r->Wait(absl::Seconds(30)));
        cudaStreamDestroy(stream);
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// OnDone runs without anyone waiting: the watchdog completes requests.
// Native collectives captured into a CUDA graph and replayed, on the
// caller's stream and after it (where a fork of the transport's stream
// into the capture would be refused as unjoined at its end), between
// eager calls on other streams (which must not wait on a captured event).
TEST(NcclTransportTest, CapturedInAGraphAndReplayed) {
  const int n = std::min(Gpus(), 2);
  if (n < 1) GTEST_SKIP() << "no GPU visible";
  for (StreamOrder order : {StreamOrder::kOnStream, StreamOrder::kAfterStream}) {
    absl::Status s = RunRanks(
        n, Factory(), DefaultEngine(),
        [&](Communicator& comm) { return CheckCapturedCallsReplay(comm, order, 1000); }, {},
        OneGpuPerRank());
    EXPECT_TRUE(s.ok()) << (order == StreamOrder::kOnStream ? "on the stream: " : "after it: ")
                        << s;
  }
}

// relay's own ring over NCCL's point-to-point cannot be captured (its
// steps run on the stream executor's streams), and says so.
TEST(NcclTransportTest, RelayAlgorithmRefusedInACapture) {
  const int n = std::min(Gpus(), 2);
  if (n < 1) GTEST_SKIP() << "no GPU visible";
  absl::Status s = RunRanks(n, Factory(), DefaultEngine(), CheckRelayAlgorithmRefusedInCapture,
                            {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(NcclTransportTest, OnDoneRunsWithoutAWaiter) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  absl::Status s = RunRanks(1, Factory(), DefaultEngine(), CheckOnDoneRunsWithoutAWaiter, {},
                            OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Rank 1 never enters the all_reduce: rank 0 gets DeadlineExceeded within
// its timeout plus one second, its communicator is aborted, and Abort
// returns promptly; later calls fail with FailedPrecondition.
TEST(NcclTransportTest, PeerThatStopsParticipatingIsADeadline) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  std::atomic<bool> rank0_done{false};
  absl::Status s = RunRanks(
      2, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        absl::StatusOr<DeviceBytes> d = DeviceBytes::Allocate(1 << 20);
        if (!d.ok()) return d.status();
        float* p = reinterpret_cast<float*>(d->data());
        const ConstBuffer in = ConstBuffer::Of(p, 1 << 18, Device::Cuda(rank));
        const Buffer out = Buffer::Of(p, 1 << 18, Device::Cuda(rank));
        // One all_reduce together first, so both ranks are wired.
        absl::StatusOr<Request> warm = comm.AllReduce(in, out, ReduceOp::kSum);
        if (!warm.ok()) return warm.status();
        if (absl::Status w = warm->Wait(absl::Seconds(60)); !w.ok()) return w;
        if (rank == 1) {
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return absl::OkStatus();
        }
        CollectiveOptions opts;
        opts.timeout = absl::Seconds(2);
        const absl::Time start = absl::Now();
        absl::StatusOr<Request> r = comm.AllReduce(in, out, ReduceOp::kSum, opts);
        if (!r.ok()) return r.status();
        absl::Status w = r->Wait();
        const absl::Duration took = absl::Now() - start;
        EXPECT_EQ(w.code(), absl::StatusCode::kDeadlineExceeded) << w;
        EXPECT_LT(took, absl::Seconds(3)) << "took " << took;
        // The watchdog aborts within a period of the deadline.
        for (int i = 0; i < 1000 && !r->Test(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_TRUE(r->Test());
        EXPECT_EQ(r->status().code(), absl::StatusCode::kDeadlineExceeded)
            << r->status();
        const absl::Time abort_start = absl::Now();
        EXPECT_TRUE(comm.Abort().ok());
        EXPECT_LT(absl::Now() - abort_start, absl::Seconds(5));
        absl::StatusOr<Request> after = comm.AllReduce(in, out, ReduceOp::kSum);
        EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition)
            << after.status();
        rank0_done = true;
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  rank0_done = true;
  EXPECT_TRUE(s.ok()) << s;
}

// Batched point-to-point: a ring exchange in one group, every rank sending
// to the right and receiving from the left.
TEST(NcclTransportTest, BatchedRingExchange) {
  const int n = Gpus();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs";
  constexpr size_t kCount = 1 << 22;  // 16 MB: beyond NCCL's eager buffers.
  absl::Status s = RunRanks(
      n, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        std::vector<int32_t> mine(kCount), got(kCount, -1);
        for (size_t i = 0; i < kCount; ++i) mine[i] = rank * 1000003 + int32_t(i);
        absl::StatusOr<DeviceBytes> a = DeviceBytes::Allocate(kCount * 4);
        absl::StatusOr<DeviceBytes> b = DeviceBytes::Allocate(kCount * 4);
        if (!a.ok() || !b.ok()) return absl::InternalError("cudaMalloc");
        if (absl::Status c = a->CopyFrom(mine.data(), kCount * 4); !c.ok()) return c;
        const Device dev = Device::Cuda(rank);
        const P2POp ops[] = {
            P2POp::Send(ConstBuffer::Of(reinterpret_cast<int32_t*>(a->data()), kCount, dev),
                        (rank + 1) % n),
            P2POp::Recv(Buffer::Of(reinterpret_cast<int32_t*>(b->data()), kCount, dev),
                        (rank + n - 1) % n)};
        absl::StatusOr<Request> r = comm.BatchSendRecv(ops);
        if (!r.ok()) return r.status();
        if (absl::Status w = r->Wait(absl::Seconds(60)); !w.ok()) return w;
        if (absl::Status c = b->CopyTo(got.data(), kCount * 4); !c.ok()) return c;
        const int left = (rank + n - 1) % n;
        for (size_t i = 0; i < kCount; ++i) {
          if (got[i] != left * 1000003 + int32_t(i)) {
            return absl::InternalError(absl::StrCat("element ", i, " wrong"));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

// Every rank sends a different block to every other rank in one batch.
void ExchangeWithEveryRank(int n) {
  constexpr size_t kBlock = 1 << 20;  // 4 MB of int32 per peer.
  absl::Status s = RunRanks(
      n, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        std::vector<int32_t> mine(kBlock * n), got(kBlock * n, -1);
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < kBlock; ++i) {
            mine[q * kBlock + i] = rank * 1000003 + q * 7919 + int32_t(i);
          }
        }
        absl::StatusOr<DeviceBytes> a = DeviceBytes::Allocate(mine.size() * 4);
        absl::StatusOr<DeviceBytes> b = DeviceBytes::Allocate(got.size() * 4);
        if (!a.ok() || !b.ok()) return absl::InternalError("cudaMalloc");
        if (absl::Status c = a->CopyFrom(mine.data(), mine.size() * 4); !c.ok()) return c;
        if (absl::Status c = b->CopyFrom(got.data(), got.size() * 4); !c.ok()) return c;
        const Device dev = Device::Cuda(rank);
        auto* sent = reinterpret_cast<int32_t*>(a->data());
        auto* received = reinterpret_cast<int32_t*>(b->data());
        std::vector<P2POp> ops;
        for (int q = 0; q < n; ++q) {
          if (q == rank) continue;
          ops.push_back(P2POp::Send(ConstBuffer::Of(sent + q * kBlock, kBlock, dev), q));
          ops.push_back(P2POp::Recv(Buffer::Of(received + q * kBlock, kBlock, dev), q));
        }
        // Twice, so the second batch follows a forked one on every stream.
        for (int round = 0; round < 2; ++round) {
          absl::StatusOr<Request> r = comm.BatchSendRecv(ops);
          if (!r.ok()) return r.status();
          if (absl::Status w = r->Wait(absl::Seconds(60)); !w.ok()) return w;
        }
        if (absl::Status c = b->CopyTo(got.data(), got.size() * 4); !c.ok()) return c;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < kBlock; ++i) {
            const int32_t want = q == rank ? -1 : q * 1000003 + rank * 7919 + int32_t(i);
            if (got[q * kBlock + i] != want) {
              return absl::InternalError(absl::StrCat(
                  "rank ", rank, ": element ", i, " from ", q, " is ",
                  got[q * kBlock + i], ", want ", want));
            }
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

TEST(NcclTransportTest, OneBatchToEveryRank) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs";
  ExchangeWithEveryRank(Gpus());
}

// Communicator::Split over NCCL: colors and keys through the store, the
// group's communicator by ncclCommSplit. Ranks split by parity with their
// order reversed (and, from 3 GPUs, the last rank opts out); each group's
// all_reduce sums exactly its members.
TEST(NcclTransportTest, SplitMakesGroupsWithNcclCommSplit) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << Gpus() << " visible";
  const int n = Gpus();
  absl::Status s = RunRanks(
      n, Factory(), DefaultEngine(),
      [&](Communicator& comm) -> absl::Status {
        const int rank = comm.rank();
        const bool out = n >= 3 && rank == n - 1;
        const int color = out ? -1 : rank % 2;
        CollectiveOptions options;
        options.timeout = absl::Seconds(60);
        absl::StatusOr<std::unique_ptr<Communicator>> child =
            comm.Split(color, -rank, options);
        if (!child.ok()) return child.status();
        if (out) {
          return *child == nullptr
                     ? absl::OkStatus()
                     : absl::InternalError("opted out, but got a group");
        }
        if (*child == nullptr) return absl::InternalError("no group");
        std::vector<int> members;
        for (int q = 0; q < n; ++q) {
          if (!(n >= 3 && q == n - 1) && q % 2 == color) members.push_back(q);
        }
        const int size = static_cast<int>(members.size());
        // Reversed by the keys: the highest old rank is rank 0.
        const int want_rank = static_cast<int>(
            members.end() - std::find(members.begin(), members.end(), rank) - 1);
        if ((*child)->size() != size || (*child)->rank() != want_rank) {
          return absl::InternalError(absl::StrCat(
              "rank ", rank, " became ", (*child)->rank(), " of ",
              (*child)->size(), ", expected ", want_rank, " of ", size));
        }
        constexpr size_t kCount = 1000;
        std::vector<float> host(kCount);
        for (size_t i = 0; i < kCount; ++i) host[i] = float(rank * 100 + i % 7);
        absl::StatusOr<DeviceBytes> d = DeviceBytes::Allocate(kCount * 4);
        if (!d.ok()) return d.status();
        if (absl::Status c = d->CopyFrom(host.data(), kCount * 4); !c.ok()) return c;
        float* p = reinterpret_cast<float*>(d->data());
        const Device dev = Device::Cuda(rank);
        absl::StatusOr<Request> r = (*child)->AllReduce(
            ConstBuffer::Of(p, kCount, dev), Buffer::Of(p, kCount, dev),
            ReduceOp::kSum);
        if (!r.ok()) return r.status();
        if (absl::Status w = r->Wait(absl::Seconds(60)); !w.ok()) return w;
        if (absl::Status c = d->CopyTo(host.data(), kCount * 4); !c.ok()) return c;
        for (size_t i = 0; i < kCount; ++i) {
          float want = 0;
          for (int q : members) want += float(q * 100 + i % 7);
          if (host[i] != want) {
            return absl::InternalError(absl::StrCat(
                "rank ", rank, " element ", i, ": ", host[i], ", want ", want));
          }
        }
        return absl::OkStatus();
      },
      {}, OneGpuPerRank());
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace relay
