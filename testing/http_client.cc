#include "testing/http_client.h"

#include <poll.h>
#include <sys/socket.h>

#include "runtime/bootstrap/socket.h"

namespace relay {

absl::StatusOr<std::string> HttpExchange(int port, absl::string_view request,
                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<Socket> s =
      Socket::Connect("127.0.0.1", port, deadline, /*retry=*/false);
  if (!s.ok()) return s.status();
  if (!request.empty()) {
    if (absl::Status sent = s->SendAll(request, deadline); !sent.ok()) return sent;
  }
  std::string out;
  char buf[4096];
  while (absl::Now() < deadline) {
    pollfd p{s->fd(), POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(s->fd(), buf, sizeof(buf), 0);
    if (n <= 0) break;  // Closed (or reset) by the server.
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string HttpBody(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

}  // namespace relay
