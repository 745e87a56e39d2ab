#include "testing/rank_harness.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/bootstrap/environment.h"
#include "runtime/bootstrap/job_store.h"
#include "runtime/store.h"

namespace relay {
namespace {

// This process's rank of a job its launcher started, and the job's store,
// connected once and kept for the process's life (rank 0 hosts it).
struct JobRank {
  LaunchEnvironment env;
  std::shared_ptr<Store> store;
  absl::Status status;  // Why the store could not be reached, if so.
  int calls = 0;        // RunRanks calls so far: each gets a store prefix.
};

JobRank* TheJobRank() {
  static JobRank* const job = []() -> JobRank* {
    if (!HasLaunchEnvironment()) return nullptr;
    auto* j = new JobRank;
    absl::StatusOr<LaunchEnvironment> env = ReadLaunchEnvironment();
    if (!env.ok()) {
      j->status = env.status();
      return j;
    }
    j->env = *env;
    absl::StatusOr<std::shared_ptr<TcpStore>> store = ConnectJobStore(*env);
    if (!store.ok()) {
      j->status = store.status();
      return j;
    }
    j->store = *std::move(store);
    return j;
  }();
  return job;
}

// Where a body's own keys go in the group's store.
constexpr char kBodyPrefix[] = "body/";

absl::Status Prefixed(int rank, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("rank ", rank, ": ", s.message()));
}

// This process's rank alone, over the job's store.
absl::Status RunJobRank(JobRank& job, int size, TransportFactory& factory,
                        const CollectiveEngine& engine, const RankBodyWithStore& body,
                        const CommunicatorOptions& options, const RankSetup& setup) {
  if (!job.status.ok()) return job.status;
  const int rank = job.env.rank;
  if (size != job.env.size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RunRanks(", size, ") in a job of ", job.env.size,
        " ranks: run this test with as many ranks as it asks for"));
  }
  auto store = std::make_shared<PrefixStore>(job.store, absl::StrCat("run/", job.calls++, "/"));
  if (setup) {
    if (absl::Status s = setup(rank); !s.ok()) return Prefixed(rank, s);
  }
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      Communicator::Create(factory, engine, store, rank, size, options);
  PrefixStore body_store(store, kBodyPrefix);
  const absl::Status s = comm.ok() ? body(**comm, body_store) : comm.status();
  return s.ok() ? s : Prefixed(rank, s);
}

}  // namespace

absl::Status RunRanks(int size, TransportFactory& factory,
                      const CollectiveEngine& engine, const RankBody& body,
                      CommunicatorOptions options, const RankSetup& setup) {
  return RunRanksWithStore(
      size, factory, engine, [&](Communicator& comm, Store&) { return body(comm); }, options,
      setup);
}

absl::Status RunRanksWithStore(int size, TransportFactory& factory,
                               const CollectiveEngine& engine, const RankBodyWithStore& body,
                               CommunicatorOptions options, const RankSetup& setup) {
  if (JobRank* job = TheJobRank(); job != nullptr) {
    return RunJobRank(*job, size, factory, engine, body, options, setup);
  }
  auto store = std::make_shared<InMemoryStore>();
  PrefixStore body_store(store, kBodyPrefix);
  std::vector<absl::Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  threads.reserve(results.size());
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      if (setup) {
        if (absl::Status s = setup(r); !s.ok()) {
          results[r] = s;
          return;
        }
      }
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(factory, engine, store, r, size, options);
      results[r] = comm.ok() ? body(**comm, body_store) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!results[r].ok()) return Prefixed(r, results[r]);
  }
  return absl::OkStatus();
}

}  // namespace relay
