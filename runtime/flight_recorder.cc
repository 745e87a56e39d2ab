#include "runtime/flight_recorder.h"

#include <algorithm>
#include <thread>

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
      mask_(ring_.size() - 1),
      messages_(ring_.size()) {}

uint64_t FlightRecorder::QueuedNanos(const CollectiveArgs& args, int size,
                                     int64_t now_ns) {
  constexpr auto kRelease = std::memory_order_release;
  const uint64_t token = args.sequence;
  Record& r = RecordOf(token);
  const uint64_t version = EvenVersion(r);
  r.version.store(version + 1, std::memory_order_relaxed);
  r.sequence_plus_one.store(token + 1, kRelease);
  r.count.store(PerRankCount(args, size), kRelease);
  r.queued_ns.store(now_ns, kRelease);
  r.root.store(IsRooted(args.kind) ? args.root : -1, kRelease);
  r.code.store(static_cast<int32_t>(absl::StatusCode::kOk), kRelease);
  r.kind.store(static_cast<uint8_t>(args.kind), kRelease);
  r.dtype.store(static_cast<uint8_t>(args.send.count > 0 ? args.send.dtype
                                                          : args.recv.dtype),
                kRelease);
  r.algorithm.store(static_cast<uint8_t>(args.algorithm), kRelease);
  r.state.store(static_cast<uint8_t>(State::kQueued), kRelease);
  r.version.store(version + 2, kRelease);
  return token;
}

void FlightRecorder::DoneNanos(uint64_t token, const absl::Status& status,
                               int64_t now_ns) {
  constexpr auto kRelease = std::memory_order_release;
  Record& r = RecordOf(token);
  // Slot reused since (a later collective, capacity calls on).
  if (r.sequence_plus_one.load(std::memory_order_acquire) != token + 1) return;
  // An OK status needs no code() (out of line in Debian's shared Abseil)
  // and no string.
  const bool ok = status.ok();
  if (!ok) {
    std::lock_guard<SpinLock> lock(messages_mu_);
    Message& m = messages_[token & mask_];
    m.sequence = token;
    m.text = std::string(status.message().substr(0, 200));
  }
  const uint64_t version = EvenVersion(r);
  r.version.store(version + 1, std::memory_order_relaxed);
  r.code.store(static_cast<int32_t>(ok ? absl::StatusCode::kOk : status.code()),
               kRelease);
  r.finished_ns.store(now_ns, kRelease);
  r.state.store(static_cast<uint8_t>(ok ? State::kCompleted : State::kFailed),
                kRelease);
  r.version.store(version + 2, kRelease);
}

std::optional<FlightRecorder::Entry> FlightRecorder::OldestQueued() const {
  for (Entry& e : Snapshot()) {
    if (e.state == State::kQueued) return std::move(e);
  }
  return std::nullopt;
}

std::vector<FlightRecorder::Entry> FlightRecorder::Snapshot() const {
  constexpr auto kAcquire = std::memory_order_acquire;
  std::vector<Entry> out;
  out.reserve(ring_.size());
  // Held for the whole scan: a failure's Done writes its message under it
  // before the record's state, so a record seen failed has its message in
  // place, and no later failure in the same slot replaces it meanwhile.
  std::lock_guard<SpinLock> lock(messages_mu_);
  for (const Record& r : ring_) {
    Entry e;
    uint64_t sequence_plus_one = 0;
    int64_t queued_ns = 0, finished_ns = 0;
    // A writer in the middle of this record: read again (it is a few
    // stores from done, unless preempted: then give it the core).
    for (int tries = 1;; ++tries) {
      if (tries % 64 == 0) std::this_thread::yield();
      const uint64_t before = r.version.load(kAcquire);
      if (before % 2 == 1) continue;
      sequence_plus_one = r.sequence_plus_one.load(kAcquire);
      e.count = r.count.load(kAcquire);
      queued_ns = r.queued_ns.load(kAcquire);
      finished_ns = r.finished_ns.load(kAcquire);
      e.root = r.root.load(kAcquire);
      e.code = static_cast<absl::StatusCode>(r.code.load(kAcquire));
      e.kind = static_cast<CollectiveKind>(r.kind.load(kAcquire));
      e.dtype = static_cast<DataType>(r.dtype.load(kAcquire));
      e.algorithm = static_cast<Algorithm>(r.algorithm.load(kAcquire));
      e.state = static_cast<State>(r.state.load(kAcquire));
      if (r.version.load(std::memory_order_relaxed) == before) break;
    }
    if (sequence_plus_one == 0) continue;  // Never written.
    e.sequence = sequence_plus_one - 1;
    e.queued = absl::FromUnixNanos(queued_ns);
    e.finished = e.state == State::kQueued ? absl::InfinitePast()
                                           : absl::FromUnixNanos(finished_ns);
    const Message& m = messages_[e.sequence & mask_];
    if (e.state == State::kFailed && m.sequence == e.sequence) {
      e.message = m.text;
    }
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.sequence < b.sequence;
  });
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
