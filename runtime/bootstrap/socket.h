// File: runtime/bootstrap/socket.h
//
// Socket and Listener: the TCP plumbing under the TCP store. Move-only owners
// of one file descriptor, non-blocking underneath, with every blocking call
// bounded by a deadline so a silent peer turns into DeadlineExceeded rather
// than a hang. Errors carry the peer's address and errno's text.
//
// Addresses are host names or IPv4/IPv6 literals, resolved with getaddrinfo.
// Listener binds to exactly the address it is given: the store is reachable
// where the user says, never on every interface by accident.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(Listener l, Listener::Bind("127.0.0.1", 0));
//   RELAY_ASSIGN_OR_RETURN(Socket s, Socket::Connect("127.0.0.1", l.port(),
//                                                    absl::Now() + absl::Seconds(5)));
//   RELAY_RETURN_IF_ERROR(s.SendAll("hi", absl::Now() + absl::Seconds(1)));
#ifndef RELAY_RUNTIME_BOOTSTRAP_SOCKET_H_
#define RELAY_RUNTIME_BOOTSTRAP_SOCKET_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace relay {

// Owns a file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.Release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

class Socket {
 public:
  // Connects to host:port. With `retry`, refused or unreachable attempts
  // are retried with backoff (the server may not be up yet) until
  // `deadline`: DeadlineExceeded then, with the last error. Without, the
  // first refusal is Unavailable. InvalidArgument for a host that does not
  // resolve.
  static absl::StatusOr<Socket> Connect(absl::string_view host, int port,
                                        absl::Time deadline, bool retry = true);
  // Adopts an accepted, connected descriptor.
  static absl::StatusOr<Socket> Adopt(FileDescriptor fd, std::string peer);

  absl::Status SendAll(absl::string_view bytes, absl::Time deadline);
  // Reads exactly `size` bytes. Unavailable if the peer closes first.
  absl::Status RecvAll(char* out, size_t size, absl::Time deadline);

  int fd() const { return fd_.get(); }
  const std::string& peer() const { return peer_; }

 private:
  Socket(FileDescriptor fd, std::string peer)
      : fd_(std::move(fd)), peer_(std::move(peer)) {}

  FileDescriptor fd_;
  std::string peer_;  // "host:port", for messages.
};

class Listener {
 public:
  // Binds and listens on host:port (port 0: the kernel picks one). The
  // descriptor is non-blocking.
  static absl::StatusOr<Listener> Bind(absl::string_view host, int port);

  int fd() const { return fd_.get(); }
  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  Listener(FileDescriptor fd, std::string host, int port)
      : fd_(std::move(fd)), host_(std::move(host)), port_(port) {}

  FileDescriptor fd_;
  std::string host_;
  int port_;
};

// "host:port", bracketing IPv6 literals.
std::string JoinHostPort(absl::string_view host, int port);

// Makes `fd` non-blocking and close-on-exec.
absl::Status ConfigureDescriptor(int fd);

// errno's message as a Status with `code`, prefixed by `context`.
absl::Status ErrnoStatus(absl::StatusCode code, absl::string_view context,
                         int err);

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_SOCKET_H_
