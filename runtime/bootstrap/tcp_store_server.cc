#include "runtime/bootstrap/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/bootstrap/auth.h"
#include "runtime/bootstrap/store_protocol.h"
#include "runtime/thread_name.h"

namespace relay {
namespace {

namespace proto = store_protocol;

constexpr size_t kHelloBytes =
    proto::kMagic.size() + proto::kNonceBytes + proto::kProofBytes;
// A client that stops reading its replies is dropped once this much is
// queued for it.
constexpr size_t kMaxQueuedOutput = 64u << 20;

std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

}  // namespace

class TcpStoreServer::Loop {
 public:
  Loop(int listen_fd, TcpStoreServerOptions options)
      : listen_fd_(listen_fd), options_(std::move(options)) {}

  absl::Status Init() {
    wake_fd_ = FileDescriptor(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_fd_.valid()) {
      return ErrnoStatus(absl::StatusCode::kInternal, "eventfd", errno);
    }
    return absl::OkStatus();
  }

  // Stops once every client has hung up, or at `linger_until`.
  void Stop(absl::Time linger_until) {
    linger_until_ns_.store(absl::ToUnixNanos(linger_until));
    stop_.store(true);
    uint64_t one = 1;
    ssize_t ignored = write(wake_fd_.get(), &one, sizeof(one));
    (void)ignored;
  }

  Stats stats() const {
    Stats s;
    s.accepted = accepted_.load();
    s.authenticated = authenticated_.load();
    s.rejected_token = rejected_token_.load();
    s.dropped_malformed = dropped_malformed_.load();
    s.evicted = evicted_.load();
    return s;
  }

  void Run() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    while (true) {
      if (stop_.load() &&
          (conns_.empty() ||
           absl::Now() >= absl::FromUnixNanos(linger_until_ns_.load()))) {
        break;
      }
      fds.clear();
      ids.clear();
      fds.push_back({wake_fd_.get(), POLLIN, 0});
      // Out of file descriptors, the listening socket stays readable: it
      // is left out of the poll until the pause ends.
      const bool accepting = absl::Now() >= accept_paused_until_;
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      for (auto& [id, conn] : conns_) {
        short events = POLLIN;
        if (conn->out_pos < conn->out.size()) events |= POLLOUT;
        fds.push_back({conn->fd.get(), events, 0});
        ids.push_back(id);
      }
      int n = poll(fds.data(), fds.size(), PollTimeoutMillis());
      if (n < 0 && errno != EINTR) break;  // Nothing sensible left to do.
      if (n > 0) {
        if (fds[1].revents != 0) AcceptAll();
        for (size_t i = 0; i < ids.size(); ++i) {
          const short revents = fds[i + 2].revents;
          if (revents == 0) continue;
          auto it = conns_.find(ids[i]);
          if (it == conns_.end()) continue;
          Connection& conn = *it->second;
          if (revents & POLLOUT) Flush(conn);
          if (revents & (POLLIN | POLLHUP | POLLERR)) {
            ReadAvailable(conn);
            Process(ids[i]);
          }
        }
      }
      ExpireDeadlines();
      while (!runnable_.empty()) {
        const uint64_t id = runnable_.front();
        runnable_.pop_front();
        Process(id);
      }
      RemoveClosed();
    }
  }

 private:
  struct Connection {
    FileDescriptor fd;
    bool authenticated = false;
    bool closing = false;
    std::string server_nonce;
    absl::Time handshake_deadline;
    std::string in;
    std::string out;
    size_t out_pos = 0;
    uint64_t parked_waiter = 0;  // A kGet waiting for keys; 0: none.
  };
  struct Waiter {
    uint64_t conn;
    std::vector<std::string> keys;
    absl::Time deadline;
    uint64_t timeout_ms;
  };

  int PollTimeoutMillis() const {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [id, conn] : conns_) {
      if (!conn->authenticated) next = std::min(next, conn->handshake_deadline);
    }
    for (const auto& [id, waiter] : waiters_) {
      next = std::min(next, waiter.deadline);
    }
    if (stop_.load()) next = std::min(next, absl::FromUnixNanos(linger_until_ns_.load()));
    if (accept_paused_until_ > absl::Now()) {
      next = std::min(next, accept_paused_until_);
    }
    if (next == absl::InfiniteFuture()) return 1000;
    const int64_t ms = absl::ToInt64Milliseconds(next - absl::Now()) + 1;
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
  }

  // How long accepting pauses when accept() finds no file descriptor.
  static constexpr absl::Duration kAcceptPause = absl::Milliseconds(50);
  // Connections taken per wake-up, so a flood cannot starve the rest.
  static constexpr int kAcceptsPerPoll = 64;

  void AcceptAll() {
    for (int k = 0; k < kAcceptsPerPoll; ++k) {
      int fd = accept4(listen_fd_, nullptr, nullptr,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          // No room: free a descriptor from the handshake queue and accept
          // again at once (pausing here let one connection in per pause, so
          // a real client queued behind a flood waited the flood's length
          // times the pause). With none to free, stop polling the listening
          // socket, which stays readable, for a moment.
          if (EvictOldestUnauthenticated()) continue;
          accept_paused_until_ = absl::Now() + kAcceptPause;
        }
        return;  // EAGAIN, or a transient error: retry on next poll.
      }
      accepted_.fetch_add(1);
      if (unauthenticated_ >= std::max(1, options_.max_unauthenticated)) {
        EvictOldestUnauthenticated();
      }
      auto conn = std::make_unique<Connection>();
      conn->fd = FileDescriptor(fd);
      conn->server_nonce = RandomBytes(proto::kNonceBytes);
      conn->handshake_deadline = absl::Now() + options_.handshake_timeout;
      conn->out = absl::StrCat(proto::kMagic, conn->server_nonce);
      Connection& ref = *conn;
      handshake_queue_.push_back(next_conn_id_);
      ++unauthenticated_;
      conns_.emplace(next_conn_id_++, std::move(conn));
      Flush(ref);
    }
  }

  // Drops the connection that has waited longest in the handshake; false
  // when none is waiting.
  bool EvictOldestUnauthenticated() {
    while (!handshake_queue_.empty()) {
      const uint64_t id = handshake_queue_.front();
      handshake_queue_.pop_front();
      auto it = conns_.find(id);
      if (it == conns_.end() || it->second->authenticated ||
          it->second->closing) {
        continue;
      }
      evicted_.fetch_add(1);
      Close(*it->second);
      // Its descriptor goes now, not at the end of the loop's turn: the
      // caller needs the room.
      it->second->fd = FileDescriptor();
      return true;
    }
    return false;
  }

  void ReadAvailable(Connection& conn) {
    char buf[64 << 10];
    for (;;) {
      ssize_t n = recv(conn.fd.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        conn.in.append(buf, static_cast<size_t>(n));
        // A client may have one request in flight; more than a frame's worth
        // of unread input means it is not following the protocol.
        if (conn.in.size() > proto::kMaxFrameBytes + 8) {
          DropMalformed(conn);
          return;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      Close(conn);  // Orderly close or an error.
      return;
    }
  }

  void Flush(Connection& conn) {
    while (conn.out_pos < conn.out.size()) {
      ssize_t n = send(conn.fd.get(), conn.out.data() + conn.out_pos,
                       conn.out.size() - conn.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        conn.out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Close(conn);
      return;
    }
    if (conn.out_pos == conn.out.size()) {
      conn.out.clear();
      conn.out_pos = 0;
    } else if (conn.out.size() - conn.out_pos > kMaxQueuedOutput) {
      Close(conn);
    }
  }

  void Close(Connection& conn) {
    if (conn.closing) return;
    conn.closing = true;
    if (!conn.authenticated) --unauthenticated_;
    if (conn.parked_waiter != 0) waiters_.erase(conn.parked_waiter);
    conn.parked_waiter = 0;
  }

  void DropMalformed(Connection& conn) {
    if (!conn.closing) dropped_malformed_.fetch_add(1);
    Close(conn);
  }

  void Process(uint64_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    Connection& conn = *it->second;
    if (conn.closing) return;
    if (!conn.authenticated) {
      if (conn.in.size() < kHelloBytes) return;
      absl::string_view hello(conn.in.data(), kHelloBytes);
      const absl::string_view magic = hello.substr(0, proto::kMagic.size());
      const absl::string_view client_nonce =
          hello.substr(proto::kMagic.size(), proto::kNonceBytes);
      const absl::string_view proof =
          hello.substr(proto::kMagic.size() + proto::kNonceBytes);
      if (magic != proto::kMagic ||
          !ProofsEqual(proof, Proof(ProofRole::kClient, options_.token,
                                    conn.server_nonce, client_nonce))) {
        rejected_token_.fetch_add(1);
        Close(conn);
        return;
      }
      conn.out.append(Proof(ProofRole::kServer, options_.token, client_nonce,
                            conn.server_nonce));
      conn.in.erase(0, kHelloBytes);
      conn.authenticated = true;
      --unauthenticated_;
      authenticated_.fetch_add(1);
    }
    while (!conn.closing && conn.parked_waiter == 0 && conn.in.size() >= 4) {
      absl::StatusOr<uint32_t> size = proto::DecodeFrameSize(conn.in);
      if (!size.ok()) {
        DropMalformed(conn);
        return;
      }
      if (conn.in.size() < 4 + static_cast<size_t>(*size)) break;
      absl::StatusOr<proto::Request> request =
          proto::DecodeRequest(absl::string_view(conn.in).substr(4, *size));
      conn.in.erase(0, 4 + static_cast<size_t>(*size));
      if (!request.ok()) {
        DropMalformed(conn);
        return;
      }
      Handle(id, conn, *std::move(request));
    }
    Flush(conn);
  }

  void Respond(Connection& conn, proto::Op op, const proto::Response& r) {
    conn.out.append(proto::EncodeResponse(op, r));
  }

  void Handle(uint64_t id, Connection& conn, proto::Request request) {
    proto::Response response;
    if (request.op == proto::Op::kDeletePrefix) {  // "" is every key.
      const std::string& prefix = request.keys[0];
      absl::erase_if(map_, [&](const auto& entry) {
        return absl::StartsWith(entry.first, prefix);
      });
      Respond(conn, request.op, response);
      return;
    }
    for (const std::string& key : request.keys) {
      if (key.empty()) {
        response.status =
            absl::InvalidArgumentError("Store: key must not be empty");
        Respond(conn, request.op, response);
        return;
      }
    }
    const std::string& key = request.keys[0];
    switch (request.op) {
      case proto::Op::kSet:
        map_.insert_or_assign(key, std::move(request.value));
        Respond(conn, request.op, response);
        Wake(key);
        return;
      case proto::Op::kAdd: {
        auto it = map_.try_emplace(key, "0").first;
        int64_t current = 0;
        if (!absl::SimpleAtoi(it->second, &current)) {
          response.status = absl::InvalidArgumentError(
              absl::StrCat("Store::Add: key ", Quoted(key),
                           " holds a value that is not a decimal int64"));
        } else if (__builtin_add_overflow(current, request.delta,
                                          &response.counter)) {
          response.status = absl::OutOfRangeError(
              absl::StrCat("Store::Add: key ", Quoted(key), ": ", current,
                           " + ", request.delta, " overflows int64"));
        } else {
          it->second = absl::StrCat(response.counter);
        }
        Respond(conn, request.op, response);
        Wake(key);
        return;
      }
      case proto::Op::kDeletePrefix:
        return;  // Handled above.
      case proto::Op::kDelete:
        if (map_.erase(key) == 0) {
          response.status = absl::NotFoundError(
              absl::StrCat("Store::Delete: key ", Quoted(key), " not found"));
        }
        Respond(conn, request.op, response);
        return;
      case proto::Op::kGet: {
        const uint64_t waiter_id = next_waiter_id_++;
        const uint64_t ms = std::min<uint64_t>(request.timeout_ms,
                                               uint64_t{1} << 40);
        Waiter waiter{id, std::move(request.keys),
                      absl::Now() + absl::Milliseconds(ms), ms};
        if (TryAnswer(conn, waiter)) return;
        conn.parked_waiter = waiter_id;
        index_[FirstMissing(waiter)].push_back(waiter_id);
        waiters_.emplace(waiter_id, std::move(waiter));
        return;
      }
    }
  }

  const std::string& FirstMissing(const Waiter& waiter) const {
    for (const std::string& key : waiter.keys) {
      if (!map_.contains(key)) return key;
    }
    return waiter.keys.back();  // Unreached: callers checked one is missing.
  }

  // Answers `waiter` if every key it wants is set.
  bool TryAnswer(Connection& conn, const Waiter& waiter) {
    proto::Response response;
    response.values.reserve(waiter.keys.size());
    for (const std::string& key : waiter.keys) {
      auto it = map_.find(key);
      if (it == map_.end()) return false;
      response.values.push_back(it->second);
    }
    Respond(conn, proto::Op::kGet, response);
    return true;
  }

  void Wake(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return;
    std::vector<uint64_t> ids = std::move(it->second);
    index_.erase(it);
    for (uint64_t waiter_id : ids) {
      auto w = waiters_.find(waiter_id);
      if (w == waiters_.end()) continue;  // Timed out or its client left.
      auto c = conns_.find(w->second.conn);
      Connection& conn = *c->second;
      if (TryAnswer(conn, w->second)) {
        conn.parked_waiter = 0;
        runnable_.push_back(w->second.conn);  // Serve its next request.
        waiters_.erase(w);
      } else {
        index_[FirstMissing(w->second)].push_back(waiter_id);
      }
    }
  }

  void ExpireDeadlines() {
    const absl::Time now = absl::Now();
    for (auto& [id, conn] : conns_) {
      if (!conn->authenticated && !conn->closing &&
          now >= conn->handshake_deadline) {
        rejected_token_.fetch_add(1);
        Close(*conn);
      }
    }
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (now < it->second.deadline) {
        ++it;
        continue;
      }
      Connection& conn = *conns_.find(it->second.conn)->second;
      proto::Response response;
      response.status = absl::DeadlineExceededError(absl::StrCat(
          "Store::Get: key ", Quoted(FirstMissing(it->second)),
          " was not set within ",
          absl::FormatDuration(absl::Milliseconds(it->second.timeout_ms))));
      Respond(conn, proto::Op::kGet, response);
      conn.parked_waiter = 0;
      runnable_.push_back(it->second.conn);
      it = waiters_.erase(it);
    }
  }

  void RemoveClosed() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second->closing) {
        conns_.erase(it++);
      } else {
        ++it;
      }
    }
  }

  const int listen_fd_;
  const TcpStoreServerOptions options_;
  FileDescriptor wake_fd_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> linger_until_ns_{0};  // Meaningful once stop_ is set.
  std::atomic<int64_t> accepted_{0}, authenticated_{0}, rejected_token_{0},
      dropped_malformed_{0}, evicted_{0};

  // Everything below belongs to the loop's thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> conns_;
  uint64_t next_conn_id_ = 1;
  absl::flat_hash_map<std::string, std::string> map_;
  std::map<uint64_t, Waiter> waiters_;
  uint64_t next_waiter_id_ = 1;
  // Key -> waiters whose first missing key it is (may hold stale ids).
  absl::flat_hash_map<std::string, std::vector<uint64_t>> index_;
  std::deque<uint64_t> runnable_;
  // Connections in the handshake, oldest first (may hold stale ids), and
  // how many there are.
  std::deque<uint64_t> handshake_queue_;
  int unauthenticated_ = 0;
  absl::Time accept_paused_until_ = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const TcpStoreServerOptions& options) {
  if (options.linger < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("TcpStoreServer: negative linger");
  }
  absl::StatusOr<Listener> listener = Listener::Bind(options.host, options.port);
  if (!listener.ok()) {
    return absl::Status(listener.status().code(),
                        absl::StrCat("TcpStoreServer: ",
                                     listener.status().message()));
  }
  auto loop = std::make_unique<Loop>(listener->fd(), options);
  if (absl::Status s = loop->Init(); !s.ok()) return s;
  return std::unique_ptr<TcpStoreServer>(
      new TcpStoreServer(*std::move(listener), std::move(loop), options.linger));
}

TcpStoreServer::TcpStoreServer(Listener listener, std::unique_ptr<Loop> loop,
                               absl::Duration linger)
    : listener_(std::move(listener)), linger_(linger), loop_(std::move(loop)) {
  thread_ = std::thread([this] {
    NameThisThread("relay-store");
    loop_->Run();
  });
}

TcpStoreServer::~TcpStoreServer() {
  loop_->Stop(absl::Now() + linger_);
  thread_.join();
}

TcpStoreServer::Stats TcpStoreServer::stats() const { return loop_->stats(); }

}  // namespace relay
