// File: transports/ucx/ucx_transport.h
//
// The UCX transport: ranks as processes on one host or many, over UCX's
// tag-matching API (UCP). UCX picks the wire itself (InfiniBand RDMA on a
// cluster, shared memory or TCP on one host); that choice stays the user's
// through UCX_TLS and UCX's other variables, read at Connect().
//
// Wiring. Each communicator gets its own UCP context and worker. Workers
// publish their addresses in the communicator's store ("ucx/<rank>") and
// every rank makes an endpoint to every other (and to itself) from them.
// A relay tag and the sender's rank fold into UCX's 64-bit tag:
//   bits 44..63  sender rank (up to 2^20 ranks)
//   bit  43      collective traffic
//   bits 0..42   user tag (< 2^43, max_user_tag), or for collectives the
//                sequence number's low 27 bits and the 16-bit lane
// so a receive matches exactly one (peer, tag) and UCX keeps the order of
// messages between a pair on a tag.
//
// Progress. UCP makes progress only when called. Wait and Test drive it
// (Request's Progress), and a progress thread drives it while requests are
// outstanding, so transfers move while the caller computes. The thread
// stands aside while a caller polls and takes over when the caller's Wait
// goes to sleep (StoppedPolling), or when the caller has not polled for
// 1 ms (up to 4 ms after a long stretch of polling, 32 ms where the
// host's ranks and their threads outnumber its cores; see ProgressLoop).
// The worker is used under one lock; completions run after it is
// released, so callbacks may post new operations.
//
// Waiting (RELAY_UCX_WAIT). `poll`: callers and the thread poll, yielding
// the core between polls: the lowest latency while every rank has a core.
// `block`: a caller polls only while operations complete, then sleeps, and
// the thread sleeps on the worker's event fd (UCP_FEATURE_WAKEUP) until UCX
// has work for it: ranks that outnumber the cores stop taking the cores of
// ranks with work. `auto` (default): `block` when this host runs more of the
// job's ranks (host names exchanged through the store) than the process may
// use cores, `poll` otherwise.
//
// Failure. With RELAY_UCX_ERROR_MODE=peer, endpoints use UCX's peer error
// handling: a peer that dies or closes fails every pending operation with
// it, and every later one, with Unavailable naming its rank. It is off by
// default because UCX 1.13's shared-memory transports (posix, sysv, cma,
// self) do not support it, so asking for it moves ranks on one host to TCP;
// without it a lost peer shows as DeadlineExceeded at the operation's
// timeout. Abort() cancels this rank's own requests
// with its reason and closes the endpoints, so peers learn of it. A receive
// whose sender sent fewer bytes than it expects fails with InvalidArgument
// (the sender cannot tell, so its send completes).
//
// Shared-memory exchange. When every rank of the communicator is on this
// host and UCX_TLS allows shared memory (unset, or naming shm, posix,
// sysv, cma...), Connect also maps one POSIX shared-memory segment for the
// group (runtime/shared_segment.h) and offers Exchange() over it
// (runtime/slot_exchange.h, 64 KB per rank): the shm algorithm then runs
// small collectives with no UCX message at all. Exchanges move when a
// caller waits or tests, and on the progress thread while any is pending
// (so a request completed only through OnDone still completes). If the
// segment cannot be made (no /dev/shm), rank 0 says so on stderr and every
// rank uses messages.
//
// Memory. Host memory always; device memory where the UCX build supports
// CUDA (capabilities().device_memory says which).
//
// Lifetime and ownership. Owned by its Communicator like every transport;
// destruction closes the endpoints (flushing them if nothing is pending)
// and releases the worker and context.
//
// Example (ranks started by tools/relayrun, each a process):
//   RELAY_ASSIGN_OR_RETURN(auto comm, CreateCommunicatorFromEnvironment());
//   // RELAY_TRANSPORT=ucx, or the default for processes.
#ifndef RELAY_TRANSPORTS_UCX_UCX_TRANSPORT_H_
#define RELAY_TRANSPORTS_UCX_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/transport.h"

namespace relay {

inline constexpr int kUcxRankBits = 20;
inline constexpr int64_t kUcxMaxUserTag = (int64_t{1} << 43) - 1;

class UcxTransportFactory final : public TransportFactory {
 public:
  absl::string_view name() const override { return "ucx"; }
  // True if a UCP context can be created (the library and at least one
  // transport are usable).
  bool IsViable() const override;
  bool SpansProcesses() const override { return true; }
  absl::StatusOr<std::unique_ptr<Transport>> Connect(
      const TransportConfig& config) override;
};

}  // namespace relay

#endif  // RELAY_TRANSPORTS_UCX_UCX_TRANSPORT_H_
