// bench/store_rendezvous: how long N ranks take to rendezvous through one
// TcpStore server, the way a job starts: every rank connects (token
// handshake included), publishes its address (Set) and reads every rank's
// (one MultiGet of N keys). Ranks are threads, each with its own client
// connection, as separate processes would have.
//
//   bazel run //bench:store_rendezvous -- [--ranks 16,64,256,1024] [--rounds 3]
//       [--value-bytes 256]
//
// Prints one Markdown row per rank count: the median, min and max over
// rounds of the time from the first connect to the last rank holding every
// address. Exit status 1 if any rank failed, 2 for bad flags.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "runtime/bootstrap/tcp_store.h"
#include "runtime/bootstrap/tcp_store_server.h"

namespace relay {
namespace {

[[noreturn]] void BadFlag(const std::string& why) {
  std::fprintf(stderr,
               "store_rendezvous: %s\nflags: --ranks N,N,... --rounds R "
               "--value-bytes B\n",
               why.c_str());
  std::exit(2);
}

// Each rank needs a descriptor, and so does the server's end of it.
void RaiseDescriptorLimit(int ranks) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  const rlim_t want = static_cast<rlim_t>(2 * ranks + 64);
  if (lim.rlim_cur < want) {
    lim.rlim_cur = std::min(want, lim.rlim_max);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// One rendezvous of `n` ranks; the wall time, or an error.
absl::StatusOr<absl::Duration> Rendezvous(int n, size_t value_bytes) {
  const std::string token = "bench-token";
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start({.host = "127.0.0.1", .port = 0, .token = token});
  if (!server.ok()) return server.status();
  const int port = (*server)->port();
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(absl::StrCat("addr/", r));
  std::atomic<int> failed{0};
  std::string first_error;
  std::atomic<bool> go{false};
  std::vector<std::thread> ranks;
  ranks.reserve(n);
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back([&, r] {
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      absl::Status s = [&]() -> absl::Status {
        absl::StatusOr<std::shared_ptr<TcpStore>> store = TcpStore::Connect(
            {.host = "127.0.0.1", .port = port, .token = token});
        if (!store.ok()) return store.status();
        std::string value(value_bytes, static_cast<char>('a' + r % 26));
        if (absl::Status st = (*store)->Set(keys[r], value); !st.ok()) return st;
        absl::StatusOr<std::vector<std::string>> all =
            (*store)->MultiGet(keys, absl::Seconds(60));
        if (!all.ok()) return all.status();
        for (int p = 0; p < n; ++p) {
          if ((*all)[p].size() != value_bytes ||
              (*all)[p][0] != static_cast<char>('a' + p % 26)) {
            return absl::InternalError(absl::StrCat("wrong value for rank ", p));
          }
        }
        return absl::OkStatus();
      }();
      if (!s.ok() && failed.fetch_add(1) == 0) first_error = s.ToString();
    });
  }
  const absl::Time start = absl::Now();
  go.store(true, std::memory_order_release);
  for (std::thread& t : ranks) t.join();
  const absl::Duration took = absl::Now() - start;
  if (failed.load() > 0) {
    return absl::InternalError(absl::StrCat(failed.load(), " of ", n,
                                            " ranks failed; first: ",
                                            first_error));
  }
  return took;
}

int Main(int argc, char** argv) {
  std::vector<int> counts = {16, 32, 64, 128, 256, 512, 1024};
  int rounds = 3;
  size_t value_bytes = 256;  // About a UCX worker address over shm + tcp.
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) BadFlag(absl::StrCat(flag, " wants a value"));
    const std::string v = argv[++i];
    if (flag == "--ranks") {
      counts.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 4096) {
          BadFlag("--ranks wants numbers in 1..4096, comma-separated");
        }
        counts.push_back(n);
      }
    } else if (flag == "--rounds") {
      if (!absl::SimpleAtoi(v, &rounds) || rounds < 1) BadFlag("--rounds >= 1");
    } else if (flag == "--value-bytes") {
      if (!absl::SimpleAtoi(v, &value_bytes) || value_bytes < 1) {
        BadFlag("--value-bytes >= 1");
      }
    } else {
      BadFlag(absl::StrCat("unknown flag ", flag));
    }
  }
  RaiseDescriptorLimit(*std::max_element(counts.begin(), counts.end()));
  std::printf("| ranks | median (s) | min (s) | max (s) |\n");
  std::printf("|------:|-----------:|--------:|--------:|\n");
  for (int n : counts) {
    std::vector<double> secs;
    for (int r = 0; r < rounds; ++r) {
      absl::StatusOr<absl::Duration> t = Rendezvous(n, value_bytes);
      if (!t.ok()) {
        std::fprintf(stderr, "store_rendezvous: %d ranks: %s\n", n,
                     t.status().ToString().c_str());
        return 1;
      }
      secs.push_back(absl::ToDoubleSeconds(*t));
    }
    std::sort(secs.begin(), secs.end());
    std::printf("| %5d | %10.3f | %7.3f | %7.3f |\n", n, secs[secs.size() / 2],
                secs.front(), secs.back());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace relay

int main(int argc, char** argv) { return relay::Main(argc, argv); }
