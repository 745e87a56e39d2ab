#include "testing/host_stream_ops.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"

namespace relay {
namespace {

// Streams and events are tokens: a small heap object each, so that a
// leaked one shows up under the address sanitizer too.
struct Token {
  int kind;
};
constexpr int kStream = 1, kEvent = 2;

absl::Status Expect(void* handle, int kind, const char* what) {
  if (handle == nullptr || static_cast<Token*>(handle)->kind != kind) {
    return absl::InternalError(absl::StrCat("HostStreamOps: bad ", what));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<void*> HostStreamOps::NewStream() {
  streams_.fetch_add(1);
  return new Token{kStream};
}

void HostStreamOps::DeleteStream(void* stream) {
  streams_.fetch_sub(1);
  delete static_cast<Token*>(stream);
}

absl::StatusOr<void*> HostStreamOps::NewEvent() {
  events_.fetch_add(1);
  return new Token{kEvent};
}

void HostStreamOps::DeleteEvent(void* event) {
  events_.fetch_sub(1);
  delete static_cast<Token*>(event);
}

// The caller's stream may be null (the default stream); lane streams and
// events must be ours.
absl::Status HostStreamOps::Record(void* event, void*) {
  return Expect(event, kEvent, "event");
}

absl::Status HostStreamOps::StreamWaitEvent(void*, void* event) {
  return Expect(event, kEvent, "event");
}

bool HostStreamOps::EventDone(void*) { return true; }

absl::Status HostStreamOps::Synchronize(void* event) {
  return Expect(event, kEvent, "event");
}

absl::StatusOr<void*> HostStreamOps::Allocate(size_t bytes, void*) {
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("malloc ", bytes));
  }
  allocations_.fetch_add(1);
  return p;
}

absl::Status HostStreamOps::Free(void* memory, void*) {
  allocations_.fetch_sub(1);
  std::free(memory);
  return absl::OkStatus();
}

absl::Status HostStreamOps::Copy(void* dst, const void* src, size_t bytes,
                                 void*) {
  std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status HostStreamOps::Reduce(DataType dtype, ReduceOp op, const void* a,
                                   const void* b, void* out, size_t count,
                                   void*) {
  if (op == ReduceOp::kAvg) {
    return absl::InvalidArgumentError("HostStreamOps::Reduce: kAvg");
  }
  GetReduceFn(dtype, op)(a, b, out, count);
  return absl::OkStatus();
}

absl::Status HostStreamOps::Divide(DataType dtype, void* data, size_t count,
                                   double divisor, void*) {
  DivideInPlace(dtype, data, count, static_cast<int>(divisor));
  return absl::OkStatus();
}

absl::Status HostStreamOps::WaitRequest(Request& request, void*) {
  return request.Wait();
}

}  // namespace relay
