// File: testing/conformance.h
//
// The conformance suite every transport runs: each ConformanceCase is one
// collective call (kind, algorithm, group size, count, dtype, op, root, in
// place or not) made on every rank of a fresh group and checked element by
// element against testing/reference.h, with guard elements past the end of
// each output to catch overruns. A transport instantiates the whole matrix in
// a few lines:
//
//   class LoopbackConformanceTest
//       : public ::testing::TestWithParam<ConformanceCase> {};
//   TEST_P(LoopbackConformanceTest, MatchesReference) {
//     EXPECT_OK(RunConformanceCase(GetParam(), factory, engine));
//   }
//   INSTANTIATE_TEST_SUITE_P(Matrix, LoopbackConformanceTest,
//                            ::testing::ValuesIn(ConformanceCases()),
//                            ConformanceCaseName);
#ifndef RELAY_TESTING_CONFORMANCE_H_
#define RELAY_TESTING_CONFORMANCE_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/communicator.h"
#include "runtime/collective.h"
#include "runtime/data_type.h"
#include "runtime/store.h"
#include "runtime/transport.h"
#include "testing/rank_harness.h"

namespace relay {

struct ConformanceCase {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kAuto;
  int size = 1;
  size_t count = 0;  // Per rank, as in runtime/collective.h.
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool in_place = false;
  // Run on device copies of the buffers even where the transport moves
  // host memory too (loopback built with CUDA); a transport that moves
  // device memory only (NCCL) always gets them.
  bool on_device = false;
  // Made through the blocking form (Communicator::RunCollective), which
  // runs the shm algorithm's one exchange on the calling thread, instead of
  // Collective and Wait.
  bool blocking = false;

  std::string Name() const;  // A valid gtest name.
};

// The standard matrix: every collective and each of relay's algorithms for
// it; world sizes 1, 2, 3, 4, 5, 7, 8, 16; counts 0, 1, one not divisible by
// the world size, and one over a million (float32, at 2 and 5 ranks; at 2
// only under ThreadSanitizer); every dtype and op for the reductions; in
// place and out of place; every root (three roots at 16 ranks); and every
// collective at every size through the blocking form, with the algorithm
// chosen by relay and with shm.
std::vector<ConformanceCase> ConformanceCases();

// The same matrix restricted to sizes <= max_size.
std::vector<ConformanceCase> ConformanceCases(int max_size);

// Every case of the matrix's shape for one world size, which need not be
// one of the standard sizes (process transports run each size as a job).
std::vector<ConformanceCase> ConformanceCasesForSize(int size);

// The matrix for a transport's native collectives (algorithm kNative), for
// transports whose collectives are all native (NCCL): every collective with
// counts 0, 1, one not divisible by `size` and one over a million, every
// root, in place and out of place; every dtype and op for the reductions.
std::vector<ConformanceCase> NativeConformanceCases(int size);

// The matrix for a transport of device memory that queues work on streams
// (NCCL): its native collectives, and every case of relay's own algorithms
// for `size` but direct (which needs a shared address space), run by the
// stream executor (collectives/stream_executor.h).
std::vector<ConformanceCase> DeviceConformanceCases(int size);

// relay's own algorithms on device buffers for a transport that moves host
// memory too (loopback with CUDA): DeviceConformanceCases without the native
// cases, each with on_device set.
std::vector<ConformanceCase> DeviceAlgorithmConformanceCases(int size);

// Runs one case on `c.size` ranks as threads, each on a fresh communicator
// without failure propagation (a case succeeds or fails on its own, and the
// monitor's thread per rank was half the threads a case started: under
// ThreadSanitizer, starting threads was most of the suite's time); OK or an
// error naming the rank and the first mismatching elements.
absl::Status RunConformanceCase(const ConformanceCase& c,
                                TransportFactory& factory,
                                const CollectiveEngine& engine);

// Counts the ranks that have entered a barrier case, so the suite can check
// none leaves before all arrived: in a store the group shares (the
// harness's for threads, RunRanksWithStore; the job's for processes), one
// key a case.
class BarrierArrivals {
 public:
  BarrierArrivals(Store& store, std::string key) : store_(store), key_(std::move(key)) {}
  absl::Status Arrive() { return store_.Add(key_, 1).status(); }
  absl::StatusOr<int> Count() {
    absl::StatusOr<int64_t> n = store_.Add(key_, 0);
    if (!n.ok()) return n.status();
    return static_cast<int>(*n);
  }

 private:
  Store& store_;
  std::string key_;
};

// Runs one case on this rank of `comm` (ranks are processes: each calls it
// with the same case, in the same order). `arrivals` must be fresh per
// barrier case and shared by the group.
absl::Status RunConformanceCaseOnRank(const ConformanceCase& c,
                                      Communicator& comm,
                                      BarrierArrivals& arrivals);

// Runs `cases` (all for `size` ranks) in order on one group of `size` ranks
// as threads, each rank keeping its communicator for all of them (a GPU
// transport's communicator is expensive to make). Every failing case adds
// a line "rank R: CASE: STATUS" to `*failures`. A rank goes on past wrong
// values (Internal), up to 20 failures in all, and stops at any other
// error, which the returned status carries. `setup` runs on each rank's
// thread first (a GPU test selects the rank's device there).
absl::Status RunConformanceCasesOnOneGroup(
    const std::vector<ConformanceCase>& cases, int size,
    TransportFactory& factory, const CollectiveEngine& engine,
    const CommunicatorOptions& options, const RankSetup& setup,
    std::vector<std::string>* failures);

// The progress guarantee (runtime/transport.h: a posted operation completes
// whether or not anyone waits on it), on this rank of `comm`, which every
// rank of the group calls together. It splits `comm` in two halves (even
// and odd ranks) and, on both communicators, posts an all_reduce for each
// size and algorithm this transport runs on host memory (auto, shm,
// direct, ring, recursive doubling), then a blocking RunAllReduce on the
// shm algorithm where there is one, then one more all_reduce that it
// waits on: ranks post on the two communicators in opposite orders
// (even ranks the world's first), and only callbacks (OnDone) complete the
// first ones. Every result is checked element by element (non-uniform
// inputs). Fails with the first wrong value or with DeadlineExceeded naming
// the operations whose callbacks never ran within `timeout`.
absl::Status RunCallbackProgressCaseOnRank(Communicator& comm,
                                           absl::Duration timeout);

template <typename ParamInfo>
std::string ConformanceCaseName(const ParamInfo& info) {
  return info.param.Name();
}

}  // namespace relay

#endif  // RELAY_TESTING_CONFORMANCE_H_
