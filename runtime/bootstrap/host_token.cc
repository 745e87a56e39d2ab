#include "runtime/bootstrap/host_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/bootstrap/auth.h"
#include "runtime/config.h"

namespace relay {
namespace {

constexpr size_t kTokenBytes = 32;  // 64 hex characters.

std::string TokenPath(int port) {
  return absl::StrCat(HostTokenDirectory(), "/store-", port, ".token");
}

// OK when `st` is this user's and nobody else may read or enter it.
absl::Status CheckPrivate(const struct stat& st, const std::string& path,
                          bool directory) {
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a ", directory ? "directory" : "regular file",
        "; relay keeps the job token there (set RELAY_TOKEN to avoid it)"));
  }
  if (st.st_uid != getuid() || (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not private to this user (owner ", st.st_uid, ", mode ",
        absl::Hex(st.st_mode & 0777),
        "): the job token kept there would not be secret (set RELAY_TOKEN, "
        "or make it mode 0700)"));
  }
  return absl::OkStatus();
}

absl::Status MakePrivateDirectory(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", dir, ": ", std::strerror(errno)));
  }
  return CheckPrivate(st, dir, /*directory=*/true);
}

}  // namespace

std::string HostTokenDirectory() {
  const std::optional<std::string> runtime = GetEnv("XDG_RUNTIME_DIR");
  if (runtime.has_value() && !runtime->empty() && (*runtime)[0] == '/') {
    return absl::StrCat(*runtime, "/relay");
  }
  return absl::StrCat("/tmp/relay-", getuid());
}

absl::StatusOr<std::unique_ptr<HostToken>> HostToken::Create(int port) {
  const std::string dir = HostTokenDirectory();
  if (absl::Status s = MakePrivateDirectory(dir); !s.ok()) return s;
  const std::string token = absl::BytesToHexString(RandomBytes(kTokenBytes));
  const std::string path = TokenPath(port);
  const std::string temp = absl::StrCat(path, ".", getpid());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
                                        O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", temp, ": ", std::strerror(errno)));
  }
  const bool written =
      write(fd, token.data(), token.size()) ==
          static_cast<ssize_t>(token.size()) &&
      fchmod(fd, 0600) == 0;
  close(fd);
  if (!written || rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(temp.c_str());
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  }
  return std::unique_ptr<HostToken>(new HostToken(token, path));
}

HostToken::~HostToken() {
  // Only if it is still this job's: a later job on the port may have
  // replaced it.
  const int fd = open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  char buf[2 * kTokenBytes];
  const ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n == static_cast<ssize_t>(token_.size()) &&
      absl::string_view(buf, static_cast<size_t>(n)) == token_) {
    unlink(path_.c_str());
  }
}

absl::StatusOr<std::string> ReadHostToken(int port, absl::Time deadline,
                                          absl::string_view stale) {
  const std::string path = TokenPath(port);
  while (true) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      char buf[2 * kTokenBytes + 1];
      absl::Status privacy = fstat(fd, &st) == 0
                                 ? CheckPrivate(st, path, /*directory=*/false)
                                 : absl::InternalError("fstat failed");
      const ssize_t n = read(fd, buf, sizeof(buf));
      close(fd);
      if (!privacy.ok()) return privacy;
      struct stat dir_st {};
      const std::string dir = HostTokenDirectory();
      if (lstat(dir.c_str(), &dir_st) != 0) {
        return absl::FailedPreconditionError(absl::StrCat("cannot read ", dir));
      }
      if (absl::Status s = CheckPrivate(dir_st, dir, /*directory=*/true);
          !s.ok()) {
        return s;
      }
      if (n == static_cast<ssize_t>(2 * kTokenBytes)) {
        std::string token(buf, static_cast<size_t>(n));
        if (token != stale) return token;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no job token from rank 0 in ", path,
          " (ranks on one host without RELAY_TOKEN share one there; is rank "
          "0 running as this user on this host?)"));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace relay
