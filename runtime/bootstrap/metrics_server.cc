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

// Reads until the blank line that ends a request head. Returns the head, or
// an empty string with `*answer` set to what to send back (possibly
// nothing: the client went away or stalled).
std::string ReadHead(int fd, absl::Time deadline, std::string* answer) {
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos &&
         head.find("\n\n") == std::string::npos) {
    if (head.size() >= kMaxHeadBytes) {
      *answer = Response("431 Request Header Fields Too Large", "text/plain",
                         "request head too large\n", true);
      return "";
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      *answer = Response("408 Request Timeout", "text/plain",
                         "request head not received in time\n", true);
      return "";
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) return "";
    if (ready <= 0) continue;
    const ssize_t n = recv(fd, buf, std::min(sizeof(buf), kMaxHeadBytes - head.size() + 1), 0);
    if (n == 0) return "";  // Closed before finishing its request.
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return "";
    }
    head.append(buf, static_cast<size_t>(n));
  }
  return head;
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

void MetricsServer::Serve() {
  while (true) {
    pollfd p[2] = {{listener_.fd(), POLLIN, 0}, {wake_read_.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents != 0) return;  // The destructor knocked.
    const int fd = accept4(listener_.fd(), nullptr, nullptr,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN, or a client that left at once.
    FileDescriptor owned(fd);
    Answer(fd);
  }
}

void MetricsServer::Answer(int fd) {
  const absl::Time deadline = absl::Now() + options_.client_timeout;
  std::string answer;
  const std::string head = ReadHead(fd, deadline, &answer);
  if (!head.empty()) {
    absl::StatusOr<HttpRequestLine> request = ParseHttpRequestLine(head);
    if (!request.ok()) {
      answer = Response("400 Bad Request", "text/plain",
                        absl::StrCat(request.status().message(), "\n"), true);
    } else if (request->method != "GET" && request->method != "HEAD") {
      answer = Response("405 Method Not Allowed", "text/plain",
                        "only GET and HEAD\n", true, "Allow: GET, HEAD\r\n");
    } else if (request->path != "/metrics") {
      answer = Response("404 Not Found", "text/plain",
                        "relay serves /metrics only\n", request->method == "GET");
    } else {
      answer = Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                        render_(), request->method == "GET");
      scrapes_.fetch_add(1);
    }
  }
  // Best effort: a client that stops reading is dropped at the deadline.
  absl::string_view left = answer;
  while (!left.empty()) {
    const ssize_t n = send(fd, left.data(), left.size(), MSG_NOSIGNAL);
    if (n > 0) {
      left.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
    const absl::Duration wait = deadline + options_.client_timeout - absl::Now();
    if (wait <= absl::ZeroDuration()) return;
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1);
  }
  shutdown(fd, SHUT_WR);
  // A lingering close: closing with unread request bytes (an oversized
  // head) would send a reset that can destroy the answer before the client
  // reads it. Drain briefly, bounded in time and bytes.
  const absl::Time linger =
      absl::Now() + std::min(options_.client_timeout, absl::Milliseconds(500));
  char sink[4096];
  for (size_t drained = 0; drained < (1u << 20);) {
    const absl::Duration wait = linger - absl::Now();
    if (wait <= absl::ZeroDuration()) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait)) + 1) <= 0) break;
    const ssize_t n = recv(fd, sink, sizeof(sink), 0);
    if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) break;
    if (n > 0) drained += static_cast<size_t>(n);
  }
}

}  // namespace relay
