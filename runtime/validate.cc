#include "runtime/validate.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace relay {
namespace {

// Counts above this are almost surely a negative number cast to size_t, and
// their byte sizes would overflow pointer arithmetic.
constexpr size_t kMaxBytes = size_t{1} << 48;

absl::Status Invalid(const CollectiveArgs& args, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(CollectiveName(args.kind), ": ", what));
}

bool Overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

const char* At(const void* base, size_t elements, DataType dtype) {
  return static_cast<const char*>(base) + elements * DataTypeSize(dtype);
}

// Checks `count * multiple` fits; returns the product through `out`.
bool MultiplyFits(size_t count, size_t multiple, size_t* out) {
  if (multiple != 0 && count > kMaxBytes / multiple) return false;
  *out = count * multiple;
  return true;
}

// The checks below for a buffer that passes them all, in a few compares:
// no division by the element size (any count up to kMaxBytes / 8 fits
// every type) and no Status built. Every call checks two buffers.
bool PlainlyValid(const ConstBuffer& buffer,
                  const TransportCapabilities& caps) {
  if (!IsValid(buffer.dtype) || buffer.count > kMaxBytes / 8) return false;
  if (buffer.count == 0) return true;
  return buffer.data != nullptr &&
         (buffer.device.is_host() ? caps.host_memory : caps.device_memory);
}

}  // namespace

absl::Status ValidateBuffer(const ConstBuffer& buffer, const char* what,
                            const TransportCapabilities& caps) {
  if (PlainlyValid(buffer, caps)) return absl::OkStatus();
  if (!IsValid(buffer.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has an unknown data type (", static_cast<int>(buffer.dtype),
        ")"));
  }
  if (buffer.count > kMaxBytes / DataTypeSize(buffer.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " count ", buffer.count,
        " is too large (a negative size converted to unsigned?)"));
  }
  if (buffer.data == nullptr && buffer.count > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is null but its count is ", buffer.count));
  }
  if (buffer.count > 0) {
    if (buffer.device.is_host() && !caps.host_memory) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is host memory, which this transport cannot move"));
    }
    if (!buffer.device.is_host() && !caps.device_memory) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " is on ", buffer.device.ToString(),
          ", but this transport moves host memory only"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCollective(const CollectiveArgs& args, int rank, int size,
                                const TransportCapabilities& caps) {
  const CollectiveKind kind = args.kind;
  if (IsRooted(kind) && (args.root < 0 || args.root >= size)) {
    return Invalid(args, absl::StrCat("root ", args.root,
                                      " is out of range [0, ", size, ")"));
  }
  if (IsReduction(kind) && !IsValid(args.op)) {
    return Invalid(args, absl::StrCat("unknown reduce op (",
                                      static_cast<int>(args.op), ")"));
  }
  if (kind == CollectiveKind::kBarrier) return absl::OkStatus();

  const bool is_root = rank == args.root;
  // Which buffers matter on this rank.
  bool uses_send = true, uses_recv = true;
  switch (kind) {
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter:
      uses_send = is_root;
      break;
    case CollectiveKind::kReduce:
    case CollectiveKind::kGather:
      uses_recv = is_root;
      break;
    default:
      break;
  }
  // ValidateBuffer only for a buffer that does not plainly pass: the call
  // and its Status cost about 35 instructions a buffer.
  if (uses_send && !PlainlyValid(args.send, caps)) {
    absl::Status s = ValidateBuffer(args.send, "send buffer", caps);
    if (!s.ok()) return Invalid(args, std::string(s.message()));
  }
  if (uses_recv && !PlainlyValid(args.recv, caps)) {
    absl::Status s = ValidateBuffer(args.recv, "recv buffer", caps);
    if (!s.ok()) return Invalid(args, std::string(s.message()));
  }
  if (uses_send && uses_recv && args.send.dtype != args.recv.dtype) {
    return Invalid(args, absl::StrCat("send type ",
                                      DataTypeName(args.send.dtype),
                                      " differs from recv type ",
                                      DataTypeName(args.recv.dtype)));
  }

  const size_t n = static_cast<size_t>(size);
  const size_t send_count = args.send.count, recv_count = args.recv.count;
  const size_t send_bytes = args.send.bytes(), recv_bytes = args.recv.bytes();
  const DataType dtype = uses_send ? args.send.dtype : args.recv.dtype;
  size_t expected = 0;
  auto count_mismatch = [&](const char* rule, size_t want, size_t got) {
    return Invalid(args, absl::StrCat(rule, ": expected ", want, ", got ", got));
  };
  // `same_or_disjoint`: in place means the very same pointer.
  auto same_or_disjoint = [&]() -> absl::Status {
    if (args.send.data != args.recv.data &&
        Overlaps(args.send.data, send_bytes, args.recv.data, recv_bytes)) {
      return Invalid(args,
                     "send and recv buffers partly overlap (in place means "
                     "the same pointer)");
    }
    return absl::OkStatus();
  };

  switch (kind) {
    case CollectiveKind::kAllReduce:
      if (send_count != recv_count) {
        return count_mismatch("recv count must equal send count", send_count,
                              recv_count);
      }
      return same_or_disjoint();
    case CollectiveKind::kBroadcast:
      if (is_root && send_count != recv_count) {
        return count_mismatch("at the root, recv count must equal send count",
                              send_count, recv_count);
      }
      return is_root ? same_or_disjoint() : absl::OkStatus();
    case CollectiveKind::kReduce:
      if (is_root && send_count != recv_count) {
        return count_mismatch("at the root, recv count must equal send count",
                              send_count, recv_count);
      }
      return is_root ? same_or_disjoint() : absl::OkStatus();
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather: {
      if (!uses_recv) return absl::OkStatus();
      if (!MultiplyFits(send_count, n, &expected)) {
        return Invalid(args, "send count times ranks overflows");
      }
      if (recv_count != expected) {
        return count_mismatch("recv count must be send count x ranks",
                              expected, recv_count);
      }
      // In place: the send block is this rank's slot of the recv buffer.
      if (Overlaps(args.send.data, send_bytes, args.recv.data, recv_bytes) &&
          args.send.data != At(args.recv.data, rank * send_count, dtype)) {
        return Invalid(args,
                       "send buffer overlaps recv buffer but is not this "
                       "rank's block of it (in place means send == recv + "
                       "rank * count)");
      }
      return absl::OkStatus();
    }
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter: {
      if (!uses_send) return absl::OkStatus();
      if (!MultiplyFits(recv_count, n, &expected)) {
        return Invalid(args, "recv count times ranks overflows");
      }
      if (send_count != expected) {
        return count_mismatch("send count must be recv count x ranks",
                              expected, send_count);
      }
      if (Overlaps(args.send.data, send_bytes, args.recv.data, recv_bytes) &&
          args.recv.data != At(args.send.data, rank * recv_count, dtype)) {
        return Invalid(args,
                       "recv buffer overlaps send buffer but is not this "
                       "rank's block of it (in place means recv == send + "
                       "rank * count)");
      }
      return absl::OkStatus();
    }
    case CollectiveKind::kAllToAll:
      if (send_count != recv_count) {
        return count_mismatch("recv count must equal send count", send_count,
                              recv_count);
      }
      if (send_count % n != 0) {
        return Invalid(args, absl::StrCat("count ", send_count,
                                          " is not a multiple of the ",
                                          size, " ranks"));
      }
      if (Overlaps(args.send.data, send_bytes, args.recv.data, recv_bytes)) {
        return Invalid(args, "send and recv buffers overlap (all_to_all "
                             "has no in-place form)");
      }
      return absl::OkStatus();
    case CollectiveKind::kBarrier:
      return absl::OkStatus();
  }
  return Invalid(args, "unknown collective kind");
}

}  // namespace relay
