// The NCCL transport in a build without CUDA or NCCL (built instead of
// nccl_transport_test.cc): it exists, is not viable, and says why.
#include <memory>

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
}

}  // namespace
}  // namespace relay
