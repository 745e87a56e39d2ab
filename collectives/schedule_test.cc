// Tests for the schedule builders (ring.h, recursive.h, tree.h, linear.h) as
// dispatched by BuildSchedule (engine.h).
//
// The core is a pure, single-threaded simulator that runs the schedules of
// every rank of a group together, without any transport. Each rank has one
// backing array of doubles that its send and recv buffers map into (so the
// in-place forms of runtime/collective.h alias exactly as they do for real),
// plus its scratch array. Messages match per (src, dst, lane) in FIFO order,
// as the executor's one tag per lane guarantees. The model is rendezvous: a
// send completes only once the destination has posted the matching receive,
// so a schedule that only works with eager (buffered) sends deadlocks here.
// Before running, every schedule is checked statically: regions inside their
// buffers, nothing written into the (const) send buffer, the RecvReduce
// hazard rule of schedule.h, and independent lanes.
#include "collectives/schedule.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/engine.h"
#include "collectives/selection.h"
#include "gtest/gtest.h"
#include "runtime/collective.h"

namespace relay {
namespace {

// ---------------------------------------------------------------------------
// Test cases and the buffer conventions of runtime/collective.h.

enum class Op { kSum, kMax, kAvg };

const char* OpName(Op op) {
  switch (op) {
    case Op::kSum: return "sum";
    case Op::kMax: return "max";
    case Op::kAvg: return "avg";
  }
  return "?";
}

struct Case {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  int size = 1;
  size_t count = 0;
  int root = 0;
  bool in_place = false;
  size_t lanes = 1;
  bool bidirectional = false;
  Op op = Op::kSum;
  uint32_t seed = 0;  // Picks the simulator's (arbitrary) interleaving.

  std::string Name() const {
    return absl::StrCat(CollectiveName(kind), "/", AlgorithmName(algorithm),
                        " size=", size, " count=", count, " root=", root,
                        in_place ? " in_place" : "", " lanes=", lanes,
                        bidirectional ? " bidirectional" : "",
                        IsReduction(kind) ? absl::StrCat(" op=", OpName(op))
                                          : "");
  }
};

bool HasInPlaceForm(CollectiveKind kind) {
  return kind != CollectiveKind::kAllToAll && kind != CollectiveKind::kBarrier;
}

// Whether `rank`'s call is in place. For the rooted collectives only the
// root's buffers can alias (ScheduleEngine decides the same way from the
// pointers).
bool RankInPlace(const Case& c, int rank) {
  return c.in_place && HasInPlaceForm(c.kind) &&
         (!IsRooted(c.kind) || rank == c.root);
}

// Where one rank's send and recv buffers lie in its backing array.
struct Layout {
  size_t send_size = 0, recv_size = 0;  // Elements, per the conventions.
  size_t send_base = 0, recv_base = 0;  // Offsets into the backing array.
  size_t backing = 0;
};

Layout LayoutFor(const Case& c, int rank) {
  const size_t n = static_cast<size_t>(c.size), k = c.count;
  const size_t r = static_cast<size_t>(rank);
  const bool root = rank == c.root;
  Layout l;
  switch (c.kind) {
    case CollectiveKind::kBroadcast:
      l.send_size = root ? k : 0, l.recv_size = k;
      break;
    case CollectiveKind::kReduce:
      l.send_size = k, l.recv_size = root ? k : 0;
      break;
    case CollectiveKind::kAllReduce:
      l.send_size = k, l.recv_size = k;
      break;
    case CollectiveKind::kAllGather:
      l.send_size = k, l.recv_size = k * n;
      break;
    case CollectiveKind::kReduceScatter:
      l.send_size = k * n, l.recv_size = k;
      break;
    case CollectiveKind::kGather:
      l.send_size = k, l.recv_size = root ? k * n : 0;
      break;
    case CollectiveKind::kScatter:
      l.send_size = root ? k * n : 0, l.recv_size = k;
      break;
    case CollectiveKind::kAllToAll:
      l.send_size = k * n, l.recv_size = k * n;
      break;
    case CollectiveKind::kBarrier:
      break;
  }
  if (!RankInPlace(c, rank)) {
    l.send_base = 0;
    l.recv_base = l.send_size;
    l.backing = l.send_size + l.recv_size;
    return l;
  }
  switch (c.kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:  // send == recv + rank * count
      l.recv_base = 0, l.send_base = r * k, l.backing = l.recv_size;
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter:  // recv == send + rank * count
      l.send_base = 0, l.recv_base = r * k, l.backing = l.send_size;
      break;
    default:  // send == recv
      l.send_base = 0, l.recv_base = 0, l.backing = k;
      break;
  }
  return l;
}

// Exact small integers (sums over 32 ranks stay far below 2^53). Positive,
// so a lost or doubled contribution always changes a sum; the middle term
// makes the rank holding the maximum vary with the index; the last term
// makes every index distinct.
double Input(int rank, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  return static_cast<double>(1 + r + 64 * ((5 * r + 3 * i + 7) % 31) +
                             2048 * i);
}
// What a buffer holds before the call where it is not input.
double Garbage(int rank, size_t j) {
  return -1.0 - static_cast<double>(j) - 1e6 * rank;
}
double ScratchGarbage(size_t j) { return -5e8 - static_cast<double>(j); }

double Apply(Op op, double a, double b) {
  return op == Op::kMax ? std::max(a, b) : a + b;
}

// The reference: the reduction over all ranks of Input(·, i).
double Reduced(const Case& c, size_t i) {
  double acc = Input(0, i);
  for (int r = 1; r < c.size; ++r) acc = Apply(c.op, acc, Input(r, i));
  return c.op == Op::kAvg ? acc / c.size : acc;
}

// The expected recv buffer of `rank` (empty where it has none).
std::vector<double> Expected(const Case& c, int rank) {
  const size_t k = c.count, r = static_cast<size_t>(rank);
  const Layout l = LayoutFor(c, rank);
  std::vector<double> out(l.recv_size);
  for (size_t j = 0; j < out.size(); ++j) {
    switch (c.kind) {
      case CollectiveKind::kBroadcast:
        out[j] = Input(c.root, j);
        break;
      case CollectiveKind::kReduce:
      case CollectiveKind::kAllReduce:
        out[j] = Reduced(c, j);
        break;
      case CollectiveKind::kReduceScatter:
        out[j] = Reduced(c, r * k + j);
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
        out[j] = Input(static_cast<int>(j / k), j % k);
        break;
      case CollectiveKind::kScatter:
        out[j] = Input(c.root, r * k + j);
        break;
      case CollectiveKind::kAllToAll:
        out[j] = Input(static_cast<int>(j / k), r * k + j % k);
        break;
      case CollectiveKind::kBarrier:
        break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// The simulator.

const char* BufferName(BufferId id) {
  switch (id) {
    case BufferId::kSend: return "send";
    case BufferId::kRecv: return "recv";
    case BufferId::kScratch: return "scratch";
  }
  return "?";
}

std::string Show(const Region& r) {
  return absl::StrCat(BufferName(r.buffer), "[", r.offset, "+", r.count, "]");
}

std::string Show(const Action& a) {
  switch (a.kind) {
    case Action::Kind::kSend:
      return absl::StrCat("send to ", a.peer, " ", Show(a.src));
    case Action::Kind::kRecv:
      return absl::StrCat("recv from ", a.peer, " ", Show(a.dst));
    case Action::Kind::kRecvReduce:
      return absl::StrCat("recv_reduce from ", a.peer, " ", Show(a.src),
                          " -> ", Show(a.dst));
    case Action::Kind::kCopy:
      return absl::StrCat("copy ", Show(a.src), " -> ", Show(a.dst));
    case Action::Kind::kReduce:
      return absl::StrCat("reduce ", Show(a.src), " into ", Show(a.dst));
    case Action::Kind::kDivide:
      return absl::StrCat("divide ", Show(a.dst));
  }
  return "?";
}

bool Writes(const Action& a) { return a.kind != Action::Kind::kSend; }
// Whether the action reads `src` (Recv and Divide have none).
bool ReadsSrc(const Action& a) {
  return a.kind == Action::Kind::kSend || a.kind == Action::Kind::kRecvReduce ||
         a.kind == Action::Kind::kCopy || a.kind == Action::Kind::kReduce;
}

// A region as a physical interval: space 0 is the rank's backing array
// (send and recv), space 1 its scratch.
struct Span {
  int space;
  size_t begin, end;
};

bool Overlap(const Span& a, const Span& b) {
  return a.space == b.space && a.begin < a.end && b.begin < b.end &&
         a.begin < b.end && b.begin < a.end;
}
bool Same(const Span& a, const Span& b) {
  return a.space == b.space && a.begin == b.begin && a.end == b.end;
}

using Builder = std::function<Schedule(const ScheduleParams&)>;

class Simulator {
 public:
  Simulator(const Case& c, Builder build) : c_(c), n_(c.size) {
    ranks_.resize(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) {
      RankState& s = ranks_[static_cast<size_t>(r)];
      ScheduleParams p;
      p.rank = r;
      p.size = n_;
      p.root = c.root;
      p.count = c.count;
      p.in_place = RankInPlace(c, r);
      p.average = IsReduction(c.kind) && c.op == Op::kAvg;
      p.lanes = c.lanes;
      p.bidirectional = c.bidirectional;
      s.schedule = build(p);
      s.layout = LayoutFor(c, r);
      s.mem.resize(s.layout.backing);
      for (size_t j = 0; j < s.mem.size(); ++j) s.mem[j] = Garbage(r, j);
      for (size_t i = 0; i < s.layout.send_size; ++i) {
        s.mem[s.layout.send_base + i] = Input(r, i);
      }
      s.scratch.resize(s.schedule.scratch_count);
      for (size_t j = 0; j < s.scratch.size(); ++j) {
        s.scratch[j] = ScratchGarbage(j);
      }
      s.known = uint64_t{1} << r;
      s.lanes.resize(s.schedule.lanes.size());
      max_lanes_ = std::max(max_lanes_, s.schedule.lanes.size());
    }
  }

  // Checks every schedule, runs them all and compares the results with the
  // reference. Returns "" on success, else what went wrong.
  std::string Run() {
    for (int r = 0; r < n_; ++r) {
      if (std::string e = Validate(r); !e.empty()) {
        return absl::StrCat("rank ", r, ": ", e, "\n", Dump(r));
      }
    }
    if (std::string e = Simulate(); !e.empty()) return e;
    return CheckResults();
  }

 private:
  struct LaneState {
    size_t step = 0;
    bool posted = false;
    int pending = 0;  // Communication actions of the posted step not done.
  };
  struct RankState {
    Schedule schedule;
    Layout layout;
    std::vector<double> mem, scratch;
    uint64_t known = 0;  // Ranks whose entry this rank has heard of.
    std::vector<LaneState> lanes;
  };
  struct Posted {
    int rank;
    size_t lane;
    const Action* action;
    uint64_t known;  // The sender's knowledge when it posted.
  };
  // One (src, dst, lane) message stream: posted, unmatched operations.
  struct Channel {
    std::vector<Posted> sends, recvs;
    size_t send_head = 0, recv_head = 0;
  };

  RankState& rank(int r) { return ranks_[static_cast<size_t>(r)]; }

  size_t BufferSize(const RankState& s, BufferId id) const {
    switch (id) {
      case BufferId::kSend: return s.layout.send_size;
      case BufferId::kRecv: return s.layout.recv_size;
      case BufferId::kScratch: return s.schedule.scratch_count;
    }
    return 0;
  }

  Span Phys(const RankState& s, const Region& r) const {
    switch (r.buffer) {
      case BufferId::kSend:
        return {0, s.layout.send_base + r.offset,
                s.layout.send_base + r.offset + r.count};
      case BufferId::kRecv:
        return {0, s.layout.recv_base + r.offset,
                s.layout.recv_base + r.offset + r.count};
      case BufferId::kScratch:
        return {1, r.offset, r.offset + r.count};
    }
    return {};
  }

  double* Ptr(RankState& s, const Region& r) {
    switch (r.buffer) {
      case BufferId::kSend: return s.mem.data() + s.layout.send_base + r.offset;
      case BufferId::kRecv: return s.mem.data() + s.layout.recv_base + r.offset;
      case BufferId::kScratch: return s.scratch.data() + r.offset;
    }
    return nullptr;
  }

  std::string Dump(int r) {
    return absl::StrCat("schedule of rank ", r, ":\n",
                        rank(r).schedule.DebugString());
  }

  // Static checks of one rank's schedule.
  std::string Validate(int r) {
    RankState& s = rank(r);
    for (size_t l = 0; l < s.schedule.lanes.size(); ++l) {
      const std::vector<Step>& steps = s.schedule.lanes[l].steps;
      for (size_t i = 0; i < steps.size(); ++i) {
        const std::string where = absl::StrCat("lane ", l, " step ", i, ": ");
        std::vector<Span> sends, writes;  // Communication only.
        std::vector<const Action*> writers;
        for (const Action& a : steps[i].actions) {
          const std::string what = absl::StrCat(where, Show(a), ": ");
          if (a.is_communication()) {
            if (a.peer < 0 || a.peer >= n_ || a.peer == r) {
              return absl::StrCat(what, "bad peer");
            }
          } else if (a.peer != -1) {
            return absl::StrCat(what, "local action with a peer");
          }
          for (const Region* region : {&a.src, &a.dst}) {
            if (region == &a.src ? !ReadsSrc(a) : !Writes(a)) continue;
            const size_t size = BufferSize(s, region->buffer);
            if (region->offset > size || region->count > size - region->offset) {
              return absl::StrCat(what, Show(*region), " lies outside its ",
                                  BufferName(region->buffer), " buffer of ",
                                  size, " elements");
            }
          }
          if (Writes(a) && a.dst.buffer == BufferId::kSend && a.dst.count > 0) {
            return absl::StrCat(what, "writes into the (const) send buffer");
          }
          if (ReadsSrc(a) && Writes(a)) {
            if (a.src.count != a.dst.count) {
              return absl::StrCat(what, "src and dst differ in size");
            }
            const Span src = Phys(s, a.src), dst = Phys(s, a.dst);
            if (Overlap(src, dst) && !Same(src, dst)) {
              return absl::StrCat(what, "src and dst partly overlap");
            }
          }
          if (a.kind == Action::Kind::kSend) sends.push_back(Phys(s, a.src));
          if (a.kind == Action::Kind::kRecv ||
              a.kind == Action::Kind::kRecvReduce) {
            writes.push_back(Phys(s, a.dst));
            writers.push_back(&a);
          }
        }
        // The hazard rule: no receive lands where the step sends from, two
        // receives never land on the same elements, and no RecvReduce reads
        // a local operand that another receive of the step writes (the
        // fused and the deferred RecvReduce would disagree).
        for (size_t w = 0; w < writes.size(); ++w) {
          const std::string what = absl::StrCat(where, Show(*writers[w]), ": ");
          for (const Span& snd : sends) {
            if (Overlap(writes[w], snd)) {
              return absl::StrCat(what,
                                  "receives into a region the step sends");
            }
          }
          for (size_t o = 0; o < writes.size(); ++o) {
            if (o == w) continue;
            if (Overlap(writes[w], writes[o])) {
              return absl::StrCat(what, "overlaps the destination of ",
                                  Show(*writers[o]));
            }
            if (writers[o]->kind == Action::Kind::kRecvReduce &&
                Overlap(writes[w], Phys(s, writers[o]->src))) {
              return absl::StrCat(what, "overwrites the local operand of ",
                                  Show(*writers[o]));
            }
          }
        }
      }
    }
    return ValidateLanes(r);
  }

  // Lanes run independently (and the executor interleaves them freely), so
  // no lane may write an element that another lane reads or writes.
  std::string ValidateLanes(int r) {
    RankState& s = rank(r);
    const size_t lanes = s.schedule.lanes.size();
    if (lanes < 2) return "";
    std::vector<int> writer[2] = {std::vector<int>(s.mem.size(), -1),
                                  std::vector<int>(s.scratch.size(), -1)};
    // Pass 1 records a writer per element; pass 2 checks every access.
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t l = 0; l < lanes; ++l) {
        for (const Step& step : s.schedule.lanes[l].steps) {
          for (const Action& a : step.actions) {
            for (const Region* region : {&a.src, &a.dst}) {
              const bool is_dst = region == &a.dst;
              if (is_dst ? !Writes(a) : !ReadsSrc(a)) continue;
              const Span sp = Phys(s, *region);
              std::vector<int>& w = writer[sp.space];
              for (size_t e = sp.begin; e < sp.end; ++e) {
                const int lane = static_cast<int>(l);
                if (pass == 0 && is_dst) {
                  if (w[e] != -1 && w[e] != lane) {
                    return absl::StrCat("lanes ", w[e], " and ", l,
                                        " both write ", Show(*region));
                  }
                  w[e] = lane;
                } else if (pass == 1 && w[e] != -1 && w[e] != lane) {
                  return absl::StrCat("lane ", l, " accesses ", Show(*region),
                                      " which lane ", w[e], " writes");
                }
              }
            }
          }
        }
      }
    }
    return "";
  }

  Channel& ChannelOf(int src, int dst, size_t lane) {
    const size_t i =
        (static_cast<size_t>(src) * static_cast<size_t>(n_) +
         static_cast<size_t>(dst)) * max_lanes_ + lane;
    return channels_[i];
  }

  void Ready(int r, size_t l) { work_.push_back({r, l}); }

  void Post(int r, size_t l) {
    RankState& s = rank(r);
    LaneState& ls = s.lanes[l];
    const Step& step = s.schedule.lanes[l].steps[ls.step];
    ls.posted = true;
    ls.pending = 0;
    for (const Action& a : step.actions) ls.pending += a.is_communication();
    for (const Action& a : step.actions) {
      if (!a.is_communication()) continue;
      const bool send = a.kind == Action::Kind::kSend;
      Channel& ch = send ? ChannelOf(r, a.peer, l) : ChannelOf(a.peer, r, l);
      (send ? ch.sends : ch.recvs).push_back({r, l, &a, s.known});
      Match(ch);
    }
    if (ls.pending == 0) Ready(r, l);
  }

  // Delivers every send of `ch` whose receive is posted (rendezvous).
  void Match(Channel& ch) {
    while (error_.empty() && ch.send_head < ch.sends.size() &&
           ch.recv_head < ch.recvs.size()) {
      const Posted snd = ch.sends[ch.send_head++];
      const Posted rcv = ch.recvs[ch.recv_head++];
      const Action& sa = *snd.action;
      const Action& ra = *rcv.action;
      if (sa.src.count != ra.dst.count) {
        error_ = absl::StrCat(
            "message size mismatch on lane ", snd.lane, ": rank ", snd.rank,
            " step ", rank(snd.rank).lanes[snd.lane].step, " ", Show(sa),
            " vs rank ", rcv.rank, " step ",
            rank(rcv.rank).lanes[rcv.lane].step, " ", Show(ra), "\n",
            Dump(snd.rank), Dump(rcv.rank));
        return;
      }
      RankState& from = rank(snd.rank);
      RankState& to = rank(rcv.rank);
      const double* in = Ptr(from, sa.src);
      double* out = Ptr(to, ra.dst);
      if (ra.kind == Action::Kind::kRecv) {
        for (size_t i = 0; i < ra.dst.count; ++i) out[i] = in[i];
      } else {
        const double* local = Ptr(to, ra.src);
        for (size_t i = 0; i < ra.dst.count; ++i) {
          out[i] = Apply(c_.op, local[i], in[i]);
        }
      }
      to.known |= snd.known;
      if (--from.lanes[snd.lane].pending == 0) Ready(snd.rank, snd.lane);
      if (--to.lanes[rcv.lane].pending == 0) Ready(rcv.rank, rcv.lane);
    }
  }

  void RunLocal(RankState& s, const Step& step) {
    for (const Action& a : step.actions) {
      double* dst = Ptr(s, a.dst);
      switch (a.kind) {
        case Action::Kind::kCopy: {
          const double* src = Ptr(s, a.src);
          for (size_t i = 0; i < a.dst.count; ++i) dst[i] = src[i];
          break;
        }
        case Action::Kind::kReduce: {
          const double* src = Ptr(s, a.src);
          for (size_t i = 0; i < a.dst.count; ++i) {
            dst[i] = Apply(c_.op, dst[i], src[i]);
          }
          break;
        }
        case Action::Kind::kDivide:
          for (size_t i = 0; i < a.dst.count; ++i) dst[i] /= n_;
          break;
        default:
          break;
      }
    }
  }

  // Moves lane `l` of rank `r` on if it can: posts its current step, or
  // finishes a step whose communication is all done.
  void Advance(int r, size_t l) {
    RankState& s = rank(r);
    LaneState& ls = s.lanes[l];
    const std::vector<Step>& steps = s.schedule.lanes[l].steps;
    if (ls.step >= steps.size()) return;
    if (!ls.posted) {
      Post(r, l);
      return;
    }
    if (ls.pending != 0) return;
    RunLocal(s, steps[ls.step]);
    ++ls.step;
    ls.posted = false;
    if (ls.step < steps.size()) Ready(r, l);
  }

  std::string Simulate() {
    channels_.assign(static_cast<size_t>(n_) * static_cast<size_t>(n_) *
                         std::max<size_t>(max_lanes_, 1),
                     Channel{});
    for (int r = 0; r < n_; ++r) {
      for (size_t l = 0; l < rank(r).lanes.size(); ++l) Ready(r, l);
    }
    // Any rank/lane that can make progress may go next: pick at random.
    std::mt19937 rng(c_.seed);
    while (!work_.empty() && error_.empty()) {
      const size_t pick = rng() % work_.size();
      std::swap(work_[pick], work_.back());
      const auto [r, l] = work_.back();
      work_.pop_back();
      Advance(r, l);
    }
    if (!error_.empty()) return error_;
    std::string stuck;
    std::vector<int> stuck_ranks;
    for (int r = 0; r < n_; ++r) {
      RankState& s = rank(r);
      for (size_t l = 0; l < s.lanes.size(); ++l) {
        const LaneState& ls = s.lanes[l];
        const std::vector<Step>& steps = s.schedule.lanes[l].steps;
        if (ls.step >= steps.size()) continue;
        if (stuck_ranks.empty() || stuck_ranks.back() != r) {
          stuck_ranks.push_back(r);
        }
        absl::StrAppend(&stuck, "  rank ", r, " lane ", l, " blocked in step ",
                        ls.step, " of ", steps.size(), ":");
        for (const Action& a : steps[ls.step].actions) {
          absl::StrAppend(&stuck, " [", Show(a), "]");
        }
        absl::StrAppend(&stuck, "\n");
      }
    }
    if (stuck.empty()) return "";
    std::string out = absl::StrCat("deadlock:\n", stuck);
    for (size_t i = 0; i < stuck_ranks.size() && i < 4; ++i) {
      absl::StrAppend(&out, Dump(stuck_ranks[i]));
    }
    return out;
  }

  std::string CheckResults() {
    std::string out;
    int shown = 0;
    for (int r = 0; r < n_; ++r) {
      RankState& s = rank(r);
      const std::vector<double> want = Expected(c_, r);
      const double* got = s.mem.data() + s.layout.recv_base;
      for (size_t j = 0; j < want.size(); ++j) {
        if (got[j] != want[j] && shown++ < 8) {
          absl::StrAppend(&out, "rank ", r, " recv[", j, "] = ", got[j],
                          ", want ", want[j], "\n");
        }
      }
      if (!RankInPlace(c_, r)) {  // The input must be left alone.
        for (size_t i = 0; i < s.layout.send_size; ++i) {
          if (s.mem[s.layout.send_base + i] != Input(r, i) && shown++ < 8) {
            absl::StrAppend(&out, "rank ", r, " send[", i, "] was changed\n");
          }
        }
      }
      // A barrier completes only after every rank has entered it.
      const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
      if (c_.kind == CollectiveKind::kBarrier && s.known != all &&
          shown++ < 8) {
        absl::StrAppend(&out, "rank ", r,
                        " left the barrier without hearing from every rank\n");
      }
    }
    if (shown > 8) absl::StrAppend(&out, "... ", shown - 8, " more\n");
    if (!out.empty() && n_ <= 4) {
      for (int r = 0; r < n_; ++r) absl::StrAppend(&out, Dump(r));
    }
    return out;
  }

  const Case c_;
  const int n_;
  std::vector<RankState> ranks_;
  size_t max_lanes_ = 0;
  std::vector<Channel> channels_;
  std::vector<std::pair<int, size_t>> work_;
  std::string error_;
};

std::string Simulate(const Case& c, const Builder& build) {
  return Simulator(c, build).Run();
}

std::string Simulate(const Case& c) {
  return Simulate(c, [&c](const ScheduleParams& p) {
    return BuildSchedule(c.kind, c.algorithm, p);
  });
}

// ---------------------------------------------------------------------------
// The sweep.

std::vector<int> Sizes() {
  std::vector<int> out;
  for (int n = 1; n <= 17; ++n) out.push_back(n);
  out.push_back(32);
  return out;
}

std::vector<size_t> Counts(int size) {
  const size_t n = static_cast<size_t>(size);
  std::vector<size_t> out = {0, 1, 2, n - 1, n + 1, 3 * n + 2, 100};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> Roots(CollectiveKind kind, int size) {
  if (!IsRooted(kind)) return {0};
  std::vector<int> out = {0, size / 2, size - 1};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<Op> Ops(CollectiveKind kind) {
  if (!IsReduction(kind)) return {Op::kSum};
  return {Op::kSum, Op::kAvg, Op::kMax};
}

// The pipeline shapes `kind` is swept with: 1 and 3 lanes, and for
// all_reduce, whose ring can go both ways round, each of those both ways
// too (the other all_reduce algorithms must ignore the flag).
std::vector<std::pair<size_t, bool>> Shapes(CollectiveKind kind) {
  std::vector<std::pair<size_t, bool>> out = {{1, false}, {3, false}};
  if (kind == CollectiveKind::kAllReduce) {
    out.push_back({1, true});
    out.push_back({3, true});
  }
  return out;
}

// Simulates every algorithm of `kind` over the whole grid; returns the
// number of cases run.
int Sweep(CollectiveKind kind) {
  int cases = 0, failures = 0;
  for (Algorithm algorithm : AlgorithmsFor(kind)) {
      if (!IsScheduled(algorithm)) continue;
    for (int size : Sizes()) {
      for (size_t count : Counts(size)) {
        for (int root : Roots(kind, size)) {
          for (bool in_place : {false, true}) {
            if (in_place && !HasInPlaceForm(kind)) continue;
            for (const auto& [lanes, bidirectional] : Shapes(kind)) {
              for (Op op : Ops(kind)) {
                Case c;
                c.kind = kind;
                c.algorithm = algorithm;
                c.size = size;
                c.count = count;
                c.root = root;
                c.in_place = in_place;
                c.lanes = lanes;
                c.bidirectional = bidirectional;
                c.op = op;
                c.seed = static_cast<uint32_t>(cases) * 2654435761u + 1;
                ++cases;
                const std::string error = Simulate(c);
                if (!error.empty() && ++failures <= 5) {
                  ADD_FAILURE() << c.Name() << "\n" << error;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases << " cases";
  return cases;
}

// ---------------------------------------------------------------------------
// The simulator itself.

Case TwoRankCase() {
  Case c;
  c.kind = CollectiveKind::kAllToAll;
  c.size = 2;
  c.count = 1;
  return c;
}

// Verifies that the simulator reports a deadlock when both ranks send before
// receiving (fine with eager sends, a deadlock under rendezvous).
TEST(SimulatorTest, DetectsSendSendDeadlock) {
  const std::string error = Simulate(TwoRankCase(), [](const ScheduleParams& p) {
    const int peer = 1 - p.rank;
    Schedule s;
    Lane lane;
    Step send, recv;
    send.actions.push_back(Action::Send(peer, {BufferId::kSend, 0, 1}));
    recv.actions.push_back(Action::Recv(peer, {BufferId::kRecv, 0, 1}));
    lane.steps = {send, recv};
    s.lanes.push_back(lane);
    return s;
  });
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
  EXPECT_NE(error.find("lane 0 step 0: send"), std::string::npos) << error;
}

// Verifies that the simulator rejects a receive whose size differs from the
// matching send's.
TEST(SimulatorTest, DetectsMessageSizeMismatch) {
  const std::string error = Simulate(TwoRankCase(), [](const ScheduleParams& p) {
    const int peer = 1 - p.rank;
    Schedule s;
    Lane lane;
    Step step;
    step.actions.push_back(
        Action::Send(peer, {BufferId::kSend, 0, p.rank == 0 ? 2u : 1u}));
    step.actions.push_back(Action::Recv(peer, {BufferId::kRecv, 0, 1}));
    lane.steps = {step};
    s.lanes.push_back(lane);
    return s;
  });
  EXPECT_NE(error.find("message size mismatch"), std::string::npos) << error;
}

// Verifies that the simulator rejects a step receiving into what it sends.
TEST(SimulatorTest, DetectsRecvIntoSentRegion) {
  Case c = TwoRankCase();
  c.kind = CollectiveKind::kAllReduce;
  c.count = 4;
  const std::string error = Simulate(c, [](const ScheduleParams& p) {
    const int peer = 1 - p.rank;
    Schedule s;
    Lane lane;
    Step step;
    step.actions.push_back(Action::Send(peer, {BufferId::kRecv, 0, 3}));
    step.actions.push_back(Action::RecvReduce(peer, {BufferId::kSend, 2, 2},
                                              {BufferId::kRecv, 2, 2}));
    lane.steps = {step};
    s.lanes.push_back(lane);
    return s;
  });
  EXPECT_NE(error.find("receives into a region the step sends"),
            std::string::npos)
      << error;
}

// Verifies that the simulator sees in-place aliasing: in an in-place
// all_gather, rank r's send block is recv block r.
TEST(SimulatorTest, DetectsHazardThroughInPlaceAlias) {
  Case c = TwoRankCase();
  c.kind = CollectiveKind::kAllGather;
  c.count = 2;
  c.in_place = true;
  const std::string error = Simulate(c, [](const ScheduleParams& p) {
    const int peer = 1 - p.rank;
    Schedule s;
    Lane lane;
    Step step;
    step.actions.push_back(Action::Send(peer, {BufferId::kSend, 0, 2}));
    step.actions.push_back(Action::Recv(
        peer, {BufferId::kRecv, static_cast<size_t>(p.rank) * 2, 2}));
    lane.steps = {step};
    s.lanes.push_back(lane);
    return s;
  });
  EXPECT_NE(error.find("receives into a region the step sends"),
            std::string::npos)
      << error;
}

// Verifies that the simulator rejects regions outside their buffers and
// writes into the send buffer.
TEST(SimulatorTest, DetectsBadRegions) {
  Case c = TwoRankCase();
  c.kind = CollectiveKind::kAllReduce;
  c.count = 4;
  auto one_copy = [&c](Region src, Region dst) {
    return Simulate(c, [=](const ScheduleParams&) {
      Schedule s;
      Lane lane;
      Step step;
      step.actions.push_back(Action::Copy(src, dst));
      lane.steps = {step};
      s.lanes.push_back(lane);
      return s;
    });
  };
  std::string error =
      one_copy({BufferId::kSend, 2, 3}, {BufferId::kRecv, 0, 3});
  EXPECT_NE(error.find("outside its send buffer of 4"), std::string::npos)
      << error;
  error = one_copy({BufferId::kRecv, 0, 1}, {BufferId::kScratch, 0, 1});
  EXPECT_NE(error.find("outside its scratch buffer of 0"), std::string::npos)
      << error;
  error = one_copy({BufferId::kRecv, 0, 1}, {BufferId::kSend, 0, 1});
  EXPECT_NE(error.find("(const) send buffer"), std::string::npos) << error;
}

// Verifies that the simulator rejects two lanes touching the same elements.
TEST(SimulatorTest, DetectsLaneConflict) {
  Case c = TwoRankCase();
  c.kind = CollectiveKind::kAllReduce;
  c.count = 4;
  const std::string error = Simulate(c, [](const ScheduleParams&) {
    Schedule s;
    for (size_t off : {0, 1}) {
      Lane lane;
      Step step;
      step.actions.push_back(
          Action::Copy({BufferId::kSend, off, 2}, {BufferId::kRecv, off, 2}));
      lane.steps = {step};
      s.lanes.push_back(lane);
    }
    return s;
  });
  EXPECT_NE(error.find("lanes 0 and 1 both write"), std::string::npos)
      << error;
}

// Verifies that the simulator reports wrong results (here: no reduction).
TEST(SimulatorTest, DetectsWrongResult) {
  Case c = TwoRankCase();
  c.kind = CollectiveKind::kAllReduce;
  c.count = 3;
  const std::string error = Simulate(c, [](const ScheduleParams& p) {
    Schedule s;
    Lane lane;
    Step step;
    step.actions.push_back(Action::Copy({BufferId::kSend, 0, p.count},
                                        {BufferId::kRecv, 0, p.count}));
    lane.steps = {step};
    s.lanes.push_back(lane);
    return s;
  });
  EXPECT_NE(error.find("rank 0 recv[0]"), std::string::npos) << error;
}

// Verifies that the simulator notices when one rank skips the last step of
// its first lane, for every collective and algorithm (so the sweep below
// cannot pass vacuously).
TEST(SimulatorTest, DetectsSkippedStep) {
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (Algorithm algorithm : AlgorithmsFor(kind)) {
      if (!IsScheduled(algorithm)) continue;
      Case c;
      c.kind = kind;
      c.algorithm = algorithm;
      c.size = 6;
      c.count = 5;
      const std::string error = Simulate(c, [&c](const ScheduleParams& p) {
        Schedule s = BuildSchedule(c.kind, c.algorithm, p);
        if (p.rank == p.size - 1) s.lanes[0].steps.pop_back();
        return s;
      });
      EXPECT_FALSE(error.empty()) << c.Name();
    }
  }
}

// ---------------------------------------------------------------------------
// Every collective, every algorithm, the whole grid.

// Verifies that every all_reduce algorithm computes sum, avg and max exactly.
TEST(ScheduleSimulationTest, AllReduce) {
  EXPECT_GT(Sweep(CollectiveKind::kAllReduce), 0);
}
// Verifies that ring all_gather delivers every block to every rank.
TEST(ScheduleSimulationTest, AllGather) {
  EXPECT_GT(Sweep(CollectiveKind::kAllGather), 0);
}
// Verifies that ring reduce_scatter leaves each rank its reduced block.
TEST(ScheduleSimulationTest, ReduceScatter) {
  EXPECT_GT(Sweep(CollectiveKind::kReduceScatter), 0);
}
// Verifies that binomial broadcast copies the root's vector everywhere.
TEST(ScheduleSimulationTest, Broadcast) {
  EXPECT_GT(Sweep(CollectiveKind::kBroadcast), 0);
}
// Verifies that binomial reduce leaves the reduction at the root.
TEST(ScheduleSimulationTest, Reduce) {
  EXPECT_GT(Sweep(CollectiveKind::kReduce), 0);
}
// Verifies that every gather algorithm assembles all blocks at the root.
TEST(ScheduleSimulationTest, Gather) {
  EXPECT_GT(Sweep(CollectiveKind::kGather), 0);
}
// Verifies that every scatter algorithm hands each rank its block.
TEST(ScheduleSimulationTest, Scatter) {
  EXPECT_GT(Sweep(CollectiveKind::kScatter), 0);
}
// Verifies that pairwise all_to_all transposes the blocks.
TEST(ScheduleSimulationTest, AllToAll) {
  EXPECT_GT(Sweep(CollectiveKind::kAllToAll), 0);
}
// Verifies that no rank leaves the dissemination barrier before all entered.
TEST(ScheduleSimulationTest, Barrier) {
  EXPECT_GT(Sweep(CollectiveKind::kBarrier), 0);
}

// ---------------------------------------------------------------------------
// Step counts against the costs documented in the builders' headers.

size_t CommSteps(const Lane& lane) {
  size_t out = 0;
  for (const Step& step : lane.steps) {
    out += std::any_of(step.actions.begin(), step.actions.end(),
                       [](const Action& a) { return a.is_communication(); });
  }
  return out;
}

int FloorLog2(int n) {
  int log = 0;
  while ((2 << log) <= n) ++log;
  return log;
}
int CeilLog2(int n) {
  int log = 0;
  while ((1 << log) < n) ++log;
  return log;
}

ScheduleParams Params(int rank, int size, size_t count, size_t lanes,
                      bool in_place, bool average) {
  ScheduleParams p;
  p.rank = rank;
  p.size = size;
  p.count = count;
  p.lanes = lanes;
  p.in_place = in_place;
  p.average = average;
  return p;
}

// Verifies that ring all_reduce takes 2(n-1) communication steps per lane,
// plus only the copy (n == 1, out of place) and divide (average) steps.
TEST(ScheduleStepsTest, RingAllReduce) {
  for (int n : Sizes()) {
    for (size_t lanes : {size_t{1}, size_t{4}}) {
      for (bool in_place : {false, true}) {
        for (bool average : {false, true}) {
          for (int r = 0; r < n; ++r) {
            const Schedule s =
                BuildSchedule(CollectiveKind::kAllReduce, Algorithm::kRing,
                              Params(r, n, 1000, lanes, in_place, average));
            ASSERT_EQ(s.lanes.size(), lanes);
            const size_t comm = 2 * static_cast<size_t>(n - 1);
            const size_t local =
                (n == 1 && !in_place ? 1 : 0) + (average ? 1 : 0);
            for (const Lane& lane : s.lanes) {
              EXPECT_EQ(CommSteps(lane), comm) << "n=" << n << " rank " << r;
              EXPECT_EQ(lane.steps.size(), comm + local)
                  << "n=" << n << " rank " << r;
            }
          }
        }
      }
    }
  }
}

// Verifies that bidirectional ring all_reduce keeps the ring's 2(n-1)
// steps and, from 3 ranks, sends to both neighbours in every one of them,
// one block of its half each way; with 2 ranks (one neighbour) it is the
// plain ring.
TEST(ScheduleStepsTest, BidirectionalRingAllReduceSendsBothWays) {
  // Every block whole and equal: 8 partition units (kPartitionAlign
  // elements each) per block, so a step that sent nothing one way, or
  // the whole segment, shows.
  const size_t block = 8 * kPartitionAlign;
  for (int n : Sizes()) {
    if (n == 1) continue;
    const size_t count = 2 * static_cast<size_t>(n) * block;
    for (int r = 0; r < n; ++r) {
      ScheduleParams p = Params(r, n, count, 1, false, false);
      const Schedule one_way =
          BuildSchedule(CollectiveKind::kAllReduce, Algorithm::kRing, p);
      p.bidirectional = true;
      const Schedule s =
          BuildSchedule(CollectiveKind::kAllReduce, Algorithm::kRing, p);
      ASSERT_EQ(s.lanes.size(), 1u);
      const std::vector<Step>& steps = s.lanes[0].steps;
      ASSERT_EQ(steps.size(), 2 * static_cast<size_t>(n - 1)) << "n=" << n;
      if (n == 2) {
        EXPECT_EQ(s.DebugString(), one_way.DebugString());
        continue;
      }
      const int right = (r + 1) % n, left = (r + n - 1) % n;
      for (size_t k = 0; k < steps.size(); ++k) {
        std::map<int, size_t> sent;  // Elements sent to each peer.
        for (const Action& a : steps[k].actions) {
          if (a.kind == Action::Kind::kSend) sent[a.peer] += a.src.count;
        }
        ASSERT_EQ(sent.size(), 2u) << "n=" << n << " rank " << r << " step " << k;
        for (int peer : {right, left}) {
          EXPECT_EQ(sent[peer], block)
              << "n=" << n << " rank " << r << " step " << k << " peer " << peer;
        }
      }
    }
  }
}

// Verifies that ring all_gather and reduce_scatter take n-1 communication
// steps per lane.
TEST(ScheduleStepsTest, RingAllGatherAndReduceScatter) {
  for (int n : Sizes()) {
    for (CollectiveKind kind :
         {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter}) {
      const Schedule s = BuildSchedule(kind, Algorithm::kRing,
                                       Params(n - 1, n, 100, 3, false, false));
      ASSERT_EQ(s.lanes.size(), 3u);
      for (const Lane& lane : s.lanes) {
        EXPECT_EQ(CommSteps(lane), static_cast<size_t>(n - 1))
            << CollectiveName(kind) << " n=" << n;
      }
    }
  }
}

// Verifies that recursive doubling takes log2(p) exchanges (p the largest
// power of two <= n) plus two fold steps on non-powers of two, and
// Rabenseifner twice as many exchanges.
TEST(ScheduleStepsTest, RecursiveAllReduce) {
  for (int n : Sizes()) {
    const int log_p = FloorLog2(n), p = 1 << log_p;
    const size_t fold = n > p ? 2 : 0;
    size_t most_rd = 0, most_rab = 0;
    for (int r = 0; r < n; ++r) {
      const bool sits_out = r < 2 * (n - p) && r % 2 == 0;
      const bool folds = r < 2 * (n - p);
      const Schedule rd =
          BuildSchedule(CollectiveKind::kAllReduce,
                        Algorithm::kRecursiveDoubling,
                        Params(r, n, 64, 3, true, false));
      const Schedule rab = BuildSchedule(CollectiveKind::kAllReduce,
                                         Algorithm::kRabenseifner,
                                         Params(r, n, 64, 3, true, false));
      // Both pipeline: one lane per segment, each the whole algorithm.
      ASSERT_EQ(rd.lanes.size(), 3u);
      ASSERT_EQ(rab.lanes.size(), 3u);
      for (size_t l = 1; l < 3; ++l) {
        EXPECT_EQ(CommSteps(rd.lanes[l]), CommSteps(rd.lanes[0]));
        EXPECT_EQ(CommSteps(rab.lanes[l]), CommSteps(rab.lanes[0]));
      }
      const size_t rd_steps = CommSteps(rd.lanes[0]);
      const size_t rab_steps = CommSteps(rab.lanes[0]);
      if (sits_out) {
        EXPECT_EQ(rd_steps, 2u) << "n=" << n << " rank " << r;
        EXPECT_EQ(rab_steps, 2u) << "n=" << n << " rank " << r;
      } else {
        const size_t extra = folds ? 2 : 0;
        EXPECT_EQ(rd_steps, static_cast<size_t>(log_p) + extra)
            << "n=" << n << " rank " << r;
        EXPECT_EQ(rab_steps, 2 * static_cast<size_t>(log_p) + extra)
            << "n=" << n << " rank " << r;
      }
      most_rd = std::max(most_rd, rd_steps);
      most_rab = std::max(most_rab, rab_steps);
    }
    EXPECT_EQ(most_rd, static_cast<size_t>(log_p) + fold) << "n=" << n;
    EXPECT_EQ(most_rab, 2 * static_cast<size_t>(log_p) + fold) << "n=" << n;
    EXPECT_LE(most_rd, static_cast<size_t>(CeilLog2(n)) + 2) << "n=" << n;
  }
}

// Verifies that the dissemination barrier takes ceil(log2 n) rounds of one
// send and one receive each, on every rank.
TEST(ScheduleStepsTest, DisseminationBarrier) {
  for (int n : Sizes()) {
    for (int r = 0; r < n; ++r) {
      const Schedule s =
          BuildSchedule(CollectiveKind::kBarrier, Algorithm::kDissemination,
                        Params(r, n, 0, 1, false, false));
      ASSERT_EQ(s.lanes.size(), 1u);
      EXPECT_EQ(s.MaxSteps(), static_cast<size_t>(CeilLog2(n))) << "n=" << n;
      for (const Step& step : s.lanes[0].steps) {
        ASSERT_EQ(step.actions.size(), 2u);
        EXPECT_EQ(step.actions[0].kind, Action::Kind::kSend);
        EXPECT_EQ(step.actions[1].kind, Action::Kind::kRecv);
      }
    }
  }
}

// Verifies that pairwise all_to_all takes n-1 exchanges after its local copy.
TEST(ScheduleStepsTest, PairwiseAllToAll) {
  for (int n : Sizes()) {
    const Schedule s =
        BuildSchedule(CollectiveKind::kAllToAll, Algorithm::kPairwise,
                      Params(0, n, 5, 1, false, false));
    ASSERT_EQ(s.lanes.size(), 1u);
    EXPECT_EQ(CommSteps(s.lanes[0]), static_cast<size_t>(n - 1));
    EXPECT_EQ(s.MaxSteps(), static_cast<size_t>(n));
  }
}

// Verifies that the binomial root talks to ceil(log2 n) children, and that
// broadcast and reduce pipeline one lane per segment.
TEST(ScheduleStepsTest, BinomialTree) {
  for (int n : Sizes()) {
    for (int root : {0, n / 2, n - 1}) {
      ScheduleParams p = Params(root, n, 10, 3, false, false);
      p.root = root;
      const Schedule bcast = BuildSchedule(CollectiveKind::kBroadcast,
                                           Algorithm::kBinomialTree, p);
      const Schedule reduce = BuildSchedule(CollectiveKind::kReduce,
                                            Algorithm::kBinomialTree, p);
      ASSERT_EQ(bcast.lanes.size(), 3u);
      ASSERT_EQ(reduce.lanes.size(), 3u);
      if (n == 1) continue;
      size_t sends = 0;
      for (const Action& a : bcast.lanes[0].steps.back().actions) {
        sends += a.kind == Action::Kind::kSend;
      }
      EXPECT_EQ(sends, static_cast<size_t>(CeilLog2(n))) << "n=" << n;
      EXPECT_EQ(CommSteps(reduce.lanes[0]), static_cast<size_t>(CeilLog2(n)))
          << "n=" << n;
    }
  }
}

// Verifies that BlockPartition blocks are contiguous, cover [0, count),
// start at multiples of kPartitionAlign, and differ in size by less than
// two units (one unit between the others, plus the leftover elements of the
// last), the larger ones first but the last.
TEST(BlockPartitionTest, CoversEvenlyOnAlignedStarts) {
  for (size_t count : {0, 1, 2, 3, 7, 15, 16, 17, 100, 1001, 4096, 100003}) {
    for (size_t parts = 1; parts <= 33; ++parts) {
      const BlockPartition b{count, parts};
      size_t next = 0, smallest = count, largest = 0;
      for (size_t i = 0; i < parts; ++i) {
        EXPECT_EQ(b.offset(i), next) << count << "/" << parts << " block " << i;
        EXPECT_EQ(b.offset(i) % kPartitionAlign, 0u)
            << count << "/" << parts << " block " << i;
        if (i > 0 && i + 1 < parts) {
          EXPECT_LE(b.size(i), b.size(i - 1));
        }
        next += b.size(i);
        smallest = std::min(smallest, b.size(i));
        largest = std::max(largest, b.size(i));
      }
      EXPECT_EQ(next, count) << count << "/" << parts;
      EXPECT_EQ(b.offset(parts), count) << count << "/" << parts;
      EXPECT_LT(largest - smallest, 2 * kPartitionAlign) << count << "/" << parts;
      if (count % kPartitionAlign == 0) {
        EXPECT_LE(largest - smallest, kPartitionAlign) << count << "/" << parts;
      }
    }
  }
}

}  // namespace
}  // namespace relay
