// File: runtime/bootstrap/metrics_server.h
//
// MetricsServer: a minimal HTTP endpoint for Prometheus to scrape. It
// answers `GET /metrics` (and HEAD) with whatever its render function
// returns, in the Prometheus text format's content type; every other path
// is 404, every other method 405, and a request that is not HTTP/1.x is
// 400. One thread serves every connection with poll(), so a connection
// that sends nothing holds up nobody: at most kMaxClients are open at once
// (a new one past that drops the oldest), each answered and closed
// (Connection: close), and one that has not sent its request head within
// `client_timeout` gets 408.
//
// It binds to exactly the address it is given, 127.0.0.1 unless told
// otherwise: metrics say what a job is doing, and are not published on
// every interface by accident.
//
// Lifetime and ownership. The server owns its thread and socket; the
// destructor stops the thread and closes the socket. The render function
// must stay valid for the server's life (Communicator::MetricsRenderer()
// returns one that owns what it reads).
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(auto server, MetricsServer::Start(
//       {.port = 9400}, comm->MetricsRenderer()));
//   // curl http://127.0.0.1:9400/metrics
#ifndef RELAY_RUNTIME_BOOTSTRAP_METRICS_SERVER_H_
#define RELAY_RUNTIME_BOOTSTRAP_METRICS_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/bootstrap/socket.h"

namespace relay {

// The request line of an HTTP/1.x request head ("GET /metrics HTTP/1.1").
struct HttpRequestLine {
  std::string method;
  std::string path;  // The target without its query string.
};

// Parses the first line of `head` (the bytes up to the blank line).
// InvalidArgument naming the part that is wrong: a missing CRLF, a method
// that is not an HTTP token, a target that is not an absolute path, a
// version other than HTTP/1.0 or HTTP/1.1.
absl::StatusOr<HttpRequestLine> ParseHttpRequestLine(absl::string_view head);

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: the kernel picks one (see port()).
    // A client that has not sent its whole request head by then is dropped.
    absl::Duration client_timeout = absl::Seconds(2);
  };

  // Binds host:port and starts serving. InvalidArgument for a port outside
  // 0..65535, a non-positive timeout or a null render function;
  // Unavailable if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(Options options,
                                                             Render render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return listener_.port(); }
  const std::string& host() const { return listener_.host(); }
  // Requests answered 200 so far.
  uint64_t scrapes() const { return scrapes_.load(); }

 private:
  MetricsServer(Listener listener, FileDescriptor wake_read,
                FileDescriptor wake_write, Options options, Render render);
  // Connections served at once (see the header comment).
  static constexpr int kMaxClients = 64;
  struct Client;
  void Serve();
  // Takes new connections, dropping the oldest past kMaxClients.
  void Accept(std::vector<std::unique_ptr<Client>>& clients);
  // Moves `c` on as far as its socket allows.
  void Step(Client& c);
  // `c`'s deadline passed.
  void Expire(Client& c);
  void Reply(Client& c, std::string answer);
  void Answer(Client& c, absl::string_view head);

  Listener listener_;
  FileDescriptor wake_read_, wake_write_;  // A pipe: the destructor's knock.
  const Options options_;
  const Render render_;
  std::atomic<uint64_t> scrapes_{0};
  std::thread thread_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_METRICS_SERVER_H_
