#include "runtime/flight_recorder.h"

#include <algorithm>

#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace relay {
namespace {

std::string Time(absl::Time t) {
  if (t == absl::InfinitePast()) return "null";
  return absl::StrCat("\"", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t,
                                             absl::UTCTimeZone()),
                      "\"");
}

// Names from the code's enums are plain ASCII; only `reason` needs quoting.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(c),
                                               absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

absl::string_view FlightStateName(FlightRecorder::State state) {
  switch (state) {
    case FlightRecorder::State::kQueued: return "queued";
    case FlightRecorder::State::kCompleted: return "completed";
    case FlightRecorder::State::kFailed: return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(absl::bit_ceil(capacity)),  // bit_ceil(0) is 1.
      mask_(ring_.size() - 1) {}

uint64_t FlightRecorder::QueuedNanos(const CollectiveArgs& args, int size,
                                     int64_t now_ns) {
  const uint64_t count = PerRankCount(args, size);
  std::lock_guard<SpinLock> lock(mu_);
  const uint64_t token = next_++;
  // Written in place: the record's message string keeps its buffer.
  Record& r = ring_[token & mask_];
  r.sequence = args.sequence;
  r.kind = args.kind;
  r.dtype = args.send.count > 0 ? args.send.dtype : args.recv.dtype;
  r.count = count;
  r.root = IsRooted(args.kind) ? args.root : -1;
  r.algorithm = args.algorithm;
  r.state = State::kQueued;
  r.code = absl::StatusCode::kOk;
  if (!r.message.empty()) r.message.clear();
  r.queued_ns = now_ns;
  return token;
}

void FlightRecorder::DoneNanos(uint64_t token, const absl::Status& status,
                               int64_t now_ns) {
  // Outside the lock. An OK status needs no code() (out of line in
  // Debian's shared Abseil) and no string.
  const bool ok = status.ok();
  const absl::StatusCode code = ok ? absl::StatusCode::kOk : status.code();
  std::lock_guard<SpinLock> lock(mu_);
  if (token + ring_.size() < next_) return;  // Slot reused since.
  Record& r = ring_[token & mask_];
  r.state = ok ? State::kCompleted : State::kFailed;
  r.code = code;
  // Queued left the message empty.
  if (!ok) r.message = std::string(status.message().substr(0, 200));
  r.finished_ns = now_ns;
}

std::vector<FlightRecorder::Entry> FlightRecorder::Snapshot() const {
  std::vector<Entry> out;
  std::lock_guard<SpinLock> lock(mu_);
  const uint64_t held = std::min<uint64_t>(next_, ring_.size());
  out.reserve(held);
  for (uint64_t t = next_ - held; t < next_; ++t) {
    const Record& r = ring_[t & mask_];
    Entry e;
    e.sequence = r.sequence;
    e.kind = r.kind;
    e.dtype = r.dtype;
    e.count = r.count;
    e.root = r.root;
    e.algorithm = r.algorithm;
    e.state = r.state;
    e.code = r.code;
    e.message = r.message;
    e.queued = absl::FromUnixNanos(r.queued_ns);
    e.finished = r.state == State::kQueued ? absl::InfinitePast()
                                           : absl::FromUnixNanos(r.finished_ns);
    out.push_back(std::move(e));
  }
  return out;
}

std::string FlightRecorder::ToJson(int rank, int size,
                                   absl::string_view reason) const {
  std::vector<std::string> entries;
  for (const Entry& e : Snapshot()) {
    entries.push_back(absl::StrCat(
        "{\"sequence\": ", e.sequence, ", \"kind\": \"", CollectiveName(e.kind),
        "\", \"dtype\": \"", DataTypeName(e.dtype), "\", \"count\": ", e.count,
        ", \"root\": ", e.root, ", \"algorithm\": \"", AlgorithmName(e.algorithm),
        "\", \"state\": \"", FlightStateName(e.state), "\", \"code\": \"",
        absl::StatusCodeToString(e.code), "\", \"message\": ", Quote(e.message),
        ", \"queued\": ", Time(e.queued),
        ", \"finished\": ", Time(e.finished), "}"));
  }
  return absl::StrCat("{\"rank\": ", rank, ", \"size\": ", size,
                      ", \"dumped_at\": ", Time(FastNow()),
                      ", \"reason\": ", Quote(reason), ", \"entries\": [\n  ",
                      absl::StrJoin(entries, ",\n  "), "\n]}\n");
}

}  // namespace relay
