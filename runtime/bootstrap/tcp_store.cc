#include "runtime/bootstrap/tcp_store.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "runtime/bootstrap/auth.h"

namespace relay {
namespace {

namespace proto = store_protocol;

absl::Status CheckKey(absl::string_view op, absl::string_view key) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Store::", op, ": key must not be empty"));
  }
  return absl::OkStatus();
}

absl::Status WithContext(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Connect(
    const TcpStoreOptions& options) {
  std::shared_ptr<TcpStore> store(new TcpStore(options));
  absl::StatusOr<Socket> first =
      store->OpenConnection(absl::Now() + options.connect_timeout,
                             /*first=*/true);
  if (!first.ok()) return first.status();
  store->idle_.push_back(*std::move(first));
  return store;
}

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Host(
    const TcpStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server =
      TcpStoreServer::Start({.host = options.host,
                             .port = options.port,
                             .token = options.token});
  if (!server.ok()) return server.status();
  TcpStoreOptions client_options = options;
  client_options.port = (*server)->port();
  absl::StatusOr<std::shared_ptr<TcpStore>> store = Connect(client_options);
  if (!store.ok()) return store.status();
  (*store)->server_ = *std::move(server);
  return store;
}

absl::StatusOr<Socket> TcpStore::OpenConnection(absl::Time deadline,
                                                bool first) const {
  const std::string where =
      absl::StrCat("TcpStore ", JoinHostPort(options_.host, options_.port));
  absl::StatusOr<Socket> socket =
      Socket::Connect(options_.host, options_.port, deadline, /*retry=*/first);
  if (!socket.ok()) return WithContext(socket.status(), where);

  // The handshake must finish quickly once connected, whatever the
  // connect deadline left.
  const absl::Time hs_deadline = absl::Now() + options_.io_timeout;
  std::string hello(proto::kMagic.size() + proto::kNonceBytes, '\0');
  if (absl::Status s = socket->RecvAll(hello.data(), hello.size(), hs_deadline);
      !s.ok()) {
    return WithContext(s, absl::StrCat(where, ": no greeting"));
  }
  if (absl::string_view(hello).substr(0, proto::kMagic.size()) !=
      proto::kMagic) {
    return absl::UnavailableError(
        absl::StrCat(where, ": the peer is not a relay store server"));
  }
  const std::string server_nonce = hello.substr(proto::kMagic.size());
  const std::string client_nonce = RandomBytes(proto::kNonceBytes);
  const std::string reply = absl::StrCat(
      proto::kMagic, client_nonce,
      Proof(ProofRole::kClient, options_.token, server_nonce, client_nonce));
  if (absl::Status s = socket->SendAll(reply, hs_deadline); !s.ok()) {
    return WithContext(s, where);
  }
  std::string server_proof(proto::kProofBytes, '\0');
  absl::Status s =
      socket->RecvAll(server_proof.data(), server_proof.size(), hs_deadline);
  if (s.code() == absl::StatusCode::kUnavailable) {
    // The server hangs up on a wrong proof without a word.
    return absl::UnauthenticatedError(absl::StrCat(
        where, " rejected this process's job token (is RELAY_TOKEN the same "
               "on every rank?)"));
  }
  if (!s.ok()) return WithContext(s, where);
  if (!ProofsEqual(server_proof, Proof(ProofRole::kServer, options_.token,
                                       client_nonce, server_nonce))) {
    return absl::UnauthenticatedError(absl::StrCat(
        where, ": the server does not know the job token; not trusting it"));
  }
  return socket;
}

absl::StatusOr<proto::Response> TcpStore::Call(const proto::Request& request,
                                               absl::Time deadline) {
  const std::string frame = proto::EncodeRequest(request);
  if (frame.size() - 4 > proto::kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("TcpStore: request of ", frame.size(),
                     " bytes exceeds the protocol's limit of ",
                     proto::kMaxFrameBytes));
  }
  absl::StatusOr<Socket> socket = absl::UnavailableError("unset");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      socket = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!socket.ok()) {
    socket = OpenConnection(absl::Now() + options_.io_timeout, /*first=*/false);
    if (!socket.ok()) return socket.status();
  }
  const std::string where =
      absl::StrCat("TcpStore ", JoinHostPort(options_.host, options_.port));
  // Any failure below leaves the connection mid-frame: it is dropped, not
  // returned to the pool.
  if (absl::Status s = socket->SendAll(frame, deadline); !s.ok()) {
    return WithContext(s, where);
  }
  char prefix[4];
  if (absl::Status s = socket->RecvAll(prefix, 4, deadline); !s.ok()) {
    return WithContext(s, where);
  }
  absl::StatusOr<uint32_t> size =
      proto::DecodeFrameSize(absl::string_view(prefix, 4));
  if (!size.ok()) return WithContext(size.status(), where);
  std::string body(*size, '\0');
  if (absl::Status s = socket->RecvAll(body.data(), body.size(), deadline);
      !s.ok()) {
    return WithContext(s, where);
  }
  absl::StatusOr<proto::Response> response =
      proto::DecodeResponse(request.op, body);
  if (!response.ok()) return WithContext(response.status(), where);
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(*std::move(socket));
  }
  return response;
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status s = CheckKey("Set", key); !s.ok()) return s;
  proto::Request request{.op = proto::Op::kSet,
                         .keys = {std::string(key)},
                         .value = std::string(value)};
  absl::StatusOr<proto::Response> r =
      Call(request, absl::Now() + options_.io_timeout);
  if (!r.ok()) return r.status();
  return r->status;
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                          absl::Duration timeout) {
  if (absl::Status s = CheckKey("Get", key); !s.ok()) return s;
  std::string k(key);
  absl::StatusOr<std::vector<std::string>> values =
      MultiGet(absl::MakeConstSpan(&k, 1), timeout);
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

absl::StatusOr<std::vector<std::string>> TcpStore::MultiGet(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  if (keys.empty()) return std::vector<std::string>();
  if (keys.size() > proto::kMaxKeysPerGet) {
    return absl::InvalidArgumentError(
        absl::StrCat("Store::MultiGet: ", keys.size(), " keys exceed ",
                     proto::kMaxKeysPerGet));
  }
  for (const std::string& key : keys) {
    if (absl::Status s = CheckKey("Get", key); !s.ok()) return s;
  }
  if (timeout < absl::ZeroDuration()) timeout = absl::ZeroDuration();
  proto::Request request{.op = proto::Op::kGet,
                         .keys = {keys.begin(), keys.end()},
                         .timeout_ms = static_cast<uint64_t>(
                             absl::ToInt64Milliseconds(timeout))};
  // The server answers DeadlineExceeded itself at `timeout`; the slack
  // covers the reply's trip.
  absl::StatusOr<proto::Response> r =
      Call(request, absl::Now() + timeout + options_.io_timeout);
  if (!r.ok()) return r.status();
  if (!r->status.ok()) return r->status;
  if (r->values.size() != keys.size()) {
    return absl::InternalError(
        absl::StrCat("TcpStore: server returned ", r->values.size(),
                     " values for ", keys.size(), " keys"));
  }
  return std::move(r->values);
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  if (absl::Status s = CheckKey("Add", key); !s.ok()) return s;
  proto::Request request{
      .op = proto::Op::kAdd, .keys = {std::string(key)}, .delta = delta};
  absl::StatusOr<proto::Response> r =
      Call(request, absl::Now() + options_.io_timeout);
  if (!r.ok()) return r.status();
  if (!r->status.ok()) return r->status;
  return r->counter;
}

absl::Status TcpStore::DeletePrefix(absl::string_view prefix) {
  proto::Request request{.op = proto::Op::kDeletePrefix,
                         .keys = {std::string(prefix)}};
  absl::StatusOr<proto::Response> r =
      Call(request, absl::Now() + options_.io_timeout);
  if (!r.ok()) return r.status();
  return r->status;
}

absl::Status TcpStore::Delete(absl::string_view key) {
  if (absl::Status s = CheckKey("Delete", key); !s.ok()) return s;
  proto::Request request{.op = proto::Op::kDelete, .keys = {std::string(key)}};
  absl::StatusOr<proto::Response> r =
      Call(request, absl::Now() + options_.io_timeout);
  if (!r.ok()) return r.status();
  return r->status;
}

}  // namespace relay
