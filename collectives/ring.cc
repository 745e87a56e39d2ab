#include "collectives/ring.h"

#include <functional>

namespace relay {
namespace {

size_t Mod(long v, int n) { return static_cast<size_t>(((v % n) + n) % n); }

// Which way data goes round the ring. `position` is this rank's place in
// the ring's order, which the block arithmetic below uses in place of the
// rank; it sends to `right` and receives from `left` (real ranks).
// Clockwise, the order is the ranks' own: rank r sends to r + 1.
// Counter-clockwise, rank r takes position n - 1 - r and sends to r - 1.
struct Direction {
  int n;
  int position;
  int right;
  int left;
};

Direction Clockwise(const ScheduleParams& p) {
  return {p.size, p.rank, (p.rank + 1) % p.size,
          (p.rank + p.size - 1) % p.size};
}

Direction CounterClockwise(const ScheduleParams& p) {
  return {p.size, p.size - 1 - p.rank, (p.rank + p.size - 1) % p.size,
          (p.rank + 1) % p.size};
}

using RegionOf = std::function<Region(size_t block)>;

// The reduce-scatter phase for one lane: after it, `mid(position)` holds
// the fully reduced block `position`. Step s sends block position-s-1 (the
// block received in step s-1, or the input at s == 0) and reduces block
// position-s-2 into place, so a step never reduces into what it sends.
// `last` is where the final block goes (defaults to mid).
void AppendReduceScatter(const Direction& d, const RegionOf& input,
                         const std::function<Region(size_t, int)>& mid,
                         const Region& last, Lane& lane) {
  const int n = d.n, r = d.position;
  for (int s = 0; s < n - 1; ++s) {
    const size_t send_block = Mod(r - s - 1, n);
    const size_t recv_block = Mod(r - s - 2, n);
    Step step;
    step.actions.push_back(Action::Send(
        d.right, s == 0 ? input(send_block) : mid(send_block, s - 1)));
    const Region dst = s == n - 2 ? last : mid(recv_block, s);
    step.actions.push_back(Action::RecvReduce(d.left, input(recv_block), dst));
    lane.steps.push_back(std::move(step));
  }
}

// The all-gather phase: block `position` is complete in out(position);
// step s forwards block position-s and receives block position-s-1.
void AppendAllGather(const Direction& d, const RegionOf& out, Lane& lane) {
  const int n = d.n, r = d.position;
  for (int s = 0; s < n - 1; ++s) {
    Step step;
    step.actions.push_back(Action::Send(d.right, out(Mod(r - s, n))));
    step.actions.push_back(Action::Recv(d.left, out(Mod(r - s - 1, n))));
    lane.steps.push_back(std::move(step));
  }
}

Step LocalStep(Action a) {
  Step s;
  s.actions.push_back(a);
  return s;
}

// One all_reduce ring over `len` elements at `offset`, going `d`'s way.
Lane AllReduceLane(const ScheduleParams& p, const Direction& d, size_t offset,
                   size_t len) {
  const BlockPartition blocks{len, static_cast<size_t>(p.size)};
  auto region = [&](BufferId id) {
    return [id, offset, blocks](size_t b) {
      return Region{id, offset + blocks.offset(b), blocks.size(b)};
    };
  };
  const BufferId in_buf = p.in_place ? BufferId::kRecv : BufferId::kSend;
  const RegionOf input = region(in_buf), out = region(BufferId::kRecv);
  const size_t mine = static_cast<size_t>(d.position);
  Lane lane;
  if (p.size == 1) {
    if (!p.in_place) lane.steps.push_back(LocalStep(Action::Copy(input(0), out(0))));
  } else {
    AppendReduceScatter(
        d, input, [&](size_t b, int) { return out(b); }, out(mine), lane);
  }
  if (p.average) lane.steps.push_back(LocalStep(Action::Divide(out(mine))));
  AppendAllGather(d, out, lane);
  return lane;
}

}  // namespace

Schedule RingAllReduce(const ScheduleParams& p) {
  Schedule schedule;
  const BlockPartition segments{p.count, p.lanes};
  // Both ways round only where they are different neighbours.
  const bool both_ways = p.bidirectional && p.size > 2;
  for (size_t l = 0; l < p.lanes; ++l) {
    if (!both_ways) {
      schedule.lanes.push_back(AllReduceLane(p, Clockwise(p),
                                             segments.offset(l),
                                             segments.size(l)));
      continue;
    }
    // The segment's first half goes clockwise, its second the other way;
    // step k of the lane is step k of both rings, so one batch sends to
    // both neighbours at once.
    const BlockPartition halves{segments.size(l), 2};
    Lane lane = AllReduceLane(p, Clockwise(p),
                              segments.offset(l) + halves.offset(0),
                              halves.size(0));
    const Lane other = AllReduceLane(p, CounterClockwise(p),
                                     segments.offset(l) + halves.offset(1),
                                     halves.size(1));
    for (size_t k = 0; k < lane.steps.size(); ++k) {
      for (const Action& a : other.steps[k].actions) {
        lane.steps[k].actions.push_back(a);
      }
    }
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
      AppendReduceScatter(Clockwise(p), input, mid, out, lane);
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
    AppendAllGather(Clockwise(p), out, lane);
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

}  // namespace relay
