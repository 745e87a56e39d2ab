// File: collectives/engine.h
//
// ScheduleEngine: relay's CollectiveEngine. For each call it picks an
// algorithm (CollectiveOptions::algorithm, else RELAY_ALGORITHM, else the
// cost model of selection.h), builds this rank's schedule with the pure
// builders (ring.h, recursive.h, tree.h, linear.h) and runs it with the
// executor (executor.h) over the communicator's transport; on device
// buffers over a stream-ordered transport (NCCL), with the stream executor
// (stream_executor.h), at most RELAY_PIPELINE_DEPTH lanes of >= 4 MiB.
//
// Environment, read once when the engine is built:
//   RELAY_ALGORITHM       per-collective overrides (selection.h).
//   RELAY_SEGMENT_BYTES   pipeline segment size for ring, broadcast and
//                         reduce; one lane per segment. Default: 1 MiB, or
//                         more where the transport's per-message latency
//                         is high (at least ten latencies' worth of bytes
//                         at its bandwidth, from its capabilities).
//   RELAY_PIPELINE_DEPTH  lanes in flight at once (default 2, at most
//                         kMaxLanes); on device buffers, the lanes (and
//                         lane streams) of a call.
//   RELAY_RING_BIDIRECTIONAL  1 (default) or 0: ring all_reduce on device
//                         buffers sends half of each segment each way round
//                         the ring (ring.h), where there are more than 2
//                         ranks. Host buffers always go one way.
// A malformed value (runtime/config.h) makes every call fail with
// InvalidArgument naming it.
//
// Example:
//   ScheduleEngine engine;
//   RELAY_ASSIGN_OR_RETURN(auto comm, Communicator::Create(factory, engine,
//                                                          store, rank, size));
#ifndef RELAY_COLLECTIVES_ENGINE_H_
#define RELAY_COLLECTIVES_ENGINE_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "collectives/schedule.h"
#include "collectives/selection.h"
#include "collectives/stream_ops.h"
#include "runtime/collective.h"

namespace relay {

class ScheduleEngine final : public CollectiveEngine {
 public:
  ScheduleEngine();  // Reads the environment.
  // Runs every schedule, host buffers included, through the stream
  // executor with `host_stream_ops` (tests: its logic on machines without
  // a GPU, with testing/host_stream_ops.h).
  explicit ScheduleEngine(std::shared_ptr<StreamOps> host_stream_ops);

  absl::Status Supports(CollectiveKind kind,
                        Algorithm algorithm) const override;
  absl::StatusOr<Request> Start(const std::shared_ptr<Transport>& transport,
                                const TransportCapabilities& caps,
                                const CollectiveArgs& args) const override;
  // Runs the shm algorithm's one exchange on the calling thread (RunShm),
  // without a request; anything else as Start and Wait.
  absl::Status Run(const std::shared_ptr<Transport>& transport,
                   const TransportCapabilities& caps,
                   const CollectiveArgs& args) const override;
  // Over a transport that moves device memory only (nccl, cuda_ipc): loads
  // the device reduction kernels that relay's algorithms use there
  // (LoadDeviceKernels), so that a first reduction does not wait for the
  // GPU to go idle.
  absl::Status Prepare(const TransportCapabilities& caps) const override;

  // The algorithm `args` would run with on a group of `size`; a group of
  // one left to relay's choice on host memory copies instead (RunsAlone).
  Algorithm Resolve(const CollectiveArgs& args, int size,
                    const TransportCapabilities& caps) const;

  // The segment (one pipeline lane) of a pipelined host schedule over a
  // transport like `caps`: RELAY_SEGMENT_BYTES when set, else the larger of
  // 1 MiB and ten of its per-message latencies' worth of bytes.
  size_t SegmentBytes(const TransportCapabilities& caps) const;

 private:
  // Start's work once `algorithm` is chosen for `args` (`count` elements
  // per rank, not zero unless a barrier) with `usable`: `caps` less the
  // host-memory shortcuts when `on_device`.
  absl::StatusOr<Request> StartResolved(
      const std::shared_ptr<Transport>& transport,
      const TransportCapabilities& caps, const TransportCapabilities& usable,
      const CollectiveArgs& args, Algorithm algorithm, size_t count,
      bool on_device) const;
  // Whether `args` on a group of `size` is left to relay's choice (no
  // algorithm forced, none set for its kind in RELAY_ALGORITHM) on a group
  // of one, on host buffers run on the host by a transport that moves host
  // memory (`caps`): then every collective's result is this rank's own
  // contribution, so the call is one copy from the send buffer to the
  // receive buffer, or nothing in place (RunAlone). A transport that moves
  // device memory only (NCCL) runs even a group of one as device work.
  bool RunsAlone(const CollectiveArgs& args, int size,
                 const TransportCapabilities& caps) const;

  absl::Status config_error_;
  AlgorithmOverrides overrides_;
  size_t segment_bytes_ = 0;  // RELAY_SEGMENT_BYTES; 0: not set.
  size_t pipeline_depth_ = 2;
  bool device_ring_bidirectional_ = true;  // RELAY_RING_BIDIRECTIONAL.
  std::shared_ptr<StreamOps> host_stream_ops_;
};

// Builds one rank's schedule; exposed for tests and tools.
Schedule BuildSchedule(CollectiveKind kind, Algorithm algorithm,
                       const ScheduleParams& params);

// BuildSchedule's result, reused: the calling thread keeps the last few
// small schedules it built (a schedule is a pure function of its
// arguments), so a loop of small collectives does not build and free one
// per call. Per thread, so no lock; large schedules are built each time
// (their transfers dwarf the build, and they would pin memory).
std::shared_ptr<const Schedule> CachedSchedule(CollectiveKind kind,
                                               Algorithm algorithm,
                                               const ScheduleParams& params);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_ENGINE_H_
