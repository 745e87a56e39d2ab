#include "collectives/recursive.h"

#include <functional>

namespace relay {
namespace {

// The power-of-two fold shared by both algorithms.
struct Fold {
  int p;    // Largest power of two <= size.
  int rem;  // size - p: ranks below 2 * rem pair up.
  explicit Fold(int size) : p(1), rem(0) {
    while (p * 2 <= size) p *= 2;
    rem = size - p;
  }
  // An even rank below 2 * rem sits out the middle phase.
  bool SitsOut(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  int Virtual(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  int Real(int vrank) const { return vrank < rem ? 2 * vrank + 1 : vrank + rem; }
};

Step OneAction(Action a) {
  Step s;
  s.actions.push_back(a);
  return s;
}

// What the power-of-two phase of one lane works on: `count` elements at
// element `offset` of the recv buffer (and of scratch).
struct Segment {
  size_t offset;
  size_t count;
};

// Builds one lane per pipeline segment: copy-in, fold, `middle` (for ranks
// that take part), unfold. `middle` appends the power-of-two algorithm's
// steps for one segment, averaging included.
Schedule WithFold(const ScheduleParams& p,
                  const std::function<void(int vrank, const Fold&,
                                           const Segment&, Lane&)>& middle) {
  const Fold fold(p.size);
  const BlockPartition segments{p.count, p.lanes};
  Schedule schedule;
  for (size_t l = 0; l < p.lanes; ++l) {
    const Segment seg{segments.offset(l), segments.size(l)};
    const Region all{BufferId::kRecv, seg.offset, seg.count};
    Lane lane;
    if (!p.in_place) {
      lane.steps.push_back(OneAction(Action::Copy(
          Region{BufferId::kSend, seg.offset, seg.count}, all)));
    }
    if (fold.SitsOut(p.rank)) {
      lane.steps.push_back(OneAction(Action::Send(p.rank + 1, all)));
      lane.steps.push_back(OneAction(Action::Recv(p.rank + 1, all)));
    } else {
      if (p.rank < 2 * fold.rem) {
        lane.steps.push_back(
            OneAction(Action::RecvReduce(p.rank - 1, all, all)));
      }
      middle(fold.Virtual(p.rank), fold, seg, lane);
      if (p.rank < 2 * fold.rem) {
        lane.steps.push_back(OneAction(Action::Send(p.rank - 1, all)));
      }
    }
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

}  // namespace

Schedule RecursiveDoublingAllReduce(const ScheduleParams& p) {
  Schedule schedule = WithFold(
      p, [&](int vrank, const Fold& fold, const Segment& seg, Lane& lane) {
        const Region all{BufferId::kRecv, seg.offset, seg.count};
        const Region incoming{BufferId::kScratch, seg.offset, seg.count};
        for (int mask = 1; mask < fold.p; mask *= 2) {
          // Both partners send the whole vector, so the incoming copy lands
          // in scratch and is reduced after the exchange.
          const int partner = fold.Real(vrank ^ mask);
          Step step;
          step.actions.push_back(Action::Send(partner, all));
          step.actions.push_back(Action::Recv(partner, incoming));
          step.actions.push_back(Action::Reduce(incoming, all));
          lane.steps.push_back(std::move(step));
        }
        if (p.average) lane.steps.push_back(OneAction(Action::Divide(all)));
      });
  if (Fold(p.size).p > 1) schedule.scratch_count = p.count;
  return schedule;
}

Schedule RabenseifnerAllReduce(const ScheduleParams& p) {
  return WithFold(
      p, [&](int vrank, const Fold& fold, const Segment& seg, Lane& lane) {
        struct Level {
          int partner;
          Region keep, give;
        };
        std::vector<Level> levels;
        size_t lo = seg.offset, hi = seg.offset + seg.count;
        // Recursive halving: keep one half, hand the other to the partner,
        // reduce the partner's copy of the kept half into place.
        for (int mask = fold.p / 2; mask >= 1; mask /= 2) {
          const size_t mid = lo + (hi - lo) / 2;
          const bool lower = (vrank & mask) == 0;
          const Region first{BufferId::kRecv, lo, mid - lo};
          const Region second{BufferId::kRecv, mid, hi - mid};
          const Level level{fold.Real(vrank ^ mask), lower ? first : second,
                            lower ? second : first};
          Step step;
          step.actions.push_back(Action::Send(level.partner, level.give));
          step.actions.push_back(
              Action::RecvReduce(level.partner, level.keep, level.keep));
          lane.steps.push_back(std::move(step));
          levels.push_back(level);
          if (lower) hi = mid; else lo = mid;
        }
        // This rank's part is complete: average it before sharing it.
        if (p.average) {
          lane.steps.push_back(OneAction(
              Action::Divide(Region{BufferId::kRecv, lo, hi - lo})));
        }
        // Recursive doubling in reverse: swap completed halves back.
        for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
          Step step;
          step.actions.push_back(Action::Send(it->partner, it->keep));
          step.actions.push_back(Action::Recv(it->partner, it->give));
          lane.steps.push_back(std::move(step));
        }
      });
}

}  // namespace relay
