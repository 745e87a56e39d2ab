// File: runtime/validate.h
//
// Input checks shared by every entry point: a call that fails them returns
// InvalidArgument before anything is sent, with a message naming the bad
// argument. The buffer conventions checked here are in runtime/collective.h.
//
// Example:
//   RELAY_RETURN_IF_ERROR(ValidateCollective(args, rank, size, caps));
#ifndef RELAY_RUNTIME_VALIDATE_H_
#define RELAY_RUNTIME_VALIDATE_H_

#include "absl/status/status.h"
#include "runtime/buffer.h"
#include "runtime/collective.h"
#include "runtime/transport.h"

namespace relay {

// A buffer is well formed: valid dtype, non-null data when count > 0, a byte
// size that does not overflow, memory the transport can move. `what` names
// it in the message ("send buffer").
absl::Status ValidateBuffer(const ConstBuffer& buffer, const char* what,
                            const TransportCapabilities& caps);

absl::Status ValidateCollective(const CollectiveArgs& args, int rank, int size,
                                const TransportCapabilities& caps);

}  // namespace relay

#endif  // RELAY_RUNTIME_VALIDATE_H_
