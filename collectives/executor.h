// File: collectives/executor.h
//
// ExecuteSchedule: runs one rank's Schedule over a Transport and returns the
// Request of the whole collective. No thread of its own: the calling thread
// posts the first steps, and every later step is started by the completion
// of the previous one, on whichever thread completes it (for loopback, often
// the peer's). A step posts its communication, waits for all of it, then runs
// its local copies and reductions; up to `window` lanes are in flight.
//
// RecvReduce uses the transport's fused receive-and-reduce when it has one,
// and otherwise receives into a temporary buffer and reduces after.
//
// Lifetime and ownership. The run keeps the transport, its scratch memory
// and the schedule alive until its last communication completes, even after
// the request has failed; the caller's buffers must stay valid as long.
//
// Example:
//   ExecutionContext ctx{transport, transport->capabilities(), ...};
//   Request r = ExecuteSchedule(
//       std::make_shared<const Schedule>(RingAllReduce(params)),
//       std::move(ctx));
#ifndef RELAY_COLLECTIVES_EXECUTOR_H_
#define RELAY_COLLECTIVES_EXECUTOR_H_

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "collectives/schedule.h"
#include "runtime/activity_gate.h"
#include "runtime/buffer.h"
#include "runtime/request.h"
#include "runtime/transport.h"

namespace relay {

struct ExecutionContext {
  std::shared_ptr<Transport> transport;
  // transport->capabilities(), read once by whoever builds the context (a
  // virtual call that fills the whole struct, on every small collective).
  TransportCapabilities caps;
  ConstBuffer send;
  Buffer recv;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  uint64_t sequence = 0;  // Goes into every tag of this collective.
  absl::Time deadline = absl::InfiniteFuture();
  size_t window = 2;      // Lanes in flight at once.
  // Local work runs inside it; once closed, the run stops (Cancelled)
  // without touching the buffers again. May be null.
  std::shared_ptr<ActivityGate> gate;
  // Called before the request completes with an error (CollectiveArgs).
  std::shared_ptr<const FailureHook> on_failure;
};

// `schedule` may be shared with other runs (CachedSchedule, engine.h).
Request ExecuteSchedule(std::shared_ptr<const Schedule> schedule,
                        ExecutionContext context);

// The address of region `r` of a run over `context`'s buffers and its
// `scratch` memory (null where the buffer is; shared by both executors).
char* RegionAddress(const ExecutionContext& context, void* scratch,
                    const Region& r);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_EXECUTOR_H_
