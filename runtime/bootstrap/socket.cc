#include "runtime/bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace relay {
namespace {

struct AddrInfoDeleter {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoList> Resolve(absl::string_view host, int port,
                                     bool passive) {
  if (host.empty()) {
    return absl::InvalidArgumentError("address must not be empty");
  }
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", port, " is outside 0..65535"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string host_str(host);
  const std::string port_str = absl::StrCat(port);
  int rc = getaddrinfo(host_str.c_str(), port_str.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resolve \"", host, "\": ", gai_strerror(rc)));
  }
  return AddrInfoList(result);
}

int BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

// Milliseconds until `deadline` for poll(), at least 0, at most 1 s so long
// waits recheck the clock.
int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(1000, absl::ToInt64Milliseconds(left) + 1));
}

// Waits until `fd` is ready for `events`; DeadlineExceeded past `deadline`.
absl::Status WaitReady(int fd, short events, absl::Time deadline,
                       absl::string_view what, absl::string_view peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, PollMillis(deadline));
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return ErrnoStatus(absl::StatusCode::kInternal,
                         absl::StrCat("poll on ", peer), errno);
    }
    if (n == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out ", what, " ", peer));
    }
  }
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

void FileDescriptor::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':')) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::Status ConfigureDescriptor(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return ErrnoStatus(absl::StatusCode::kInternal, "fcntl", errno);
  }
  return absl::OkStatus();
}

absl::Status ErrnoStatus(absl::StatusCode code, absl::string_view context,
                         int err) {
  char buf[256];
  // GNU strerror_r returns the message, which may not be `buf`.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return absl::Status(code, absl::StrCat(context, ": ", msg));
}

absl::StatusOr<Socket> Socket::Connect(absl::string_view host, int port,
                                       absl::Time deadline, bool retry) {
  auto list = Resolve(host, port, /*passive=*/false);
  if (!list.ok()) return list.status();
  const std::string peer = JoinHostPort(host, port);
  absl::Status last = absl::UnavailableError("no address to try");
  absl::Duration backoff = absl::Milliseconds(10);
  for (;;) {
    for (addrinfo* ai = list->get(); ai != nullptr; ai = ai->ai_next) {
      FileDescriptor fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                               ai->ai_protocol));
      if (!fd.valid()) {
        last = ErrnoStatus(absl::StatusCode::kInternal, "socket", errno);
        continue;
      }
      if (absl::Status s = ConfigureDescriptor(fd.get()); !s.ok()) return s;
      int rc = connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        absl::Status ready =
            WaitReady(fd.get(), POLLOUT, deadline, "connecting to", peer);
        if (!ready.ok()) {
          last = ready;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc == 0) {
        int one = 1;
        setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return Socket(std::move(fd), peer);
      }
      last = ErrnoStatus(absl::StatusCode::kUnavailable,
                         absl::StrCat("connect to ", peer), errno);
    }
    // Refused or unreachable: the server may still be starting. Retry with
    // backoff until the deadline.
    if (!retry) return last;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("could not connect to ", peer,
                       " before the deadline; last error: ", last.message()));
    }
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::StatusOr<Socket> Socket::Adopt(FileDescriptor fd, std::string peer) {
  if (absl::Status s = ConfigureDescriptor(fd.get()); !s.ok()) return s;
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Socket(std::move(fd), std::move(peer));
}

absl::Status Socket::SendAll(absl::string_view bytes, absl::Time deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd_.get(), bytes.data() + sent, bytes.size() - sent,
                     MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (absl::Status s = WaitReady(fd_.get(), POLLOUT, deadline,
                                     "sending to", peer_);
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return ErrnoStatus(absl::StatusCode::kUnavailable,
                       absl::StrCat("send to ", peer_), errno);
  }
  return absl::OkStatus();
}

absl::Status Socket::RecvAll(char* out, size_t size, absl::Time deadline) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = recv(fd_.get(), out + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("connection closed by ", peer_));
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (absl::Status s = WaitReady(fd_.get(), POLLIN, deadline,
                                     "waiting for a reply from", peer_);
          !s.ok()) {
        return s;
      }
      continue;
    }
    if (errno == EINTR) continue;
    return ErrnoStatus(absl::StatusCode::kUnavailable,
                       absl::StrCat("recv from ", peer_), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<Listener> Listener::Bind(absl::string_view host, int port) {
  auto list = Resolve(host, port, /*passive=*/true);
  if (!list.ok()) return list.status();
  absl::Status last = absl::UnavailableError("no address to bind");
  for (addrinfo* ai = list->get(); ai != nullptr; ai = ai->ai_next) {
    FileDescriptor fd(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                             ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus(absl::StatusCode::kInternal, "socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = ErrnoStatus(absl::StatusCode::kUnavailable,
                         absl::StrCat("bind ", JoinHostPort(host, port)), errno);
      continue;
    }
    // A deep backlog: hundreds of ranks connect at once at job start.
    if (listen(fd.get(), 4096) != 0) {
      last = ErrnoStatus(absl::StatusCode::kUnavailable,
                         absl::StrCat("listen ", JoinHostPort(host, port)),
                         errno);
      continue;
    }
    if (absl::Status s = ConfigureDescriptor(fd.get()); !s.ok()) return s;
    const int bound = BoundPort(fd.get());
    return Listener(std::move(fd), std::string(host), bound);
  }
  return last;
}

}  // namespace relay
