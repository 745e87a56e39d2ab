#include "collectives/linear.h"

namespace relay {

Schedule LinearGather(const ScheduleParams& p) {
  const size_t c = p.count;
  Schedule schedule;
  Lane lane;
  Step step;
  if (p.rank != p.root) {
    step.actions.push_back(Action::Send(p.root, Region{BufferId::kSend, 0, c}));
  } else {
    for (int peer = 0; peer < p.size; ++peer) {
      const Region slot{BufferId::kRecv, static_cast<size_t>(peer) * c, c};
      if (peer != p.rank) {
        step.actions.push_back(Action::Recv(peer, slot));
      } else if (!p.in_place) {
        step.actions.push_back(
            Action::Copy(Region{BufferId::kSend, 0, c}, slot));
      }
    }
  }
  lane.steps.push_back(std::move(step));
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

Schedule LinearScatter(const ScheduleParams& p) {
  const size_t c = p.count;
  Schedule schedule;
  Lane lane;
  Step step;
  if (p.rank != p.root) {
    step.actions.push_back(Action::Recv(p.root, Region{BufferId::kRecv, 0, c}));
  } else {
    for (int peer = 0; peer < p.size; ++peer) {
      const Region slot{BufferId::kSend, static_cast<size_t>(peer) * c, c};
      if (peer != p.rank) {
        step.actions.push_back(Action::Send(peer, slot));
      } else if (!p.in_place) {
        step.actions.push_back(
            Action::Copy(slot, Region{BufferId::kRecv, 0, c}));
      }
    }
  }
  lane.steps.push_back(std::move(step));
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

Schedule PairwiseAllToAll(const ScheduleParams& p) {
  const size_t c = p.count;
  const int n = p.size, r = p.rank;
  auto block = [c](BufferId id, int b) {
    return Region{id, static_cast<size_t>(b) * c, c};
  };
  Schedule schedule;
  Lane lane;
  Step own;
  own.actions.push_back(
      Action::Copy(block(BufferId::kSend, r), block(BufferId::kRecv, r)));
  lane.steps.push_back(std::move(own));
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    Step step;
    step.actions.push_back(Action::Send(to, block(BufferId::kSend, to)));
    step.actions.push_back(Action::Recv(from, block(BufferId::kRecv, from)));
    lane.steps.push_back(std::move(step));
  }
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

Schedule DisseminationBarrier(const ScheduleParams& p) {
  const int n = p.size, r = p.rank;
  const Region empty{BufferId::kRecv, 0, 0};
  Schedule schedule;
  Lane lane;
  for (int dist = 1; dist < n; dist *= 2) {
    Step step;
    step.actions.push_back(Action::Send((r + dist) % n, empty));
    step.actions.push_back(Action::Recv((r - dist + n) % n, empty));
    lane.steps.push_back(std::move(step));
  }
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

}  // namespace relay
