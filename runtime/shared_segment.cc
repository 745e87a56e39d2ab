#include "runtime/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace relay {
namespace {

std::string FreshName() {
  std::random_device entropy;
  const uint64_t bits = (uint64_t{entropy()} << 32) ^ entropy();
  return absl::StrCat("/relay-", getpid(), "-", absl::Hex(bits, absl::kZeroPad16));
}

std::string Errno(absl::string_view call) {
  return absl::StrCat(call, ": ", std::strerror(errno));
}

// Maps the object `name`, creating it with `bytes` bytes if `create`. On
// failure returns null and says why in `*why`.
void* MapObject(const std::string& name, bool create, size_t bytes,
                std::string* why) {
  const int fd = shm_open(name.c_str(),
                          create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0) {
    *why = Errno(absl::StrCat("shm_open ", name));
    return nullptr;
  }
  void* data = nullptr;
  struct stat st {};
  int reserved = 0;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    *why = Errno("ftruncate");
  } else if (create && (reserved = posix_fallocate(
                            fd, 0, static_cast<off_t>(bytes))) != 0) {
    // Reserved now, so a full /dev/shm is an error here rather than a
    // SIGBUS when a rank first touches a page of the segment.
    *why = absl::StrCat("posix_fallocate: ", std::strerror(reserved));
  } else if (fstat(fd, &st) != 0) {
    *why = Errno("fstat");
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    *why = absl::StrCat(name, " has ", st.st_size, " bytes, not ", bytes);
  } else {
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      data = nullptr;
      *why = Errno("mmap");
    }
  }
  close(fd);  // The mapping keeps the object.
  // A rank 0 that created the object but cannot use it removes it; the
  // others learn from the empty name that there is nothing to map.
  if (data == nullptr && create) shm_unlink(name.c_str());
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedSegment>> SharedSegment::Create(
    Store& store, absl::string_view key, int rank, int size, size_t bytes,
    absl::Duration timeout) {
  if (size < 1 || rank < 0 || rank >= size || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared segment: rank ", rank, " of ", size, ", ", bytes, " bytes"));
  }
  const std::string name_key = absl::StrCat(key, "/name");
  std::string name, why;
  void* data = nullptr;
  if (rank == 0) {
    name = FreshName();
    data = MapObject(name, /*create=*/true, bytes, &why);
    // "+" and no name tells the others that there is nothing to map (the
    // "+" keeps every value non-empty).
    if (absl::Status s =
            store.Set(name_key, absl::StrCat("+", data ? name : ""));
        !s.ok()) {
      if (data != nullptr) munmap(data, bytes), shm_unlink(name.c_str());
      return s;
    }
  } else {
    absl::StatusOr<std::string> got = store.Get(name_key, timeout);
    if (!got.ok()) return got.status();
    name = got->empty() ? "" : got->substr(1);
    if (name.empty()) {
      why = "rank 0 could not create it";
    } else {
      data = MapObject(name, /*create=*/false, bytes, &why);
    }
  }
  // Every rank reports; rank 0 unlinks once all have mapped (or failed),
  // then publishes the verdict, so all ranks decide alike.
  const std::string mine =
      data != nullptr ? "" : absl::StrCat("rank ", rank, ": ", why);
  if (absl::Status s = store.Set(absl::StrCat(key, "/mapped/", rank),
                                 absl::StrCat("+", mine));
      !s.ok()) {
    if (data != nullptr) munmap(data, bytes);
    return s;
  }
  const std::string verdict_key = absl::StrCat(key, "/verdict");
  std::string verdict;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) {
      keys.push_back(absl::StrCat(key, "/mapped/", r));
    }
    absl::StatusOr<std::vector<std::string>> reports =
        store.MultiGet(keys, timeout);
    if (data != nullptr) shm_unlink(name.c_str());
    std::vector<std::string> failures;
    if (!reports.ok()) {
      failures.push_back(std::string(reports.status().message()));
    } else {
      for (const std::string& r : *reports) {
        if (r.size() > 1) failures.push_back(r.substr(1));
      }
    }
    verdict = absl::StrCat("+", absl::StrJoin(failures, "; "));
    if (absl::Status s = store.Set(verdict_key, verdict); !s.ok()) {
      if (data != nullptr) munmap(data, bytes);
      return s;
    }
  } else {
    absl::StatusOr<std::string> got = store.Get(verdict_key, timeout);
    if (!got.ok()) {
      if (data != nullptr) munmap(data, bytes);
      return got.status();
    }
    verdict = *std::move(got);
  }
  if (verdict.size() > 1 || data == nullptr) {
    if (data != nullptr) munmap(data, bytes);
    return absl::FailedPreconditionError(absl::StrCat(
        "shared-memory segment not usable: ",
        verdict.size() > 1 ? verdict.substr(1) : why));
  }
  return std::unique_ptr<SharedSegment>(new SharedSegment(data, bytes));
}

SharedSegment::~SharedSegment() { munmap(data_, bytes_); }

}  // namespace relay
