// File: transports/ucx/ucx_status.h
//
// UCX status codes as absl::Status, in one place (DESIGN.md: each backend
// translates its native errors in one small header). A lost or unreachable
// peer is Unavailable naming the rank; a message larger than its receive
// buffer is InvalidArgument; a cancelled request is Cancelled; anything else
// is Internal naming the UCX call and UCX's own error string.
//
// Example:
//   ucs_status_t s = ucp_worker_create(context, &params, &worker);
//   if (s != UCS_OK) return UcxError("ucp_worker_create", s);
#ifndef RELAY_TRANSPORTS_UCX_UCX_STATUS_H_
#define RELAY_TRANSPORTS_UCX_UCX_STATUS_H_

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace relay {

// True for the codes UCX uses when the other side went away.
inline bool IsUcxPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
      return true;
    default:
      return false;
  }
}

// The failure of a library call that names no peer.
inline absl::Status UcxError(absl::string_view call, ucs_status_t s) {
  if (s == UCS_OK) return absl::OkStatus();
  const std::string what =
      absl::StrCat(call, " failed: ", ucs_status_string(s));
  if (s == UCS_ERR_CANCELED) return absl::CancelledError(what);
  if (s == UCS_ERR_NO_MEMORY || s == UCS_ERR_NO_RESOURCE) {
    return absl::ResourceExhaustedError(what);
  }
  return absl::InternalError(what);
}

// The failure of an operation with rank `peer`.
inline absl::Status UcxPeerError(absl::string_view op, int peer,
                                 ucs_status_t s) {
  if (s == UCS_OK) return absl::OkStatus();
  if (IsUcxPeerFailure(s)) {
    return absl::UnavailableError(absl::StrCat(
        "ucx: rank ", peer, " was lost (", ucs_status_string(s), ")"));
  }
  if (s == UCS_ERR_MESSAGE_TRUNCATED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ucx: rank ", peer, " sent a message larger than this ", op,
        " buffer"));
  }
  return UcxError(absl::StrCat(op, " with rank ", peer), s);
}

}  // namespace relay

#endif  // RELAY_TRANSPORTS_UCX_UCX_STATUS_H_
