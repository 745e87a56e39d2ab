// File: runtime/status_macros.h
//
// RELAY_RETURN_IF_ERROR and RELAY_ASSIGN_OR_RETURN: the two propagation macros
// Abseil 20220623 (our pinned version) does not ship yet.
//
// Example:
//   absl::Status Run(Communicator& comm) {
//     RELAY_ASSIGN_OR_RETURN(Request r, comm.Barrier());
//     RELAY_RETURN_IF_ERROR(r.Wait());
//     return absl::OkStatus();
//   }
#ifndef RELAY_RUNTIME_STATUS_MACROS_H_
#define RELAY_RUNTIME_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RELAY_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status relay_status_ = (expr);          \
    if (!relay_status_.ok()) return relay_status_;  \
  } while (0)

#define RELAY_STATUS_CONCAT_INNER_(a, b) a##b
#define RELAY_STATUS_CONCAT_(a, b) RELAY_STATUS_CONCAT_INNER_(a, b)

#define RELAY_ASSIGN_OR_RETURN(lhs, expr) \
  RELAY_ASSIGN_OR_RETURN_IMPL_(           \
      RELAY_STATUS_CONCAT_(relay_statusor_, __LINE__), lhs, expr)

#define RELAY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // RELAY_RUNTIME_STATUS_MACROS_H_
