#include "runtime/flight_recorder.h"

#include <algorithm>

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


// An entry's outcome, from the status it completed with at `now`.
void SetOutcome(FlightRecorder::Entry& e, const absl::Status& status,
                absl::Time now) {
  e.state = status.ok() ? FlightRecorder::State::kCompleted
                        : FlightRecorder::State::kFailed;
  e.code = status.code();
  // Queued left the message empty; OK needs no string work.
  if (!status.ok()) e.message = std::string(status.message().substr(0, 200));
  e.finished = now;
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

namespace {

size_t PowerOfTwoAtLeast(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : ring_(PowerOfTwoAtLeast(capacity)), mask_(ring_.size() - 1) {}

uint64_t FlightRecorder::Queued(const CollectiveArgs& args, int size,
                                absl::Time now) {
  const uint64_t count = PerRankCount(args, size);
  std::lock_guard<SpinLock> lock(mu_);
  const uint64_t token = next_++;
  // Written in place: the entry's message string keeps its buffer.
  Entry& e = ring_[token & mask_];
  e.sequence = args.sequence;
  e.kind = args.kind;
  e.dtype = args.send.count > 0 ? args.send.dtype : args.recv.dtype;
  e.count = count;
  e.root = IsRooted(args.kind) ? args.root : -1;
  e.algorithm = args.algorithm;
  e.state = State::kQueued;
  e.code = absl::StatusCode::kOk;
  e.message.clear();
  e.queued = now;
  e.finished = absl::InfinitePast();
  return token;
}

void FlightRecorder::Done(uint64_t token, const absl::Status& status,
                          absl::Time now) {
  std::lock_guard<SpinLock> lock(mu_);
  if (token + ring_.size() < next_) return;  // Slot reused since.
  SetOutcome(ring_[token & mask_], status, now);
}

std::vector<FlightRecorder::Entry> FlightRecorder::Snapshot() const {
  std::vector<Entry> out;
  std::lock_guard<SpinLock> lock(mu_);
  const uint64_t held = std::min<uint64_t>(next_, ring_.size());
  out.reserve(held);
  for (uint64_t t = next_ - held; t < next_; ++t) {
    out.push_back(ring_[t & mask_]);
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
