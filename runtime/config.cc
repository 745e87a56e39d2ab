#include "runtime/config.h"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/status_macros.h"

namespace relay {
namespace {

using K = SettingKind;

constexpr double kBig = 9.2e18;  // About int64's largest: "no limit".

// One row per setting. Descriptions are one line each: the design notes
// under docs/design/ say why a default is what it is.
const Setting kSettings[] = {
    // Launch: which rank this is and where the job meets.
    {"RELAY_RANK", K::kCount, "unset", 0, 2147483647, "", "Launch",
     "This process's rank (relayrun sets it; torchrun's RANK, Open MPI's and "
     "Slurm's variables are read when it is unset)."},
    {"RELAY_WORLD_SIZE", K::kCount, "unset", 1, 2147483647, "", "Launch",
     "The job's number of ranks."},
    {"RELAY_LOCAL_RANK", K::kCount, "0", 0, 2147483647, "", "Launch",
     "This process's rank among those on its host (picks its GPU and core)."},
    {"RELAY_LOCAL_WORLD_SIZE", K::kCount, "unset", 1, 2147483647, "", "Launch",
     "Ranks on this host; when it equals the world size the store is at "
     "127.0.0.1."},
    {"RELAY_STORE_ADDR", K::kText, "127.0.0.1 on one host", 0, 0, "", "Launch",
     "Where rank 0 hosts the job's store (else MASTER_ADDR)."},
    {"RELAY_STORE_PORT", K::kCount, "29500", 1, 65535, "", "Launch",
     "The store's TCP port (else MASTER_PORT)."},
    {"RELAY_TOKEN", K::kText, "unset", 0, 0, "", "Launch",
     "The job's secret for the store's handshake. relayrun makes one; on one "
     "host without it rank 0 makes one only this user can read; across "
     "hosts it is required."},
    {"RELAY_ALLOW_OPEN_STORE", K::kSwitch, "0", 0, 0, "", "Launch",
     "1: run a job across hosts without RELAY_TOKEN (anyone who reaches the "
     "store can join it; warned once)."},
    {"RELAY_TRANSPORT", K::kText, "ucx for processes", 0, 0, "", "Launch",
     "The transport for ranks that are processes: ucx or nccl (loopback "
     "connects threads of one process)."},
    {"RELAY_METRICS_PORT", K::kCount, "unset", 1, 65535, "", "Launch",
     "Serve the communicator's metrics for Prometheus at PORT + local rank "
     "(CreateCommunicatorFromEnvironment); unset: no endpoint."},
    {"RELAY_METRICS_ADDR", K::kText, "127.0.0.1", 0, 0, "", "Launch",
     "The address the metrics endpoint binds (never every interface unless "
     "told)."},
    // Failure and diagnosis.
    {"RELAY_TIMEOUT", K::kSeconds, "600", 0.001, 1e9, "", "Failure",
     "The timeout of every operation that sets none, in seconds."},
    {"RELAY_PEER_TIMEOUT", K::kSeconds, "30", 0, 1e6, "", "Failure",
     "Seconds without a heartbeat after which a rank is declared lost; 0 "
     "turns heartbeats off; otherwise at least 1 (four heartbeat intervals)."},
    {"RELAY_CHECK_LEVEL", K::kChoice, "none", 0, 0, "none|fingerprint",
     "Failure",
     "fingerprint: compare every collective's kind, dtype, count, op and root "
     "across ranks through the store first (about 50 us a call); every rank "
     "must use the same level."},
    {"RELAY_FLIGHT_RECORDER_DIR", K::kText, "unset", 0, 0, "", "Failure",
     "A directory this process can write: each rank's flight record goes "
     "there when its communicator fails or is destroyed with work pending, "
     "and on SIGUSR1 (read them with tools/relay_analyze)."},
    // Algorithms.
    {"RELAY_ALGORITHM", K::kText, "unset", 0, 0, "", "Algorithms",
     "Force algorithms: all_reduce=ring,gather=linear, or one name for every "
     "collective it implements; every rank needs the same."},
    {"RELAY_SEGMENT_BYTES", K::kCount, "1048576, more on slow links", 1, kBig,
     "", "Algorithms",
     "Pipeline segment size of ring, broadcast and reduce, in bytes."},
    {"RELAY_PIPELINE_DEPTH", K::kCount, "2", 1, 65536, "", "Algorithms",
     "Pipeline segments in flight (on device buffers, lanes, each on its own "
     "CUDA stream)."},
    {"RELAY_RING_BIDIRECTIONAL", K::kSwitch, "1", 0, 0, "", "Algorithms",
     "Ring all_reduce on device buffers of more than 2 ranks sends half of "
     "each segment each way round."},
    {"RELAY_STREAM_REDUCE_BLOCKS", K::kCount, "32", 0, 2147483647, "",
     "Algorithms",
     "The most blocks a device reduction kernel launches beside the "
     "transport's kernels; 0: a full grid."},
    // Transports.
    {"RELAY_CUDA_IPC_ARENA_BYTES", K::kCount,
     "268435456 (256 MiB) on 2 ranks, 1073741824 (1 GiB) on more", 1048576,
     68719476736, "", "Transports",
     "Device memory each rank of a cuda_ipc communicator maps into every "
     "peer for relay's collective kernels (two halves, used in turn); a "
     "call larger than a quarter of it runs in pieces, and larger pieces "
     "run faster (on 4 H200s, 1 GiB took all_reduce from 0.88-0.92x to "
     "0.91-0.95x NCCL's busbw at 256 MB - 2 GB). Flags, low-latency words "
     "the point-to-point channels and 128-byte lines add 40 MiB more."},
    {"RELAY_CUDA_IPC_ONE_SHOT_BYTES", K::kCount,
     "8388608 (8 MiB) on 2 ranks, 4194304 (4 MiB) on more", 0, 68719476736, "",
     "Transports",
     "cuda_ipc all_reduce hands every rank every peer's whole contribution "
     "(one-shot) while (ranks - 1) x its bytes stay within this, and "
     "reduce-scatters then all-gathers (two-shot) above."},
    {"RELAY_CUDA_IPC_LOW_LATENCY_BYTES", K::kCount,
     "262144 (256 KiB) on 2 ranks, 65536 (64 KiB) on more", 0, 1048576, "",
     "Transports",
     "cuda_ipc all_reduces of up to this many bytes (one-shot), and "
     "all_gathers, all_to_alls and reduce_scatters whose chunk per rank is "
     "up to this, send their data as words that carry the call's epoch, "
     "which the receiver polls: twice the bytes, no flag barrier. 0 turns "
     "it off. The low-latency region (8 MiB) caps it at 8 MiB / (4 x "
     "ranks): 1 MiB on 2 ranks, 256 KiB on 8."},
    {"RELAY_CUDA_IPC_TWO_SHOT_WORDS_BYTES", K::kCount, "0", 0, 1048576, "", "Transports",
     "cuda_ipc all_reduces larger than the one-shot low-latency words take "
     "and of up to this many bytes reduce-scatter, then all-gather, on "
     "words: about 2 (ranks - 1) / ranks of the data a rank sends, doubled "
     "by the epochs, against ranks - 1 times it one-shot. Meant for 4 or "
     "more ranks (on 2 it sends as much, in two trips). Off (0) until "
     "measured on 4 and 8 GPUs; the low-latency region caps it at 1 MiB."},
    {"RELAY_CUDA_IPC_LINES_BYTES", K::kCount, "0", 0, 3932160, "", "Transports",
     "cuda_ipc one-shot all_reduces larger than the low-latency words take "
     "and of up to this many bytes send their data as 128-byte lines of 120 "
     "data bytes and the call's epoch, which the receiver polls: no flag "
     "barrier. Off (0) until measured over NVLink; the line region (16 MiB) "
     "caps it at 8 MiB / ranks x 15/16 (3.75 MiB on 2 ranks)."},
    {"RELAY_CUDA_IPC_LAUNCH", K::kChoice, "graph", 0, 0, "graph|kernel", "Transports",
     "How cuda_ipc queues its kernels outside a stream being captured, for "
     "calls below RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES (larger ones launch): "
     "graph relaunches a one-node CUDA graph per kernel with the call's "
     "parameters (2.8 us of host time a call on an H200 host, 1.9 us when "
     "they repeat the last call's, against 4.2-4.4 us for kernel, a plain "
     "launch)."},
    {"RELAY_CUDA_IPC_GRAPH_LAUNCH_BYTES", K::kCount, "262144", 0, 68719476736, "",
     "Transports",
     "cuda_ipc calls that move fewer bytes than this (a rank's larger "
     "buffer) queue their kernels as RELAY_CUDA_IPC_LAUNCH says; calls of "
     "this many and more launch them as programmatic dependents of the call "
     "before, which overlap its end on the GPU but cost the host more (on 2 "
     "H200s, eager all_reduce: graph relaunches took 0.74-0.95x the time "
     "of dependents at 8 - 128 KB, dependents 0.91-0.97x at 256 KB - 8 MB). "
     "0: always launch."},
    {"RELAY_CUDA_IPC_SHARED_GPU", K::kSwitch, "0", 0, 0, "", "Transports",
     "1 lets ranks of a cuda_ipc communicator that are processes share a "
     "GPU, to check the transport where fewer GPUs than ranks are lent: "
     "for tests, not for speed (the processes' kernels take turns on the "
     "GPU). Threads of one process never share one: a call that waits for "
     "the whole device, such as cudaFree, would wait for a peer's kernel "
     "waiting for it. 0: each rank needs a GPU of its own."},
    {"RELAY_NCCL_P2P_CHANNELS", K::kCount, "64", 0, 1024, "", "Transports",
     "Channels of the NCCL transport's point-to-point communicator; 0: "
     "point-to-point on the collectives' communicator."},
    {"RELAY_UCX_PROGRESS_THREAD", K::kSwitch, "1", 0, 0, "", "Transports",
     "The UCX progress thread that moves transfers while callers compute "
     "(it stands aside while a caller polls)."},
    {"RELAY_UCX_WAIT", K::kChoice, "auto", 0, 0, "auto|poll|block",
     "Transports",
     "How UCX waiters wait: poll, block on the worker's event fd, or auto "
     "(poll where each rank has a core, else block)."},
    {"RELAY_UCX_ERROR_MODE", K::kChoice, "none", 0, 0, "none|peer",
     "Transports",
     "peer: UCX peer-failure handling, which names a lost rank at once but "
     "which UCX 1.13's shared-memory transports lack (ranks fall back to "
     "TCP)."},
};

absl::Status WrongKind(const char* name) {
  return absl::InternalError(absl::StrCat(
      name, " is not in relay's configuration table as read here "
            "(runtime/config.cc)"));
}

// The table's row for `name` if it is of `kind`; else null.
const Setting* Row(const char* name, SettingKind kind) {
  const Setting* s = FindSetting(name);
  return s != nullptr && s->kind == kind ? s : nullptr;
}

std::string Range(const Setting& s) {
  switch (s.kind) {
    case K::kSwitch:
      return "0 or 1";
    case K::kChoice:
      return absl::StrJoin(absl::StrSplit(s.choices, '|'), ", ");
    case K::kCount:
      return s.max >= kBig
                 ? absl::StrCat(">= ", static_cast<uint64_t>(s.min))
                 : absl::StrCat(static_cast<uint64_t>(s.min), " to ",
                                static_cast<uint64_t>(s.max));
    case K::kSeconds:
      return absl::StrCat(s.min, " to ", s.max, " s");
    case K::kText:
      return "text";
  }
  return "";
}

}  // namespace

absl::Span<const Setting> Settings() { return kSettings; }

const Setting* FindSetting(absl::string_view name) {
  for (const Setting& s : kSettings) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::optional<std::string> GetEnv(const char* name) {
  // The library's one read of the environment (tools/check_tree.sh).
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

namespace {

// A setting's row and value: Internal where the table has no `name` of
// `kind`; `*value` nullopt where the variable is unset or empty (the
// caller's default).
absl::Status Lookup(const char* name, SettingKind kind, const Setting** row,
                    std::optional<std::string>* value) {
  *row = Row(name, kind);
  if (*row == nullptr) return WrongKind(name);
  *value = GetEnv(name);
  if (value->has_value() && (*value)->empty()) value->reset();
  return absl::OkStatus();
}

// InvalidArgument for `value` of setting `s`: "NAME='value': expected ...".
absl::Status Malformed(const Setting& s, const std::string& value,
                       absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat(
      s.name, "='", value, "': expected ", expected, " (", s.description,
      ")"));
}

}  // namespace

absl::StatusOr<bool> ReadSwitch(const char* name, bool default_value) {
  const Setting* s;
  std::optional<std::string> value;
  RELAY_RETURN_IF_ERROR(Lookup(name, K::kSwitch, &s, &value));
  if (!value.has_value()) return default_value;
  if (*value == "1") return true;
  if (*value == "0") return false;
  return Malformed(*s, *value,
                   absl::StrCat("1 or 0; unset, ", default_value ? 1 : 0));
}

absl::StatusOr<uint64_t> ReadCount(const char* name, uint64_t default_value) {
  const Setting* s;
  std::optional<std::string> value;
  RELAY_RETURN_IF_ERROR(Lookup(name, K::kCount, &s, &value));
  if (!value.has_value()) return default_value;
  // Digits only: SimpleAtoi alone takes a sign and surrounding spaces.
  bool digits = true;
  for (char c : *value) {
    digits &= absl::ascii_isdigit(static_cast<unsigned char>(c));
  }
  uint64_t parsed = 0;
  if (!digits || !absl::SimpleAtoi(*value, &parsed) ||
      static_cast<double>(parsed) < s->min ||
      static_cast<double>(parsed) > s->max) {
    return Malformed(*s, *value, absl::StrCat("a whole number ", Range(*s)));
  }
  return parsed;
}

absl::StatusOr<absl::Duration> ReadSeconds(const char* name,
                                           absl::Duration default_value) {
  const Setting* s;
  std::optional<std::string> value;
  RELAY_RETURN_IF_ERROR(Lookup(name, K::kSeconds, &s, &value));
  if (!value.has_value()) return default_value;
  double seconds = 0;
  if (!absl::SimpleAtod(*value, &seconds) || !std::isfinite(seconds) ||
      seconds < s->min || seconds > s->max) {
    return Malformed(*s, *value, absl::StrCat("seconds, ", Range(*s)));
  }
  return absl::Seconds(seconds);
}

absl::StatusOr<std::string> ReadChoice(const char* name,
                                       absl::string_view default_value) {
  const Setting* s;
  std::optional<std::string> value;
  RELAY_RETURN_IF_ERROR(Lookup(name, K::kChoice, &s, &value));
  if (!value.has_value()) return std::string(default_value);
  for (absl::string_view choice : absl::StrSplit(s->choices, '|')) {
    if (*value == choice) return *value;
  }
  return Malformed(*s, *value, absl::StrCat("one of ", Range(*s)));
}

absl::StatusOr<std::optional<std::string>> ReadText(const char* name) {
  if (Row(name, K::kText) == nullptr) return WrongKind(name);
  return GetEnv(name);
}

std::string ConfigurationMarkdown() {
  std::string out =
      "# Configuration\n\n"
      "<!-- Generated from runtime/config.cc by `bazel run "
      "//tools:configuration_doc > docs/configuration.md`; "
      "//tools:configuration_doc_test fails when this file is stale. -->\n\n"
      "relay reads these environment variables, and no others of its own. "
      "Unset or empty means the default. A malformed value, or one out of "
      "range, is InvalidArgument naming the variable, at the first call or "
      "connect that reads it: a typo never silently leaves the default in "
      "place. The same settings exist as fields of `CommunicatorOptions` and "
      "`CollectiveOptions` where a program sets them itself.\n";
  std::string group;
  for (const Setting& s : kSettings) {
    if (group != s.group) {
      group = s.group;
      absl::StrAppend(&out, "\n## ", group,
                      "\n\n| variable | values | default | meaning |\n"
                      "|---|---|---|---|\n");
    }
    absl::StrAppend(&out, "| `", s.name, "` | ", Range(s), " | ",
                    s.default_text, " | ", s.description, " |\n");
  }
  return out;
}

}  // namespace relay
