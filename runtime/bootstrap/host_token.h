// File: runtime/bootstrap/host_token.h
//
// A job token for a job whose ranks all run on one host and whose launcher
// set no RELAY_TOKEN (torchrun, mpirun and srun set none). Rank 0 makes a
// random token and writes it where only this user can read it; the other
// ranks, which run as the same user on the same host, read it there. Other
// local users cannot, so they cannot pass the store's handshake (auth.h):
// an empty token would let any local process read and write the job's keys.
//
// Where: $XDG_RUNTIME_DIR/relay/, else /tmp/relay-<uid>/, a directory this
// user owns with no access for others (made so if missing; refused if it
// is anything else), file store-<port>.token (mode 0600), replaced
// atomically. The store's port names the job: two jobs on one host cannot
// share a store port. The file goes when rank 0's HostToken does.
//
// Example (rank 0, then the others):
//   RELAY_ASSIGN_OR_RETURN(auto token, HostToken::Create(port));
//   ... host the store with token->token() ...
//   RELAY_ASSIGN_OR_RETURN(std::string t,
//                          ReadHostToken(port, deadline, /*stale=*/""));
#ifndef RELAY_RUNTIME_BOOTSTRAP_HOST_TOKEN_H_
#define RELAY_RUNTIME_BOOTSTRAP_HOST_TOKEN_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace relay {

class HostToken {
 public:
  // Writes a fresh token for the job whose store listens on `port`.
  // FailedPrecondition when the directory is not private to this user.
  static absl::StatusOr<std::unique_ptr<HostToken>> Create(int port);
  ~HostToken();  // Removes the file.
  HostToken(const HostToken&) = delete;
  HostToken& operator=(const HostToken&) = delete;

  const std::string& token() const { return token_; }
  const std::string& path() const { return path_; }

 private:
  HostToken(std::string token, std::string path)
      : token_(std::move(token)), path_(std::move(path)) {}
  std::string token_;
  std::string path_;
};

// The token rank 0 wrote for `port`, once its file exists and holds one
// other than `stale` (a token that the store already refused: left by an
// earlier job on that port). DeadlineExceeded naming the file when none
// comes by `deadline`; FailedPrecondition when the directory or file is
// readable by other users (then it is not a secret).
absl::StatusOr<std::string> ReadHostToken(int port, absl::Time deadline,
                                          absl::string_view stale);

// The directory the token files live in (for messages and tests).
std::string HostTokenDirectory();

}  // namespace relay

#endif  // RELAY_RUNTIME_BOOTSTRAP_HOST_TOKEN_H_
