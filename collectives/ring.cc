#include "collectives/ring.h"

#include <functional>

namespace relay {
namespace {

int Left(const ScheduleParams& p) { return (p.rank + p.size - 1) % p.size; }
int Right(const ScheduleParams& p) { return (p.rank + 1) % p.size; }
size_t Mod(long v, int n) { return static_cast<size_t>(((v % n) + n) % n); }

using RegionOf = std::function<Region(size_t block)>;

// The reduce-scatter phase for one lane: after it, `mid(rank)` holds the
// fully reduced block `rank`. Step s sends block rank-s-1 (the block received
// in step s-1, or the input at s == 0) and reduces block rank-s-2 into
// place, so a step never reduces into what it sends. `last` is where the
// final block goes (defaults to mid).
void AppendReduceScatter(const ScheduleParams& p, const RegionOf& input,
                         const std::function<Region(size_t, int)>& mid,
                         const Region& last, Lane& lane) {
  const int n = p.size, r = p.rank;
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_block = Mod(r - s - 1, n);
    const size_t recv_block = Mod(r - s - 2, n);
    Step step;
    step.actions.push_back(Action::Send(
        Right(p), s == 0 ? input(send_block) : mid(send_block, s - 1)));
    const Region dst = s == n - 2 ? last : mid(recv_block, s);
    step.actions.push_back(
        Action::RecvReduce(Left(p), input(recv_block), dst));
    lane.steps.push_back(std::move(step));
  }
}

// The all-gather phase: block `rank` is complete in out(rank); step s
// forwards block rank-s and receives block rank-s-1.
void AppendAllGather(const ScheduleParams& p, const RegionOf& out,
                     Lane& lane) {
  const int n = p.size, r = p.rank;
  for (int s = 0; s < n - 1; ++s) {
    Step step;
    step.actions.push_back(Action::Send(Right(p), out(Mod(r - s, n))));
    step.actions.push_back(Action::Recv(Left(p), out(Mod(r - s - 1, n))));
    lane.steps.push_back(std::move(step));
  }
}

Step LocalStep(Action a) {
  Step s;
  s.actions.push_back(a);
  return s;
}

}  // namespace

Schedule RingAllReduce(const ScheduleParams& p) {
  Schedule schedule;
  const BlockPartition segments{p.count, p.lanes};
  const BufferId in_buf = p.in_place ? BufferId::kRecv : BufferId::kSend;
  for (size_t l = 0; l < p.lanes; ++l) {
    const size_t seg_off = segments.offset(l);
    const BlockPartition blocks{segments.size(l), static_cast<size_t>(p.size)};
    auto region = [&](BufferId id) {
      return [id, seg_off, blocks](size_t b) {
        return Region{id, seg_off + blocks.offset(b), blocks.size(b)};
      };
    };
    const RegionOf input = region(in_buf), out = region(BufferId::kRecv);
    Lane lane;
    if (p.size == 1) {
      if (!p.in_place) lane.steps.push_back(LocalStep(Action::Copy(input(0), out(0))));
    } else {
      AppendReduceScatter(
          p, input, [&](size_t b, int) { return out(b); },
          out(static_cast<size_t>(p.rank)), lane);
    }
    if (p.average) {
      lane.steps.push_back(
          LocalStep(Action::Divide(out(static_cast<size_t>(p.rank)))));
    }
    AppendAllGather(p, out, lane);
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

Schedule RingReduceScatter(const ScheduleParams& p) {
  // Lane l carries part l of every block. Blocks in flight live in a
  // double-buffered scratch slot per lane: step s receives into slot s % 2
  // while sending from slot (s - 1) % 2.
  Schedule schedule;
  const BlockPartition parts{p.count, p.lanes};
  schedule.scratch_count = p.size > 2 ? 2 * p.count : 0;
  for (size_t l = 0; l < p.lanes; ++l) {
    const size_t lo = parts.offset(l), len = parts.size(l);
    const RegionOf input = [&, lo, len](size_t b) {
      return Region{BufferId::kSend, b * p.count + lo, len};
    };
    const Region out{BufferId::kRecv, lo, len};
    auto mid = [lo, len](size_t, int s) {
      return Region{BufferId::kScratch, 2 * lo + (s % 2) * len, len};
    };
    Lane lane;
    if (p.size == 1) {
      if (!p.in_place) lane.steps.push_back(LocalStep(Action::Copy(input(0), out)));
    } else {
      AppendReduceScatter(p, input, mid, out, lane);
    }
    if (p.average) lane.steps.push_back(LocalStep(Action::Divide(out)));
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

Schedule RingAllGather(const ScheduleParams& p) {
  Schedule schedule;
  const BlockPartition parts{p.count, p.lanes};
  for (size_t l = 0; l < p.lanes; ++l) {
    const size_t lo = parts.offset(l), len = parts.size(l);
    const RegionOf out = [&, lo, len](size_t b) {
      return Region{BufferId::kRecv, b * p.count + lo, len};
    };
    Lane lane;
    if (!p.in_place) {
      lane.steps.push_back(LocalStep(Action::Copy(
          Region{BufferId::kSend, lo, len}, out(static_cast<size_t>(p.rank)))));
    }
    AppendAllGather(p, out, lane);
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

}  // namespace relay
