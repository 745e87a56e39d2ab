// File: collectives/stream_executor.h
//
// ExecuteScheduleOnStream: runs one rank's Schedule on device buffers over a
// stream-ordered transport (NCCL point-to-point), queueing all of it on CUDA
// streams from the calling thread, so the host never waits for the GPU.
// executor.h is the host-memory counterpart.
//
// How. The caller's stream S forks into `window` lane streams (lane l of the
// schedule runs on stream l % window) and joins back at the end. Steps are
// posted in one order on every rank: step 0 of every lane, then step 1 of
// every lane, ... Each step's communication is one Transport::PostBatch on
// its lane stream (one NCCL group); the lane stream then waits for it
// (Request::StreamWait) and runs the step's local work: a RecvReduce
// receives into memory allocated on the lane stream and reduces from it,
// copies and reductions run as device kernels. While one lane's reduction
// runs, the transport moves the next lane's data.
//
// Why one order. A transport without tags (NCCL) matches a pair's messages
// in posting order and runs its groups one after another; posting every
// rank's steps in the same (step, lane) order keeps both true for
// schedules whose messages are received in the step they are sent (all of
// relay's builders), so no rank waits on a group its peer queued later.
//
// Completion. The returned request completes once every batch has
// completed and the joined stream S has passed the end; its StreamWait
// makes another stream wait for that point without blocking the host.
// Where nobody waits, the completion of the last batch (on the transport's
// thread) finishes the request, blocking that thread for the last local
// work at most. A failed batch fails the request with its error after the
// queued work has drained; on_failure runs first, as in executor.h.
//
// Example (NCCL transport, device buffers, stream s):
//   Request r = ExecuteScheduleOnStream(RingAllReduce(params), ctx, s,
//                                       DeviceStreamOps());
//   RELAY_RETURN_IF_ERROR(r.StreamWait(s));   // s continues after it
#ifndef RELAY_COLLECTIVES_STREAM_EXECUTOR_H_
#define RELAY_COLLECTIVES_STREAM_EXECUTOR_H_

#include <memory>

#include "collectives/executor.h"
#include "collectives/schedule.h"
#include "collectives/stream_ops.h"
#include "runtime/request.h"

namespace relay {

// `stream`: the caller's stream (null: the legacy default stream).
// `context.window`: lane streams (at least 1).
Request ExecuteScheduleOnStream(Schedule schedule, ExecutionContext context,
                                void* stream, std::shared_ptr<StreamOps> ops);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_STREAM_EXECUTOR_H_
