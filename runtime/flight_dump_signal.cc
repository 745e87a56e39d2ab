#include "runtime/flight_dump_signal.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/config.h"
#include "runtime/text_file.h"
#include "runtime/thread_name.h"

namespace relay {
namespace {

// RELAY_FLIGHT_RECORDER_DIR, or "" where it is unset (a communicator
// checked it when it was made).
std::string RecorderDirectory() {
  absl::StatusOr<std::optional<std::string>> dir =
      ReadText("RELAY_FLIGHT_RECORDER_DIR");
  return dir.ok() && dir->has_value() ? **dir : std::string();
}

struct Registered {
  std::weak_ptr<FlightRecorder> recorder;
  int rank = 0;
  int size = 1;
};

struct Registry {
  std::mutex mu;
  std::map<uint64_t, Registered> entries;  // Guarded by mu.
  uint64_t next = 1;                       // Guarded by mu.
  int pipe_write = -1;
};

Registry& Global() {
  static Registry* r = new Registry();  // Never destroyed: the thread uses it.
  return *r;
}

// Read by the signal handler: a lock-free atomic is async-signal-safe.
std::atomic<int> g_pipe_write{-1};

void OnSignal(int) {
  const int saved = errno;
  const char byte = 1;
  const int fd = g_pipe_write.load(std::memory_order_acquire);
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

// Starts the dumping thread and installs the handler, once.
bool Install(Registry& r) {
  static const bool installed = [&r] {
    if (RecorderDirectory().empty()) return false;
    int fds[2];
    if (pipe(fds) != 0) return false;
    r.pipe_write = fds[1];
    g_pipe_write.store(fds[1], std::memory_order_release);
    std::thread([read_fd = fds[0]] {
      NameThisThread("relay-dump");
      char byte;
      while (true) {
        const ssize_t n = read(read_fd, &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        DumpAllFlightRecords("signal SIGUSR1");
      }
    }).detach();
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
    return true;
  }();
  return installed;
}

}  // namespace

uint64_t RegisterForSignalDump(std::weak_ptr<FlightRecorder> recorder, int rank,
                               int size) {
  Registry& r = Global();
  if (recorder.expired() || !Install(r)) return 0;
  std::lock_guard<std::mutex> lock(r.mu);
  const uint64_t handle = r.next++;
  r.entries[handle] = {std::move(recorder), rank, size};
  return handle;
}

void UnregisterForSignalDump(uint64_t handle) {
  if (handle == 0) return;
  Registry& r = Global();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.erase(handle);
}

bool WriteFlightRecordToDirectory(const FlightRecorder* recorder, int rank,
                                  int size, const std::string& reason) {
  const std::string dir = RecorderDirectory();
  if (recorder == nullptr || dir.empty()) return false;
  const absl::Status s = WriteTextFile(
      absl::StrCat(dir, "/relay_flight_rank", rank, ".json"),
      recorder->ToJson(rank, size, reason));
  if (!s.ok()) {
    std::fprintf(stderr, "relay: flight recorder: %s\n",
                 std::string(s.message()).c_str());
  }
  return s.ok();
}

int DumpAllFlightRecords(const char* reason) {
  Registry& r = Global();
  std::vector<Registered> live;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& [handle, e] : r.entries) live.push_back(e);
  }
  int written = 0;
  for (const Registered& e : live) {
    std::shared_ptr<FlightRecorder> recorder = e.recorder.lock();
    if (WriteFlightRecordToDirectory(recorder.get(), e.rank, e.size, reason)) {
      ++written;
    }
  }
  return written;
}

}  // namespace relay
