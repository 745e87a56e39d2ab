// File: runtime/exchange_call.h
//
// What a rank brings to an exchange (Transport::Exchange, SlotExchange):
// its contribution, the finish that reads everyone's, and the context that
// finish gets. Apart from runtime/slot_exchange.h so that the transport
// interface, and the users who include it, do not carry the slot protocol.
#ifndef RELAY_RUNTIME_EXCHANGE_CALL_H_
#define RELAY_RUNTIME_EXCHANGE_CALL_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace relay {

// The most context an exchange copies for its finish.
inline constexpr size_t kMaxExchangeContextBytes = 128;

// One rank's contribution to an exchange, as the finishing rank sees it.
struct Contribution {
  const void* data = nullptr;
  size_t bytes = 0;
};

// Runs once per exchange on each rank, with every rank's contribution in
// rank order and the context the rank passed to Start (a copy). The peers'
// contributions are in their slots; this rank's own is where its input's
// `data` points, the bytes it copied into its slot (its slot only for an
// input written by a fill function). Its slot's lines were last read by the
// peers, so the copy's stores wait for them to come back, and reading the
// slot would wait for the stores: one more transfer between cores on every
// exchange (docs/design/tuning-history.md). So a finish that
// writes memory holding its own input sees that contribution change as it
// writes. It must not block; it may not start another exchange on the
// same SlotExchange.
using ExchangeFinishFn = void (*)(absl::Span<const Contribution> all,
                                  const void* context);

// Writes this rank's contribution, `bytes` bytes, into its slot, from the
// context the rank passed to Start (the caller's own when Start publishes
// at once, else the op's copy; do not keep the pointer): for a
// contribution that is not one range of memory. The all_reduce pipeline
// (collectives/shm.h) leaves out the piece of its chunk that only this
// rank reads, which it reduces from its own buffer instead. Runs once,
// when the exchange is published, on whichever thread drives the queue;
// bytes of the slot it leaves unwritten hold whatever was there. It must
// not block.
using ExchangeFillFn = void (*)(void* slot, size_t bytes, const void* context);

// What a rank puts into its slot for an exchange: `bytes` bytes, copied
// from `data` (which must stay valid until the exchange's request
// completes: it is read when the slot is written, which may be after Start
// returns), or written by `fill`. One of the two, where bytes > 0.
//   ExchangeInput{&value, sizeof(value)}
//   ExchangeInput{nullptr, bytes, &FillFromContext}
struct ExchangeInput {
  const void* data = nullptr;
  size_t bytes = 0;
  ExchangeFillFn fill = nullptr;
};

// One exchange, as Start and Run (and Transport::Exchange and RunExchange)
// take it: every rank brings the same `tag` (a collective's) and its own
// `input`; `finish` runs on this rank with a copy of `context`
// (`context_bytes`, at most kMaxExchangeContextBytes) once every contribution is
// there, or DeadlineExceeded when `deadline` passes first.
//   ExchangeCall call{.tag = t, .input = {&x, sizeof(x)}, .finish = &Sum,
//                     .context = &out, .context_bytes = sizeof(out),
//                     .deadline = deadline};
// Passed by reference, so the layers between a collective and its slot hand
// on one pointer: copied through six arguments, the stores of one layer and
// the wider loads of the next could not be forwarded (docs/design/tuning-history.md).
struct ExchangeCall {
  uint64_t tag = 0;
  // What the call is, beyond its place in the order (a collective's
  // Fingerprint::Pack, runtime/fingerprint.h): every rank's slot carries
  // it, and a rank that finds a peer's differ fails the exchange with
  // InvalidArgument naming both calls (ranks that disagree on a count
  // would otherwise read past each other's data). 0 for exchanges that are
  // not collectives.
  uint64_t signature = 0;
  ExchangeInput input;
  ExchangeFinishFn finish = nullptr;
  const void* context = nullptr;
  size_t context_bytes = 0;
  absl::Time deadline = absl::InfiniteFuture();
};

}  // namespace relay

#endif  // RELAY_RUNTIME_EXCHANGE_CALL_H_
