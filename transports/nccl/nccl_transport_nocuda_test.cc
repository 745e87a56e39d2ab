// The NCCL transport in a build without CUDA or NCCL (built instead of
// nccl_transport_test.cc): it exists, is not viable, and says why.
#include <memory>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "relay.h"
#include "transports/nccl/nccl_transport.h"

namespace relay {
namespace {

TEST(NcclTransportFactoryTest, NotViableWithoutCudaSaysWhy) {
  NcclTransportFactory factory;
  EXPECT_FALSE(factory.IsViable());
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(
      {.rank = 0, .size = 1, .store = std::make_shared<InMemoryStore>(),
       .transport = "nccl"});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
  EXPECT_TRUE(absl::StrContains(comm.status().message(), "'nccl'")) << comm.status();
  // The factory says why: the build found no CUDA.
  TransportConfig config;
  config.store = std::make_shared<InMemoryStore>();
  absl::StatusOr<std::unique_ptr<Transport>> t = factory.Connect(config);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "built without")) << t.status();
}

}  // namespace
}  // namespace relay
