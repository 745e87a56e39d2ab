#include "runtime/bootstrap/metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace relay {
namespace {

// A request head bigger than this is refused (431): a scrape's is ~100 B.
constexpr size_t kMaxHeadBytes = 8192;

bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

absl::Status BadRequestLine(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad HTTP request line: ", what));
}

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool with_body,
                     absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n",
                      extra_headers, "Connection: close\r\n\r\n",
                      with_body ? body : "");
}

// Where a request head ends (the blank line), or npos.
size_t HeadEnd(absl::string_view in) {
  const size_t crlf = in.find("\r\n\r\n");
  if (crlf != absl::string_view::npos) return crlf + 4;
  const size_t lf = in.find("\n\n");
  return lf == absl::string_view::npos ? lf : lf + 2;
}

}  // namespace

absl::StatusOr<HttpRequestLine> ParseHttpRequestLine(absl::string_view head) {
  const size_t eol = head.find('\n');
  if (eol == absl::string_view::npos) return BadRequestLine("no line end");
  absl::string_view line = head.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  const size_t sp1 = line.find(' ');
  if (sp1 == absl::string_view::npos || sp1 == 0) return BadRequestLine("no method");
  const absl::string_view method = line.substr(0, sp1);
  for (char c : method) {
    if (!IsTokenChar(c)) return BadRequestLine("method is not a token");
  }
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == absl::string_view::npos) return BadRequestLine("no version");
  const absl::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  if (target.empty() || target[0] != '/') {
    return BadRequestLine("target is not an absolute path");
  }
  for (char c : target) {
    if (c <= 0x20 || c >= 0x7f) {
      return BadRequestLine("target has a control or non-ASCII byte");
    }
  }
  const absl::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return BadRequestLine("version is not HTTP/1.0 or HTTP/1.1");
  }
  HttpRequestLine out;
  out.method = std::string(method);
  out.path = std::string(target.substr(0, target.find('?')));
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    Options options, Render render) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics server: port ", options.port, " is outside 0..65535"));
  }
  if (options.client_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "metrics server: client_timeout must be positive");
  }
  if (!render) {
    return absl::InvalidArgumentError("metrics server: no render function");
  }
  absl::StatusOr<Listener> listener = Listener::Bind(options.host, options.port);
  if (!listener.ok()) return listener.status();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return ErrnoStatus(absl::StatusCode::kInternal, "metrics server: pipe", errno);
  }
  return std::unique_ptr<MetricsServer>(new MetricsServer(
      *std::move(listener), FileDescriptor(pipe_fds[0]),
      FileDescriptor(pipe_fds[1]), std::move(options), std::move(render)));
}

MetricsServer::MetricsServer(Listener listener, FileDescriptor wake_read,
                             FileDescriptor wake_write, Options options,
                             Render render)
    : listener_(std::move(listener)),
      wake_read_(std::move(wake_read)),
      wake_write_(std::move(wake_write)),
      options_(std::move(options)),
      render_(std::move(render)),
      thread_([this] { Serve(); }) {}

MetricsServer::~MetricsServer() {
  const char knock = 1;
  while (write(wake_write_.get(), &knock, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
}

// One connection of the event loop, from accept to close.
struct MetricsServer::Client {
  enum class Phase { kReading, kWriting, kDraining, kDone };
  FileDescriptor fd;
  Phase phase = Phase::kReading;
  std::string in;   // The request head so far.
  std::string out;  // The answer.
  size_t sent = 0;
  size_t drained = 0;
  absl::Time deadline;  // Of the current phase.
};

void MetricsServer::Serve() {
  std::vector<std::unique_ptr<Client>> clients;  // Oldest first.
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_read_.get(), POLLIN, 0});
    fds.push_back({listener_.fd(), POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (const auto& c : clients) {
      fds.push_back({c->fd.get(),
                     static_cast<short>(c->phase == Client::Phase::kWriting
                                            ? POLLOUT
                                            : POLLIN),
                     0});
      next = std::min(next, c->deadline);
    }
    const int timeout_ms =
        next == absl::InfiniteFuture()
            ? -1
            : static_cast<int>(std::clamp<int64_t>(
                  absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 1000));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;  // The destructor knocked.
    for (size_t i = 0; i < clients.size(); ++i) {
      if (fds[i + 2].revents != 0) Step(*clients[i]);
    }
    if (fds[1].revents != 0) Accept(clients);
    const absl::Time now = absl::Now();
    for (auto& c : clients) {
      if (c->phase != Client::Phase::kDone && now >= c->deadline) Expire(*c);
    }
    clients.erase(std::remove_if(clients.begin(), clients.end(),
                                 [](const std::unique_ptr<Client>& c) {
                                   return c->phase == Client::Phase::kDone;
                                 }),
                  clients.end());
  }
}

void MetricsServer::Accept(std::vector<std::unique_ptr<Client>>& clients) {
  for (int k = 0; k < kMaxClients; ++k) {
    const int fd = accept4(listener_.fd(), nullptr, nullptr,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a client that left at once.
    if (clients.size() >= static_cast<size_t>(kMaxClients)) {
      // Full: the oldest connection goes, whatever it is doing, so idle
      // connections cannot lock scrapes out.
      clients.erase(clients.begin());
    }
    auto c = std::make_unique<Client>();
    c->fd = FileDescriptor(fd);
    c->deadline = absl::Now() + options_.client_timeout;
    clients.push_back(std::move(c));
  }
}

void MetricsServer::Step(Client& c) {
  switch (c.phase) {
    case Client::Phase::kReading: {
      char buf[1024];
      while (true) {
        const ssize_t n = recv(c.fd.get(), buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          const size_t end = HeadEnd(c.in);
          if (end != std::string::npos) {
            Answer(c, absl::string_view(c.in).substr(0, end));
            break;
          }
          if (c.in.size() >= kMaxHeadBytes) {
            Reply(c, Response("431 Request Header Fields Too Large",
                              "text/plain", "request head too large\n", true));
            break;
          }
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        c.phase = Client::Phase::kDone;  // Closed before finishing its head.
        return;
      }
      Step(c);  // Start writing at once.
      return;
    }
    case Client::Phase::kWriting:
      while (c.sent < c.out.size()) {
        const ssize_t n = send(c.fd.get(), c.out.data() + c.sent,
                               c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
          c.sent += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        c.phase = Client::Phase::kDone;
        return;
      }
      // A lingering close: closing with unread request bytes (an oversized
      // head) would send a reset that can destroy the answer before the
      // client reads it. Drain briefly, bounded in time and bytes.
      shutdown(c.fd.get(), SHUT_WR);
      c.phase = Client::Phase::kDraining;
      c.deadline = absl::Now() + std::min(options_.client_timeout,
                                          absl::Milliseconds(500));
      return;
    case Client::Phase::kDraining: {
      char sink[4096];
      while (true) {
        const ssize_t n = recv(c.fd.get(), sink, sizeof(sink), 0);
        if (n > 0) {
          c.drained += static_cast<size_t>(n);
          if (c.drained >= (1u << 20)) break;
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0 && errno == EINTR) continue;
        break;
      }
      c.phase = Client::Phase::kDone;
      return;
    }
    case Client::Phase::kDone:
      return;
  }
}

void MetricsServer::Expire(Client& c) {
  if (c.phase == Client::Phase::kReading) {
    Reply(c, Response("408 Request Timeout", "text/plain",
                      "request head not received in time\n", true));
    Step(c);
    return;
  }
  // A client that stops reading its answer, or lingers: dropped.
  c.phase = Client::Phase::kDone;
}

void MetricsServer::Reply(Client& c, std::string answer) {
  c.out = std::move(answer);
  c.phase = Client::Phase::kWriting;
  c.deadline = absl::Now() + options_.client_timeout;
}

void MetricsServer::Answer(Client& c, absl::string_view head) {
  absl::StatusOr<HttpRequestLine> request = ParseHttpRequestLine(head);
  if (!request.ok()) {
    Reply(c, Response("400 Bad Request", "text/plain",
                      absl::StrCat(request.status().message(), "\n"), true));
  } else if (request->method != "GET" && request->method != "HEAD") {
    Reply(c, Response("405 Method Not Allowed", "text/plain",
                      "only GET and HEAD\n", true, "Allow: GET, HEAD\r\n"));
  } else if (request->path != "/metrics") {
    Reply(c, Response("404 Not Found", "text/plain",
                      "relay serves /metrics only\n",
                      request->method == "GET"));
  } else {
    Reply(c, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                      render_(), request->method == "GET"));
    scrapes_.fetch_add(1);
  }
}

}  // namespace relay
