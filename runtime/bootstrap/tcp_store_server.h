// File: runtime/bootstrap/tcp_store_server.h
//
// TcpStoreServer: the key-value rendezvous server behind TcpStore. One thread
// serves every client with poll(); blocking gets park on the server (no
// client spins), and a set wakes exactly the gets waiting on its key.
//
// Defences. A client must answer the token challenge (auth.h) within
// `handshake_timeout` or it is dropped; it never sees a key before that. At
// most `max_unauthenticated` connections wait in the handshake: a new one
// past that drops the oldest, so idle connections from another local user
// cannot keep a rank out. When accept() finds no file descriptor left
// (EMFILE), the oldest unauthenticated connection is dropped to make room
// and accepting pauses briefly instead of spinning on the readable
// listening socket; authenticated connections are never dropped for room. A
// frame that is too big, does not parse, or names an unknown op drops that
// client and nothing else: the server keeps serving everyone else. Dropped
// clients are counted (stats()), which the tests read.
//
// Rank 0 usually hosts it inside its own process (see environment.h); the
// `relay_store` tool runs it standalone.
//
// Lifetime and ownership. The server runs from Start() until destruction,
// which closes every connection: clients then get Unavailable.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(auto server, TcpStoreServer::Start(
//       {.host = "127.0.0.1", .port = 0, .token = token}));
//   int port = server->port();  // tell the clients
#ifndef RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_SERVER_H_
#define RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "runtime/bootstrap/socket.h"

namespace relay {

struct TcpStoreServerOptions {
  // Address to listen on: a host name or literal. There is no "all
  // interfaces" default; pass "0.0.0.0" or "::" explicitly to get that.
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the kernel picks a free one; see port().
  std::string token;
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Connections allowed in the handshake at once (see Defences). A client
  // answers the challenge within a round trip, so this bounds an attack,
  // not a job: a thousand ranks connecting at once retry what is dropped.
  int max_unauthenticated = 128;
  // On destruction the server keeps serving its connected clients until
  // they have all hung up, for at most this long. A job's store host that
  // exits first (it finished first, or learned of a failure first) would
  // otherwise take the side channel away from ranks still reading it: they
  // would report the store lost instead of the rank that failed
  // (bench/ucx_kill_sweep.sh found survivors 1 s late for that reason).
  absl::Duration linger = absl::Seconds(2);
};

class TcpStoreServer {
 public:
  struct Stats {
    int64_t accepted = 0;
    int64_t authenticated = 0;
    int64_t rejected_token = 0;  // Wrong proof, or none in time.
    int64_t dropped_malformed = 0;
    int64_t evicted = 0;  // Unauthenticated, dropped to make room.
  };

  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(
      const TcpStoreServerOptions& options);
  ~TcpStoreServer();

  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& host() const { return listener_.host(); }
  int port() const { return listener_.port(); }
  Stats stats() const;

 private:
  class Loop;
  TcpStoreServer(Listener listener, std::unique_ptr<Loop> loop,
                 absl::Duration linger);

  Listener listener_;
  const absl::Duration linger_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_SERVER_H_
