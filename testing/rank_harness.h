// File: testing/rank_harness.h
//
// RunRanks: runs `size` ranks as threads of this process, each with its own
// Communicator over `factory` (all sharing one InMemoryStore), calls `body`
// on each, and returns the first error, prefixed with the rank that hit it.
// Every rank's communicator is destroyed before RunRanks returns.
//
// Bodies must bound their own waits (Request::Wait(timeout)); the harness
// itself adds none, so a hung rank shows up as that rank's DeadlineExceeded.
//
// Under a launcher (a test binary run whole on every rank, e.g.
// `tools/relayrun -n 2 -- TEST_BINARY`), the process is one rank: RunRanks
// runs its own rank's setup and body only, over the job's store (each call
// under a prefix of its own, so every rank must make the same calls in the
// same order), and `size` must be the job's: a test written for threads
// then checks the same paths between processes.
//
// Example:
//   absl::Status s = RunRanks(4, factory, engine, [](Communicator& c) {
//     RELAY_ASSIGN_OR_RETURN(Request r, c.Barrier());
//     return r.Wait(absl::Seconds(10));
//   });
#ifndef RELAY_TESTING_RANK_HARNESS_H_
#define RELAY_TESTING_RANK_HARNESS_H_

#include <functional>

#include "absl/status/status.h"
#include "runtime/collective.h"
#include "runtime/communicator.h"
#include "runtime/store.h"
#include "runtime/transport.h"

namespace relay {

using RankBody = std::function<absl::Status(Communicator& comm)>;
// Runs on each rank's thread before its communicator connects (a GPU
// transport's test selects the rank's device here).
using RankSetup = std::function<absl::Status(int rank)>;

absl::Status RunRanks(int size, TransportFactory& factory,
                      const CollectiveEngine& engine, const RankBody& body,
                      CommunicatorOptions options = {},
                      const RankSetup& setup = nullptr);

// As RunRanks, with the group's store handed to every body too, under a
// prefix of its own beside the communicators' keys: what ranks count or
// exchange outside the communicator (a barrier's arrivals) goes there, so
// it works the same for threads and for processes under a launcher.
using RankBodyWithStore = std::function<absl::Status(Communicator& comm, Store& store)>;
absl::Status RunRanksWithStore(int size, TransportFactory& factory,
                               const CollectiveEngine& engine, const RankBodyWithStore& body,
                               CommunicatorOptions options = {},
                               const RankSetup& setup = nullptr);

}  // namespace relay

#endif  // RELAY_TESTING_RANK_HARNESS_H_
