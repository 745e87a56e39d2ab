#include "runtime/validate.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/buffer.h"
#include "runtime/collective.h"
#include "runtime/data_type.h"
#include "runtime/transport.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

// Backing memory for the views below. Validation never dereferences them, so
// views may claim more elements than exist (the huge-count cases).
float g_mem[64];
float g_other[64];

float* At(size_t i) { return g_mem + i; }

ConstBuffer In(const void* p, size_t n, DataType t = DataType::kFloat32,
               Device d = Device::Host()) {
  return {p, n, t, d};
}
Buffer Out(void* p, size_t n, DataType t = DataType::kFloat32,
           Device d = Device::Host()) {
  return {p, n, t, d};
}

CollectiveArgs Args(CollectiveKind kind, ConstBuffer send, Buffer recv,
                    int root = 0, ReduceOp op = ReduceOp::kSum) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.root = root;
  a.op = op;
  return a;
}

TransportCapabilities HostOnly() { return TransportCapabilities{}; }
TransportCapabilities DeviceOnly() {
  TransportCapabilities c;
  c.host_memory = false;
  c.device_memory = true;
  return c;
}
TransportCapabilities HostAndDevice() {
  TransportCapabilities c;
  c.device_memory = true;
  return c;
}

struct Case {
  const char* name;
  CollectiveArgs args;
  int rank;
  int size;
  TransportCapabilities caps;
  const char* message;  // Expected substring of the error; unused when valid.
};

using K = CollectiveKind;
constexpr size_t kHuge = static_cast<size_t>(-1);  // A negative count.
constexpr size_t kBig = size_t{1} << 40;  // Fits alone; x1024 ranks does not.

std::vector<Case> InvalidCases() {
  const DataType kBadType = static_cast<DataType>(99);
  const ReduceOp kBadOp = static_cast<ReduceOp>(99);
  return {
      // Null buffers with elements.
      {"all_reduce null send",
       Args(K::kAllReduce, In(nullptr, 4), Out(At(0), 4)), 1, 4, HostOnly(),
       "send buffer is null"},
      {"all_reduce null recv",
       Args(K::kAllReduce, In(At(0), 4), Out(nullptr, 4)), 1, 4, HostOnly(),
       "recv buffer is null"},
      {"broadcast root null send",
       Args(K::kBroadcast, In(nullptr, 4), Out(At(0), 4), /*root=*/1), 1, 4,
       HostOnly(), "send buffer is null"},
      {"reduce non-root null send",
       Args(K::kReduce, In(nullptr, 4), Out(nullptr, 0), /*root=*/0), 1, 4,
       HostOnly(), "send buffer is null"},
      // Roots out of range.
      {"broadcast root -1",
       Args(K::kBroadcast, In(At(0), 4), Out(At(0), 4), -1), 0, 4, HostOnly(),
       "root -1 is out of range"},
      {"broadcast root == size",
       Args(K::kBroadcast, In(At(0), 4), Out(At(0), 4), 4), 0, 4, HostOnly(),
       "root 4 is out of range"},
      {"reduce root > size", Args(K::kReduce, In(At(0), 4), Out(At(8), 4), 100),
       0, 4, HostOnly(), "root 100"},
      {"gather root negative",
       Args(K::kGather, In(At(0), 2), Out(At(8), 8), -7), 0, 4, HostOnly(),
       "root -7"},
      {"scatter root == size",
       Args(K::kScatter, In(At(0), 8), Out(At(8), 2), 4), 0, 4, HostOnly(),
       "root 4"},
      // Unknown dtype and op.
      {"all_reduce unknown send dtype",
       Args(K::kAllReduce, In(At(0), 4, kBadType), Out(At(8), 4)), 0, 4,
       HostOnly(), "unknown data type (99)"},
      {"all_reduce unknown recv dtype",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), 4, kBadType)), 0, 4,
       HostOnly(), "unknown data type (99)"},
      {"all_gather unknown dtype",
       Args(K::kAllGather, In(At(0), 1, kBadType), Out(At(8), 4, kBadType)), 0,
       4, HostOnly(), "unknown data type"},
      {"all_reduce unknown op",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), 4), 0, kBadOp), 0, 4,
       HostOnly(), "unknown reduce op (99)"},
      {"reduce unknown op",
       Args(K::kReduce, In(At(0), 4), Out(At(8), 4), 0, kBadOp), 1, 4,
       HostOnly(), "unknown reduce op"},
      {"reduce_scatter unknown op",
       Args(K::kReduceScatter, In(At(0), 8), Out(At(8), 2), 0, kBadOp), 1, 4,
       HostOnly(), "unknown reduce op"},
      // Send and recv types differ.
      {"all_reduce dtype mismatch",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), 4, DataType::kInt32)), 0, 4,
       HostOnly(), "send type float32 differs from recv type int32"},
      {"all_to_all dtype mismatch",
       Args(K::kAllToAll, In(At(0), 4, DataType::kFloat32),
            Out(At(8), 8, DataType::kFloat16)),
       0, 4, HostOnly(), "differs from recv type float16"},
      {"broadcast root dtype mismatch",
       Args(K::kBroadcast, In(At(0), 4), Out(At(8), 4, DataType::kUint32), 2),
       2, 4, HostOnly(), "differs"},
      // Count rules.
      {"all_reduce count mismatch",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), 5)), 0, 4, HostOnly(),
       "recv count must equal send count: expected 4, got 5"},
      {"broadcast root count mismatch",
       Args(K::kBroadcast, In(At(0), 4), Out(At(8), 3), 0), 0, 4, HostOnly(),
       "at the root"},
      {"reduce root count mismatch",
       Args(K::kReduce, In(At(0), 4), Out(At(8), 3), 3), 3, 4, HostOnly(),
       "at the root"},
      {"all_gather recv != send x size",
       Args(K::kAllGather, In(At(0), 2), Out(At(8), 7)), 1, 4, HostOnly(),
       "recv count must be send count x ranks: expected 8, got 7"},
      {"all_gather recv == send (size forgotten)",
       Args(K::kAllGather, In(At(0), 2), Out(At(8), 2)), 1, 4, HostOnly(),
       "expected 8, got 2"},
      {"gather root recv != send x size",
       Args(K::kGather, In(At(0), 2), Out(At(8), 9), 2), 2, 4, HostOnly(),
       "expected 8, got 9"},
      {"reduce_scatter send != recv x size",
       Args(K::kReduceScatter, In(At(0), 7), Out(At(8), 2)), 1, 4, HostOnly(),
       "send count must be recv count x ranks: expected 8, got 7"},
      {"scatter root send != recv x size",
       Args(K::kScatter, In(At(0), 6), Out(At(8), 2), 0), 0, 4, HostOnly(),
       "expected 8, got 6"},
      {"all_to_all count not a multiple of size",
       Args(K::kAllToAll, In(At(0), 6), Out(At(8), 6)), 0, 4, HostOnly(),
       "count 6 is not a multiple of the 4 ranks"},
      {"all_to_all count mismatch",
       Args(K::kAllToAll, In(At(0), 8), Out(At(8), 4)), 0, 4, HostOnly(),
       "recv count must equal send count"},
      // Partial overlap: not the exact in-place form.
      {"all_reduce partial overlap",
       Args(K::kAllReduce, In(At(0), 4), Out(At(1), 4)), 0, 4, HostOnly(),
       "partly overlap"},
      {"all_reduce recv inside send",
       Args(K::kAllReduce, In(At(4), 8), Out(At(6), 8)), 0, 4, HostOnly(),
       "partly overlap"},
      {"broadcast root partial overlap",
       Args(K::kBroadcast, In(At(2), 4), Out(At(0), 4), 0), 0, 4, HostOnly(),
       "partly overlap"},
      {"all_gather send not this rank's block",
       Args(K::kAllGather, In(At(1), 2), Out(At(0), 8)), 1, 4, HostOnly(),
       "not this rank's block"},
      {"all_gather send is another rank's block",
       Args(K::kAllGather, In(At(0), 2), Out(At(0), 8)), 1, 4, HostOnly(),
       "not this rank's block"},
      {"all_gather send straddles the end",
       Args(K::kAllGather, In(At(7), 2), Out(At(0), 8)), 3, 4, HostOnly(),
       "not this rank's block"},
      {"reduce_scatter recv not this rank's block",
       Args(K::kReduceScatter, In(At(0), 8), Out(At(1), 2)), 1, 4, HostOnly(),
       "not this rank's block"},
      {"reduce_scatter recv is rank 0's block on rank 2",
       Args(K::kReduceScatter, In(At(0), 8), Out(At(0), 2)), 2, 4, HostOnly(),
       "not this rank's block"},
      {"all_to_all same pointer",
       Args(K::kAllToAll, In(At(0), 8), Out(At(0), 8)), 0, 4, HostOnly(),
       "no in-place form"},
      {"all_to_all partial overlap",
       Args(K::kAllToAll, In(At(0), 8), Out(At(4), 8)), 0, 4, HostOnly(),
       "no in-place form"},
      // Huge counts (a negative size cast to size_t) and overflowing products.
      {"all_reduce negative send count",
       Args(K::kAllReduce, In(At(0), kHuge), Out(At(8), kHuge)), 0, 4,
       HostOnly(), "is too large"},
      {"all_reduce negative recv count",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), kHuge)), 0, 4, HostOnly(),
       "recv buffer count"},
      {"broadcast byte size overflows",
       Args(K::kBroadcast, In(At(0), kHuge / 4 + 1, DataType::kFloat64),
            Out(At(0), kHuge / 4 + 1, DataType::kFloat64), 0),
       0, 4, HostOnly(), "is too large"},
      {"all_gather count x size overflows",
       Args(K::kAllGather, In(At(0), kBig), Out(At(8), 1)), 1, 1024, HostOnly(),
       "send count times ranks overflows"},
      {"gather root count x size overflows",
       Args(K::kGather, In(At(0), kBig), Out(At(8), 1), 0), 0, 1024, HostOnly(),
       "send count times ranks overflows"},
      {"reduce_scatter count x size overflows",
       Args(K::kReduceScatter, In(At(0), 1), Out(At(8), kBig)), 1, 1024,
       HostOnly(), "recv count times ranks overflows"},
      {"scatter root count x size overflows",
       Args(K::kScatter, In(At(0), 1), Out(At(8), kBig), 5), 5, 1024,
       HostOnly(), "recv count times ranks overflows"},
      // Memory the transport cannot move.
      {"device send on host-only transport",
       Args(K::kAllReduce, In(At(0), 4, DataType::kFloat32, Device::Cuda(0)),
            Out(At(8), 4)),
       0, 4, HostOnly(), "cuda:0"},
      {"device recv on host-only transport",
       Args(K::kAllGather, In(At(0), 1),
            Out(At(8), 4, DataType::kFloat32, Device::Cuda(0))),
       0, 4, HostOnly(), "moves host memory only"},
      {"host memory on device-only transport",
       Args(K::kAllReduce, In(At(0), 4), Out(At(8), 4)), 0, 4, DeviceOnly(),
       "host memory"},
  };
}

std::vector<Case> ValidCases() {
  const DataType kBadType = static_cast<DataType>(99);
  const ReduceOp kBadOp = static_cast<ReduceOp>(99);
  return {
      {"all_reduce disjoint", Args(K::kAllReduce, In(At(0), 4), Out(At(4), 4)),
       0, 4, HostOnly(), ""},
      {"all_reduce in place", Args(K::kAllReduce, In(At(0), 4), Out(At(0), 4)),
       3, 4, HostOnly(), ""},
      {"all_reduce empty and null",
       Args(K::kAllReduce, In(nullptr, 0), Out(nullptr, 0)), 0, 4, HostOnly(),
       ""},
      {"all_reduce other memory",
       Args(K::kAllReduce, In(g_other, 64), Out(g_mem, 64)), 0, 1, HostOnly(),
       ""},
      {"broadcast in place at root",
       Args(K::kBroadcast, In(At(0), 4), Out(At(0), 4), 2), 2, 4, HostOnly(),
       ""},
      {"broadcast non-root ignores send",
       Args(K::kBroadcast, In(nullptr, 1000, kBadType), Out(At(0), 4), 2), 1, 4,
       HostOnly(), ""},
      {"reduce non-root ignores recv",
       Args(K::kReduce, In(At(0), 4), Out(nullptr, kHuge, kBadType), 0), 3, 4,
       HostOnly(), ""},
      {"reduce in place at root",
       Args(K::kReduce, In(At(0), 4), Out(At(0), 4), 0), 0, 4, HostOnly(), ""},
      {"gather non-root ignores recv",
       Args(K::kGather, In(At(0), 2), Out(At(0), 3), 0), 2, 4, HostOnly(), ""},
      {"gather root in place", Args(K::kGather, In(At(4), 2), Out(At(0), 8), 2),
       2, 4, HostOnly(), ""},
      {"scatter non-root ignores send",
       Args(K::kScatter, In(nullptr, 77, kBadType), Out(At(0), 2), 3), 1, 4,
       HostOnly(), ""},
      {"scatter root in place",
       Args(K::kScatter, In(At(0), 8), Out(At(6), 2), 3), 3, 4, HostOnly(), ""},
      {"all_gather in place", Args(K::kAllGather, In(At(2), 2), Out(At(0), 8)),
       1, 4, HostOnly(), ""},
      {"all_gather in place last rank",
       Args(K::kAllGather, In(At(6), 2), Out(At(0), 8)), 3, 4, HostOnly(), ""},
      {"all_gather disjoint ignores op",
       Args(K::kAllGather, In(At(40), 2), Out(At(0), 8), 0, kBadOp), 1, 4,
       HostOnly(), ""},
      {"reduce_scatter in place",
       Args(K::kReduceScatter, In(At(0), 8), Out(At(4), 2)), 2, 4, HostOnly(),
       ""},
      {"reduce_scatter disjoint",
       Args(K::kReduceScatter, In(At(0), 8), Out(At(8), 2)), 0, 4, HostOnly(),
       ""},
      {"all_to_all disjoint", Args(K::kAllToAll, In(At(0), 8), Out(At(8), 8)),
       1, 4, HostOnly(), ""},
      {"barrier ignores buffers",
       Args(K::kBarrier, In(nullptr, kHuge, kBadType),
            Out(nullptr, 5, kBadType), 0, kBadOp),
       0, 4, HostOnly(), ""},
      {"device memory on a device transport",
       Args(K::kAllReduce, In(At(0), 4, DataType::kFloat32, Device::Cuda(1)),
            Out(At(8), 4, DataType::kFloat32, Device::Cuda(1))),
       0, 4, HostAndDevice(), ""},
      {"empty device buffer on host-only transport",
       Args(K::kAllReduce, In(nullptr, 0, DataType::kFloat32, Device::Cuda(0)),
            Out(nullptr, 0, DataType::kFloat32, Device::Cuda(0))),
       0, 4, HostOnly(), ""},
      {"largest count that fits, in place",
       Args(K::kAllGather, In(At(0), size_t{1} << 38, DataType::kUint8),
            Out(At(0), size_t{1} << 48, DataType::kUint8)),
       0, 1024, HostOnly(), ""},
  };
}

// Verifies that each malformed collective is InvalidArgument, naming the issue.
TEST(ValidateCollectiveTest, InvalidArguments) {
  for (const Case& c : InvalidCases()) {
    SCOPED_TRACE(c.name);
    absl::Status s = ValidateCollective(c.args, c.rank, c.size, c.caps);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(std::string(CollectiveName(c.args.kind))));
  }
}

// Verifies that valid collectives, in-place and non-root forms included, pass.
TEST(ValidateCollectiveTest, ValidArguments) {
  for (const Case& c : ValidCases()) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(ValidateCollective(c.args, c.rank, c.size, c.caps).ok())
        << ValidateCollective(c.args, c.rank, c.size, c.caps);
  }
}

// Verifies that ValidateBuffer names the buffer and allows empty null buffers.
TEST(ValidateBufferTest, NamesTheBuffer) {
  absl::Status s = ValidateBuffer(In(nullptr, 3), "my buffer", HostOnly());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("my buffer is null"));
  EXPECT_TRUE(ValidateBuffer(In(nullptr, 0), "x", HostOnly()).ok());
  EXPECT_TRUE(
      ValidateBuffer(In(At(0), 3, DataType::kInt8), "x", HostOnly()).ok());
  s = ValidateBuffer(In(At(0), kHuge, DataType::kInt8), "big", HostOnly());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("big count"));
}

}  // namespace
}  // namespace relay
