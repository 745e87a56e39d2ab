// File: runtime/bootstrap/tcp_store.h
//
// TcpStore: the Store for ranks that are processes, possibly on several
// hosts, talking to one TcpStoreServer. Same semantics as InMemoryStore
// (runtime/store.h); MultiGet fetches many keys in one round trip, which is
// what makes a rendezvous of hundreds of ranks quick.
//
// Connecting proves knowledge of the job token and checks that the server
// knows it too (auth.h): a wrong token gives Unauthenticated, never a key.
// A lost server gives Unavailable naming its address.
//
// Concurrency. Thread-safe. Each call borrows a connection from a small pool
// (opening one if all are busy), so a Get blocked on the server never holds
// up another thread's Set.
//
// Lifetime and ownership. Hold by std::shared_ptr like every Store. A store
// made by Host() owns the server it runs and stops it when destroyed.
//
// Example:
//   RELAY_ASSIGN_OR_RETURN(auto store, TcpStore::Connect(
//       {.host = "10.0.0.1", .port = 29500, .token = token}));
//   RELAY_RETURN_IF_ERROR(store->Set("addr/3", my_address));
#ifndef RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_H_
#define RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "runtime/bootstrap/socket.h"
#include "runtime/bootstrap/store_protocol.h"
#include "runtime/bootstrap/tcp_store_server.h"
#include "runtime/store.h"

namespace relay {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  // How long to keep retrying the first connection (the server may start
  // after its clients).
  absl::Duration connect_timeout = absl::Seconds(60);
  // Bound on any one call that does not carry its own timeout (Set, Add,
  // Delete), and slack added to Get's own timeout for the reply to arrive.
  absl::Duration io_timeout = absl::Seconds(30);
};

class TcpStore final : public Store {
 public:
  // Connects (and authenticates) once up front so configuration errors show
  // here rather than at the first use.
  static absl::StatusOr<std::shared_ptr<TcpStore>> Connect(
      const TcpStoreOptions& options);
  // Starts a server on options.host:options.port and connects to it; the
  // returned store keeps the server running. options.port 0 picks one; read
  // it back with port().
  static absl::StatusOr<std::shared_ptr<TcpStore>> Host(
      const TcpStoreOptions& options);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::Status DeletePrefix(absl::string_view prefix) override;

  int port() const { return options_.port; }
  const std::string& host() const { return options_.host; }
  // The hosted server, or null for a client of someone else's.
  const TcpStoreServer* server() const { return server_.get(); }
  // Keeps `resource` as long as this store (rank 0's host token file).
  void KeepAlive(std::shared_ptr<void> resource) {
    kept_.push_back(std::move(resource));
  }

 private:
  explicit TcpStore(TcpStoreOptions options) : options_(std::move(options)) {}

  // `first`: the connection Connect() makes, which waits for the server to
  // come up; later ones fail at once if it is gone.
  absl::StatusOr<Socket> OpenConnection(absl::Time deadline, bool first) const;
  absl::StatusOr<store_protocol::Response> Call(
      const store_protocol::Request& request, absl::Time deadline);

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;  // Destroyed after the pool.
  std::vector<std::shared_ptr<void>> kept_;  // KeepAlive's.
  std::mutex mu_;
  std::vector<Socket> idle_;  // Guarded by mu_.
};

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_TCP_STORE_H_
