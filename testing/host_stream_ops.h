// File: testing/host_stream_ops.h
//
// HostStreamOps: StreamOps (collectives/stream_ops.h) on host memory, where a
// "stream" runs each operation at once and waiting on a transport's request
// is Request::Wait. With ScheduleEngine(HostStreamOps()) the stream
// executor's logic (lanes, lane streams, staging for RecvReduce, scratch,
// errors) runs in the conformance suite on machines without a GPU. It also
// counts what the executor allocated and freed, so tests can check that
// nothing leaks.
//
// Example:
//   auto ops = std::make_shared<HostStreamOps>();
//   ScheduleEngine engine(ops);
//   RunConformanceCase(c, loopback_factory, engine);
//   EXPECT_EQ(ops->live_allocations(), 0);
#ifndef RELAY_TESTING_HOST_STREAM_OPS_H_
#define RELAY_TESTING_HOST_STREAM_OPS_H_

#include <atomic>
#include <cstdint>

#include "collectives/stream_ops.h"

namespace relay {

class HostStreamOps final : public StreamOps {
 public:
  absl::StatusOr<void*> NewStream() override;
  void DeleteStream(void* stream) override;
  absl::StatusOr<void*> NewEvent() override;
  void DeleteEvent(void* event) override;
  absl::Status Record(void* event, void* stream) override;
  absl::Status StreamWaitEvent(void* stream, void* event) override;
  bool EventDone(void* event) override;
  absl::Status Synchronize(void* event) override;
  absl::StatusOr<void*> Allocate(size_t bytes, void* stream) override;
  absl::Status Free(void* memory, void* stream) override;
  absl::Status Copy(void* dst, const void* src, size_t bytes,
                    void* stream) override;
  absl::Status Reduce(DataType dtype, ReduceOp op, const void* a,
                      const void* b, void* out, size_t count,
                      void* stream) override;
  absl::Status Divide(DataType dtype, void* data, size_t count,
                      double divisor, void* stream) override;
  absl::Status WaitRequest(Request& request, void* stream) override;

  // Streams, events and allocations created and not yet deleted or freed.
  int64_t live_streams() const { return streams_.load(); }
  int64_t live_events() const { return events_.load(); }
  int64_t live_allocations() const { return allocations_.load(); }

 private:
  std::atomic<int64_t> streams_{0}, events_{0}, allocations_{0};
};

}  // namespace relay

#endif  // RELAY_TESTING_HOST_STREAM_OPS_H_
