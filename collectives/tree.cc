#include "collectives/tree.h"

#include <algorithm>
#include <vector>

namespace relay {
namespace {

struct Tree {
  int n, root, v;  // v: this rank relative to the root.
  Tree(const ScheduleParams& p)
      : n(p.size), root(p.root), v((p.rank - p.root + p.size) % p.size) {}
  int Real(int vrank) const { return (vrank + root) % n; }
  // The lowest set bit of v (n rounded up to a power of two for the root):
  // v's children are v + m for m below it.
  int Span() const {
    int m = 1;
    while (m < n && (v & m) == 0) m *= 2;
    return m;
  }
  bool HasParent() const { return v != 0; }
  int Parent() const { return Real(v - Span()); }
  // Children's relative ranks, nearest first.
  std::vector<int> Children() const {
    std::vector<int> out;
    for (int m = 1; m < Span(); m *= 2) {
      if (v + m < n) out.push_back(v + m);
    }
    return out;
  }
  // Ranks in the subtree rooted at relative rank `u`.
  int SubtreeSize(int u) const {
    int m = 1;
    while (m < n && (u & m) == 0) m *= 2;
    return std::min(m, n - u);
  }
};

Step OneAction(Action a) {
  Step s;
  s.actions.push_back(a);
  return s;
}

}  // namespace

Schedule BinomialBroadcast(const ScheduleParams& p) {
  const Tree tree(p);
  const BlockPartition segments{p.count, p.lanes};
  Schedule schedule;
  for (size_t l = 0; l < p.lanes; ++l) {
    const Region out{BufferId::kRecv, segments.offset(l), segments.size(l)};
    const Region in{p.in_place ? BufferId::kRecv : BufferId::kSend,
                    segments.offset(l), segments.size(l)};
    Lane lane;
    if (tree.HasParent()) {
      lane.steps.push_back(OneAction(Action::Recv(tree.Parent(), out)));
    }
    // The root sends straight from its input; farthest child first, since
    // its subtree is the largest.
    const Region source = tree.HasParent() ? out : in;
    std::vector<int> children = tree.Children();
    Step sends;
    for (auto it = children.rbegin(); it != children.rend(); ++it) {
      sends.actions.push_back(Action::Send(tree.Real(*it), source));
    }
    if (!tree.HasParent() && !p.in_place) {
      sends.actions.push_back(Action::Copy(in, out));
    }
    if (!sends.actions.empty()) lane.steps.push_back(std::move(sends));
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

Schedule BinomialReduce(const ScheduleParams& p) {
  const Tree tree(p);
  const BlockPartition segments{p.count, p.lanes};
  const std::vector<int> children = tree.Children();
  Schedule schedule;
  // Non-roots with children accumulate in scratch; the root in its output.
  if (tree.HasParent() && !children.empty()) schedule.scratch_count = p.count;
  for (size_t l = 0; l < p.lanes; ++l) {
    const size_t off = segments.offset(l), len = segments.size(l);
    const Region in{p.in_place && !tree.HasParent() ? BufferId::kRecv
                                                     : BufferId::kSend,
                    off, len};
    const Region acc{tree.HasParent() ? BufferId::kScratch : BufferId::kRecv,
                     off, len};
    Lane lane;
    bool first = true;
    for (int child : children) {
      lane.steps.push_back(OneAction(
          Action::RecvReduce(tree.Real(child), first ? in : acc, acc)));
      first = false;
    }
    if (tree.HasParent()) {
      lane.steps.push_back(
          OneAction(Action::Send(tree.Parent(), children.empty() ? in : acc)));
    } else {
      if (children.empty() && !p.in_place) {
        lane.steps.push_back(OneAction(Action::Copy(in, acc)));
      }
      if (p.average) lane.steps.push_back(OneAction(Action::Divide(acc)));
    }
    schedule.lanes.push_back(std::move(lane));
  }
  return schedule;
}

Schedule BinomialGather(const ScheduleParams& p) {
  // Blocks travel in relative order: scratch slot k holds relative rank
  // v + k. The root then rotates them into rank order.
  const Tree tree(p);
  const size_t c = p.count;
  const size_t mine = static_cast<size_t>(tree.SubtreeSize(tree.v));
  Schedule schedule;
  schedule.scratch_count = mine * c;
  Lane lane;
  const Region own_input{p.in_place ? BufferId::kRecv : BufferId::kSend,
                         p.in_place ? static_cast<size_t>(p.rank) * c : 0, c};
  lane.steps.push_back(
      OneAction(Action::Copy(own_input, Region{BufferId::kScratch, 0, c})));
  for (int child : tree.Children()) {
    const size_t k = static_cast<size_t>(child - tree.v);
    const size_t blocks = static_cast<size_t>(tree.SubtreeSize(child));
    lane.steps.push_back(OneAction(Action::Recv(
        tree.Real(child), Region{BufferId::kScratch, k * c, blocks * c})));
  }
  if (tree.HasParent()) {
    lane.steps.push_back(OneAction(Action::Send(
        tree.Parent(), Region{BufferId::kScratch, 0, mine * c})));
  } else {
    // Relative 0..n-root-1 are ranks root..n-1; the rest wrap to 0..root-1.
    const size_t n = static_cast<size_t>(p.size), root = p.root;
    Step rotate;
    rotate.actions.push_back(
        Action::Copy(Region{BufferId::kScratch, 0, (n - root) * c},
                     Region{BufferId::kRecv, root * c, (n - root) * c}));
    if (root > 0) {
      rotate.actions.push_back(
          Action::Copy(Region{BufferId::kScratch, (n - root) * c, root * c},
                       Region{BufferId::kRecv, 0, root * c}));
    }
    lane.steps.push_back(std::move(rotate));
  }
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

Schedule BinomialScatter(const ScheduleParams& p) {
  const Tree tree(p);
  const size_t c = p.count;
  const size_t mine = static_cast<size_t>(tree.SubtreeSize(tree.v));
  const Region out{BufferId::kRecv, 0, c};
  Schedule schedule;
  Lane lane;
  // Leaves receive straight into their output; inner ranks stage their
  // subtree's blocks in relative order in scratch.
  if (mine == 1 && tree.HasParent()) {
    lane.steps.push_back(OneAction(Action::Recv(tree.Parent(), out)));
    schedule.lanes.push_back(std::move(lane));
    return schedule;
  }
  schedule.scratch_count = mine * c;
  if (tree.HasParent()) {
    lane.steps.push_back(OneAction(Action::Recv(
        tree.Parent(), Region{BufferId::kScratch, 0, mine * c})));
  } else {
    const size_t n = static_cast<size_t>(p.size), root = p.root;
    Step rotate;
    rotate.actions.push_back(
        Action::Copy(Region{BufferId::kSend, root * c, (n - root) * c},
                     Region{BufferId::kScratch, 0, (n - root) * c}));
    if (root > 0) {
      rotate.actions.push_back(
          Action::Copy(Region{BufferId::kSend, 0, root * c},
                       Region{BufferId::kScratch, (n - root) * c, root * c}));
    }
    lane.steps.push_back(std::move(rotate));
  }
  // Farthest child first: it heads the largest subtree.
  const std::vector<int> children = tree.Children();
  Step sends;
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    const size_t k = static_cast<size_t>(*it - tree.v);
    const size_t blocks = static_cast<size_t>(tree.SubtreeSize(*it));
    sends.actions.push_back(Action::Send(
        tree.Real(*it), Region{BufferId::kScratch, k * c, blocks * c}));
  }
  const bool root_in_place = !tree.HasParent() && p.in_place;
  if (!root_in_place) {
    sends.actions.push_back(
        Action::Copy(Region{BufferId::kScratch, 0, c}, out));
  }
  lane.steps.push_back(std::move(sends));
  schedule.lanes.push_back(std::move(lane));
  return schedule;
}

}  // namespace relay
