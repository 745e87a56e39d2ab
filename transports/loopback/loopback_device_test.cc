// The loopback transport on device memory (device_messages.h): relay's
// algorithms on device buffers with ranks as threads, the stream semantics
// (streams wait for the copy between them; the host waits only for its
// peers' posts), bad input, and deadlines and Abort for unmatched posts.
// Tests that need GPUs skip themselves where none (or too few) are
// visible; without CUDA, one test checks that device memory is refused.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "relay.h"
#include "gtest/gtest.h"
#include "runtime/device_runtime.h"
#include "runtime/store.h"
#include "testing/conformance.h"
#include "testing/device_memory.h"
#include "testing/rank_harness.h"
#include "transports/loopback/device_messages.h"
#include "transports/loopback/loopback_transport.h"

namespace relay {
namespace {

namespace rt = device_runtime;

int Gpus() {
  return loopback_device::Available() ? VisibleDeviceCount() : 0;
}

// Connects `size` ranks, each on its own thread with device rank % GPUs
// current, through one shared store.
std::vector<std::unique_ptr<Transport>> ConnectAll(int size) {
  LoopbackTransportFactory factory;
  auto store = std::make_shared<InMemoryStore>();
  std::vector<absl::StatusOr<std::unique_ptr<Transport>>> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      TransportConfig config;
      config.store = store;
      config.rank = r;
      config.size = size;
      results[r] = factory.Connect(config);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& r : results) {
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r.ok() ? *std::move(r) : nullptr);
  }
  return out;
}

// Bytes that differ by position and by `seed`.
std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    v[i] = static_cast<uint8_t>(i * 131 + (i >> 11) + seed);
  }
  return v;
}

// Waits, on the host, for the work queued on `stream` so far; false if it
// has not finished within `limit` (a held stream would hang a plain
// synchronize).
bool Drains(void* stream, absl::Duration limit) {
  void* event = nullptr;
  if (rt::CreateEvent(&event) != 0) return false;
  rt::RecordEvent(event, stream);
  const absl::Time until = absl::Now() + limit;
  int e;
  while ((e = rt::QueryEvent(event)) == rt::kNotReady && absl::Now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  rt::DestroyEvent(event);
  return e == 0;
}

TEST(LoopbackDeviceTest, WithoutAGpuDeviceMemoryIsRefused) {
  if (Gpus() > 0) GTEST_SKIP() << "a GPU is visible";
  std::vector<std::unique_ptr<Transport>> t = ConnectAll(2);
  ASSERT_NE(t[0], nullptr);
  EXPECT_FALSE(t[0]->capabilities().device_memory);
  float fake = 0;
  absl::StatusOr<Request> r = t[0]->Isend(
      1, 7, ConstBuffer::Of(&fake, 1, Device::Cuda(0)), absl::InfiniteFuture());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  // Through a communicator too: rejected before anything is sent.
  LoopbackTransportFactory factory;
  absl::Status s = RunRanks(2, factory, DefaultEngine(), [&](Communicator& c) {
    absl::StatusOr<Request> ar =
        c.AllReduce(ConstBuffer::Of(&fake, 1, Device::Cuda(0)),
                    Buffer::Of(&fake, 1, Device::Cuda(0)), ReduceOp::kSum);
    EXPECT_FALSE(ar.ok());
    EXPECT_EQ(ar.status().code(), absl::StatusCode::kInvalidArgument)
        << ar.status();
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// relay's algorithms on device buffers, ranks as threads, rank r on GPU
// r % GPUs.
void RunConformance(int n) {
  const std::vector<ConformanceCase> cases = DeviceAlgorithmConformanceCases(n);
  ASSERT_FALSE(cases.empty());
  CommunicatorOptions options;
  options.default_timeout = absl::Seconds(60);
  LoopbackTransportFactory factory;
  const int gpus = Gpus();
  std::vector<std::string> failures;
  absl::Status s = RunConformanceCasesOnOneGroup(
      cases, n, factory, DefaultEngine(), options,
      [gpus](int rank) { return SetCurrentDevice(rank % gpus); }, &failures);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_TRUE(s.ok()) << s;
  std::printf("%zu cases on %d ranks over %d GPUs\n", cases.size(), n,
              std::min(n, gpus));
}

TEST(LoopbackDeviceConformanceTest, TwoGpus) {
  if (Gpus() < 2) GTEST_SKIP() << "needs 2 GPUs, " << Gpus() << " visible";
  RunConformance(2);
}

// Three ranks on whatever GPUs there are: with one or two, ranks share a
// GPU (copies within one device); the odd size exercises the algorithms'
// uneven blocks.
TEST(LoopbackDeviceConformanceTest, ThreeRanksSharingGpus) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  RunConformance(3);
}

TEST(LoopbackDeviceConformanceTest, AllGpus) {
  if (Gpus() < 4) GTEST_SKIP() << "needs 4 or more GPUs, " << Gpus() << " visible";
  RunConformance(Gpus());
}

// The heart of the stream semantics. Rank 0 posts a send on its stream and
// queues an overwrite of the send buffer right after it; rank 1 posts the
// receive 50 ms later and queues a copy of what it received right after
// it. Had either stream not waited for the copy between them, rank 1 would
// see the overwrite (or its own buffer's old bytes). Rank 0's post returns
// only once rank 1 has posted (device_messages.h: the host waits for the
// match, not for the GPU).
TEST(LoopbackDeviceTest, StreamsWaitForTheCopyBetweenThem) {
  const int gpus = Gpus();
  if (gpus < 1) GTEST_SKIP() << "no GPU visible";
  std::vector<std::unique_ptr<Transport>> t = ConnectAll(2);
  ASSERT_NE(t[1], nullptr);
  constexpr size_t kBytes = 8 << 20;
  const std::vector<uint8_t> sent = Pattern(kBytes, 3);
  std::vector<uint8_t> received(kBytes, 0);
  const absl::Time start = absl::Now();
  std::thread sender([&] {
    ASSERT_TRUE(SetCurrentDevice(0).ok());
    absl::StatusOr<DeviceBytes> data = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceBytes> junk = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceStream> stream = DeviceStream::Create();
    ASSERT_TRUE(data.ok() && junk.ok() && stream.ok());
    ASSERT_TRUE(data->CopyFrom(sent.data(), kBytes).ok());
    const std::vector<uint8_t> ones(kBytes, 0xEE);
    ASSERT_TRUE(junk->CopyFrom(ones.data(), kBytes).ok());
    const P2POp send{P2POp::Kind::kSend, 1, 5,
                      Buffer{data->data(), kBytes, DataType::kUint8,
                             Device::Cuda(0)}};
    absl::StatusOr<Request> r =
        t[0]->PostBatch({send}, stream->get(), absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GE(absl::Now() - start, absl::Milliseconds(40))
        << "the post returned before its receive was posted";
    ASSERT_EQ(rt::CopyAsync(data->data(), junk->data(), kBytes, stream->get()),
              0);
    EXPECT_TRUE(r->Wait().ok());
    EXPECT_TRUE(Drains(stream->get(), absl::Seconds(10)));
  });
  std::thread receiver([&] {
    const int device = 1 % gpus;
    ASSERT_TRUE(SetCurrentDevice(device).ok());
    absl::StatusOr<DeviceBytes> into = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceBytes> after = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceStream> stream = DeviceStream::Create();
    ASSERT_TRUE(into.ok() && after.ok() && stream.ok());
    std::this_thread::sleep_until(absl::ToChronoTime(start + absl::Milliseconds(50)));
    const P2POp recv{P2POp::Kind::kRecv, 0, 5,
                      Buffer{into->data(), kBytes, DataType::kUint8,
                             Device::Cuda(device)}};
    absl::StatusOr<Request> r =
        t[1]->PostBatch({recv}, stream->get(), absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    // Queued after the receive, on the same stream, with no host wait.
    ASSERT_EQ(rt::CopyAsync(after->data(), into->data(), kBytes, stream->get()),
              0);
    ASSERT_TRUE(Drains(stream->get(), absl::Seconds(10)));
    ASSERT_TRUE(after->CopyTo(received.data(), kBytes).ok());
    EXPECT_TRUE(r->Wait().ok());
  });
  sender.join();
  receiver.join();
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), received.begin()))
      << "rank 1 did not receive what rank 0 sent";
}

// StreamWait orders another stream after the operation.
TEST(LoopbackDeviceTest, StreamWaitOrdersAnotherStream) {
  const int gpus = Gpus();
  if (gpus < 1) GTEST_SKIP() << "no GPU visible";
  std::vector<std::unique_ptr<Transport>> t = ConnectAll(2);
  ASSERT_NE(t[1], nullptr);
  constexpr size_t kBytes = 1 << 20;
  const std::vector<uint8_t> sent = Pattern(kBytes, 9);
  std::vector<uint8_t> seen(kBytes, 0);
  std::thread sender([&] {
    ASSERT_TRUE(SetCurrentDevice(0).ok());
    absl::StatusOr<DeviceBytes> data = DeviceBytes::Allocate(kBytes);
    ASSERT_TRUE(data.ok());
    ASSERT_TRUE(data->CopyFrom(sent.data(), kBytes).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    absl::StatusOr<Request> r = t[0]->Isend(
        1, 2, ConstBuffer{data->data(), kBytes, DataType::kUint8, Device::Cuda(0)},
        absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->Wait().ok());
  });
  std::thread receiver([&] {
    const int device = 1 % gpus;
    ASSERT_TRUE(SetCurrentDevice(device).ok());
    absl::StatusOr<DeviceBytes> into = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceBytes> after = DeviceBytes::Allocate(kBytes);
    absl::StatusOr<DeviceStream> posting = DeviceStream::Create();
    absl::StatusOr<DeviceStream> other = DeviceStream::Create();
    ASSERT_TRUE(into.ok() && after.ok() && posting.ok() && other.ok());
    const P2POp recv{P2POp::Kind::kRecv, 0, 2,
                      Buffer{into->data(), kBytes, DataType::kUint8,
                             Device::Cuda(device)}};
    absl::StatusOr<Request> r = t[1]->PostBatch(
        {recv}, posting->get(), absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->StreamWait(other->get()).ok());
    ASSERT_EQ(rt::CopyAsync(after->data(), into->data(), kBytes, other->get()),
              0);
    ASSERT_TRUE(Drains(other->get(), absl::Seconds(10)));
    ASSERT_TRUE(after->CopyTo(seen.data(), kBytes).ok());
    EXPECT_TRUE(r->Wait().ok());
  });
  sender.join();
  receiver.join();
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), seen.begin()));
}

TEST(LoopbackDeviceTest, RejectsMemoryItCannotMove) {
  const int gpus = Gpus();
  if (gpus < 1) GTEST_SKIP() << "no GPU visible";
  std::vector<std::unique_ptr<Transport>> t = ConnectAll(2);
  ASSERT_NE(t[1], nullptr);
  ASSERT_TRUE(SetCurrentDevice(0).ok());
  absl::StatusOr<DeviceBytes> d = DeviceBytes::Allocate(1024);
  ASSERT_TRUE(d.ok());
  std::vector<float> host(256, 1.0f);
  // Host memory declared as a GPU's.
  absl::Status s = t[0]->CheckMemory(
      ConstBuffer::Of(host.data(), host.size(), Device::Cuda(0)), "send");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(t[0]->CheckMemory(ConstBuffer{d->data(), 256, DataType::kFloat32,
                                            Device::Cuda(0)},
                                "send")
                  .ok());
  if (gpus >= 2) {  // GPU 0's memory declared as GPU 1's.
    s = t[0]->CheckMemory(
        ConstBuffer{d->data(), 256, DataType::kFloat32, Device::Cuda(1)},
        "recv");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  // A host reduce function cannot read device memory.
  absl::StatusOr<Request> r = t[0]->IrecvReduce(
      1, 1, ConstBuffer{d->data(), 256, DataType::kFloat32, Device::Cuda(0)},
      Buffer{d->data(), 256, DataType::kFloat32, Device::Cuda(0)},
      [](const void*, const void*, void*, size_t) {}, absl::InfiniteFuture());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // A batch mixing host and device memory.
  r = t[0]->PostBatch(
      {P2POp{P2POp::Kind::kSend, 1, 1,
              Buffer{d->data(), 256, DataType::kFloat32, Device::Cuda(0)}},
       P2POp{P2POp::Kind::kRecv, 1, 1, Buffer::Of(host)}},
      nullptr, absl::InfiniteFuture());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // A device send matched by a host receive: both fail.
  absl::StatusOr<Request> host_recv =
      t[1]->Irecv(0, 3, Buffer::Of(host), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(host_recv.ok());
  absl::StatusOr<Request> dev_send = t[0]->Isend(
      1, 3, ConstBuffer{d->data(), 256, DataType::kFloat32, Device::Cuda(0)},
      absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(dev_send.ok());
  EXPECT_EQ(dev_send->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(host_recv->Wait().code(), absl::StatusCode::kInvalidArgument);
  // Sizes that differ: both fail (each post waits for the other's).
  absl::StatusOr<Request> small;
  std::thread receiver([&] {
    ASSERT_TRUE(SetCurrentDevice(0).ok());
    small = t[1]->Irecv(
        0, 4, Buffer{d->data(), 128, DataType::kFloat32, Device::Cuda(0)},
        absl::Now() + absl::Seconds(10));
  });
  absl::StatusOr<Request> big = t[0]->Isend(
      1, 4, ConstBuffer{d->data(), 256, DataType::kFloat32, Device::Cuda(0)},
      absl::Now() + absl::Seconds(10));
  receiver.join();
  ASSERT_TRUE(big.ok() && small.ok());
  EXPECT_EQ(big->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(small->Wait().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Drains(nullptr, absl::Seconds(10)));
}

// A peer that never posts: the post returns at its deadline with the batch
// failed (DeadlineExceeded), and Abort ends a post waiting with no
// deadline (Cancelled). Neither leaves its stream held.
TEST(LoopbackDeviceTest, UnmatchedPostsEndAtTheDeadlineOrAbort) {
  if (Gpus() < 1) GTEST_SKIP() << "no GPU visible";
  std::vector<std::unique_ptr<Transport>> t = ConnectAll(2);
  ASSERT_NE(t[0], nullptr);
  ASSERT_TRUE(SetCurrentDevice(0).ok());
  absl::StatusOr<DeviceBytes> d = DeviceBytes::Allocate(4096);
  absl::StatusOr<DeviceStream> stream = DeviceStream::Create();
  ASSERT_TRUE(d.ok() && stream.ok());
  const P2POp recv{P2POp::Kind::kRecv, 1, 9,
                    Buffer{d->data(), 4096, DataType::kUint8, Device::Cuda(0)}};
  const absl::Time start = absl::Now();
  absl::StatusOr<Request> r = t[0]->PostBatch(
      {recv}, stream->get(), absl::Now() + absl::Milliseconds(200));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Wait().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(190));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_TRUE(Drains(stream->get(), absl::Seconds(10)));

  absl::StatusOr<Request> waiting;
  std::thread poster([&] {
    ASSERT_TRUE(SetCurrentDevice(0).ok());
    const P2POp again{P2POp::Kind::kRecv, 1, 10, recv.data};
    waiting = t[0]->PostBatch({again}, stream->get(), absl::InfiniteFuture());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  t[0]->Abort(absl::CancelledError("test abort"));
  poster.join();
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->Wait().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Drains(stream->get(), absl::Seconds(10)));
}

}  // namespace
}  // namespace relay
