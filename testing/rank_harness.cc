#include "testing/rank_harness.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/store.h"

namespace relay {

absl::Status RunRanks(int size, TransportFactory& factory,
                      const CollectiveEngine& engine, const RankBody& body,
                      CommunicatorOptions options, const RankSetup& setup) {
  auto store = std::make_shared<InMemoryStore>();
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
      results[r] = comm.ok() ? body(**comm) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < size; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(),
                          absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace relay
