#include "collectives/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace relay {
namespace {

const char* BufferName(BufferId id) {
  switch (id) {
    case BufferId::kSend: return "send";
    case BufferId::kRecv: return "recv";
    case BufferId::kScratch: return "scratch";
  }
  return "?";
}

std::string RegionString(const Region& r) {
  return absl::StrCat(BufferName(r.buffer), "[", r.offset, "+", r.count, "]");
}

const char* KindName(Action::Kind kind) {
  switch (kind) {
    case Action::Kind::kSend: return "send";
    case Action::Kind::kRecv: return "recv";
    case Action::Kind::kRecvReduce: return "recv_reduce";
    case Action::Kind::kCopy: return "copy";
    case Action::Kind::kReduce: return "reduce";
    case Action::Kind::kDivide: return "divide";
  }
  return "?";
}

}  // namespace

size_t Schedule::MaxSteps() const {
  size_t most = 0;
  for (const Lane& lane : lanes) most = std::max(most, lane.steps.size());
  return most;
}

std::string Schedule::DebugString() const {
  std::string out = absl::StrCat("scratch ", scratch_count, "\n");
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (size_t s = 0; s < lanes[l].steps.size(); ++s) {
      for (const Action& a : lanes[l].steps[s].actions) {
        absl::StrAppend(&out, "lane ", l, " step ", s, ": ", KindName(a.kind));
        if (a.peer >= 0) absl::StrAppend(&out, " peer ", a.peer);
        if (a.kind != Action::Kind::kRecv && a.kind != Action::Kind::kDivide) {
          absl::StrAppend(&out, " src ", RegionString(a.src));
        }
        if (a.kind != Action::Kind::kSend) {
          absl::StrAppend(&out, " dst ", RegionString(a.dst));
        }
        absl::StrAppend(&out, "\n");
      }
    }
  }
  return out;
}

}  // namespace relay
