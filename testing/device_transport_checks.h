// File: testing/device_transport_checks.h
//
// What every GPU transport's test checks the same way (nccl, cuda_ipc),
// against that transport's factory, with ranks as threads, one GPU each.
// Each returns what went wrong; the RunRanks bodies run on every rank.
//
// Example:
//   absl::Status s = RunRanks(2, factory, DefaultEngine(),
//                             CheckOnDoneRunsWithoutAWaiter, {}, OneGpuPerRank());
#ifndef RELAY_TESTING_DEVICE_TRANSPORT_CHECKS_H_
#define RELAY_TESTING_DEVICE_TRANSPORT_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/communicator.h"
#include "runtime/transport.h"
#include "testing/device_memory.h"
#include "testing/rank_harness.h"

namespace relay {

// Selects GpuOfLocalRank(rank) (testing/device_memory.h) on the rank's
// thread.
RankSetup OneGpuPerRank();

// The GPUs visible to this process where `factory` is viable, else 0.
int ViableGpus(TransportFactory& factory);

// The device conformance matrix (testing/conformance.h) on `n` GPUs, one
// communicator group for every case; each failed case appended to
// `failures`, and the count of cases printed.
absl::Status RunDeviceConformance(TransportFactory& factory, int n,
                                  std::vector<std::string>* failures);

// 64 bytes on each visible GPU, for CheckRejectsMemoryItCannotMove:
// allocated before the ranks start and freed after they end, since
// cudaFree of a GPU's memory waits for that GPU's kernels, and a peer's
// kernel there may be waiting for the freeing rank (seen: a hang).
absl::StatusOr<std::vector<DeviceBytes>> AllocateOnEveryGpu(size_t bytes = 64);

// RunRanks body: memory the transport cannot move is InvalidArgument before
// anything is queued (host memory declared as the GPU's, the GPU's as
// host memory, a GPU the communicator does not run on, another GPU's
// memory from `every_gpu` declared as this one's where two are visible;
// relay's own ring too), and the communicator works afterwards.
absl::Status CheckRejectsMemoryItCannotMove(Communicator& comm,
                                            const std::vector<DeviceBytes>& every_gpu);

// RunRanks body: a request's OnDone runs with nobody waiting on it (the
// transport's watchdog completes it).
absl::Status CheckOnDoneRunsWithoutAWaiter(Communicator& comm);

// RunRanks body, ranks as threads or processes, each on its current GPU:
// an eager all_reduce on a stream of its own; then 100 all_reduces with
// `order` captured into a CUDA graph on a second stream, the graph
// replayed `replays` times with new inputs copied in before each replay
// and every result of every replay checked; then an eager all_reduce on a
// third stream, checked (nothing captured may be waited on outside the
// graph). Inputs differ by rank, call, element and replay.
absl::Status CheckCapturedCallsReplay(Communicator& comm, StreamOrder order, int replays);

// RunRanks body: after an eager all_reduce (NCCL connects its peers at the
// first, which a capture forbids), relay's own ring all_reduce called on a
// stream being captured is InvalidArgument saying it "cannot be captured", and the
// capture goes on: the transport's all_reduce captured after it replays
// with right results.
absl::Status CheckRelayAlgorithmRefusedInCapture(Communicator& comm);

// Body for a transport with windows (cuda_ipc), ranks as threads or
// processes: every rank registers a 32 MiB window on its current GPU, rank
// `freeing` frees the window's memory, and every rank runs `kind`
// (all_gather or all_reduce) into its window with a 20 s timeout. The
// freeing rank must fail with InvalidArgument, the others with
// FailedPrecondition, all saying "freed while registered" within 10 s;
// the others' windows stay as they were, and a later barrier fails (the
// communicator is aborted).
absl::Status CheckWindowFreedWhileRegistered(Communicator& comm, CollectiveKind kind,
                                             int freeing);

}  // namespace relay

#endif  // RELAY_TESTING_DEVICE_TRANSPORT_CHECKS_H_
