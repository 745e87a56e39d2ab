// The cuda_ipc transport in a build without CUDA (built instead of
// cuda_ipc_transport_test.cc): it exists, is not viable, and says why.
#include <memory>

#include "gtest/gtest.h"
#include "relay.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"

namespace relay {
namespace {

TEST(CudaIpcTransportTest, NotViableWithoutCudaSaysWhy) {
  CudaIpcTransportFactory factory;
  EXPECT_FALSE(factory.IsViable());
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(
      {.rank = 0, .size = 1, .store = std::make_shared<InMemoryStore>(),
       .transport = "cuda_ipc"});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
}

}  // namespace
}  // namespace relay
