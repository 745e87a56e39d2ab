// File: transports/nccl/ring_edges.h
//
// The plan behind the NCCL transport's ring-edge communicators: one NCCL
// communicator of two ranks per edge (e, e+1 mod n) of the ring 0, 1, ...,
// n-1. Pure arithmetic, so it is tested without a GPU.
//
// Why. NCCL stripes one send over at most (its point-to-point channels) /
// (ranks) channels. With its limit of 64 channels, a send among 4 ranks gets
// 16, and a ring step (send to the next rank, receive from the previous)
// moved 239-282 GB/s at 32-128 MB on 4 H100s. On a communicator per edge a
// send gets 32, and the same step moved 267-336 GB/s, level with native
// all_reduce's busbw from 64 MB (bench/gpu/neighbour_exchange,
// bench/results/2026-11-26-nccl-ring-edges-h100).
//
// Making them. ncclCommSplit gives each rank one communicator per call, so
// the edges are coloured such that no rank ends two edges of one colour:
// alternating 0, 1 around an even ring; an odd ring's last edge (n-1, 0)
// takes colour 2. Split round c makes the edges of colour c; in it, a rank
// passes its edge's index as the split colour (or none), and key 0 at the
// edge's lower end (rank e), 1 at its upper end (rank e+1).
//
// Using them. A rank owns two: "to next" (edge r, where it is rank 0) and
// "from previous" (edge r-1, where it is rank 1); with 2 ranks these are
// the two edges between the same pair. Each edge carries one direction
// only, the ring's: its lower end sends, its upper end receives. So NCCL
// connects (and allocates buffers for) half the channels it would for both
// directions; a message against the ring's direction takes the shared
// point-to-point communicator. RouteOf says which one carries a message,
// the same on both ends of it, and always the same for one sender and
// receiver, so a pair's messages stay in order.
//
// Example:
//   for (int round = 0; round < EdgeSplitRounds(n); ++round) {
//     const EdgeSplit s = EdgeSplitFor(rank, n, round);
//     ncclCommSplit(parent, s.edge < 0 ? NCCL_SPLIT_NOCOLOR : s.edge, s.key,
//                   &comm, &config);
//     ...  // comm is "to next" if s.edge == rank, else "from previous"
//   }
#ifndef RELAY_TRANSPORTS_NCCL_RING_EDGES_H_
#define RELAY_TRANSPORTS_NCCL_RING_EDGES_H_

namespace relay {

// How many ncclCommSplit rounds make every edge: 0 for fewer than 2 ranks,
// 2 for an even ring, 3 for an odd one.
inline int EdgeSplitRounds(int size) {
  if (size < 2) return 0;
  return size % 2 == 0 ? 2 : 3;
}

// The colour of edge e (e, e+1 mod size).
inline int EdgeColour(int edge, int size) {
  if (size % 2 == 1 && edge == size - 1) return 2;
  return edge % 2;
}

struct EdgeSplit {
  int edge = -1;  // The edge this rank joins in the round; -1: none.
  int key = 0;    // 0 at the edge's lower end, 1 at its upper end.
};

inline EdgeSplit EdgeSplitFor(int rank, int size, int round) {
  EdgeSplit s;
  if (size < 2) return s;
  const int prev_edge = (rank + size - 1) % size;
  if (EdgeColour(rank, size) == round) {
    s.edge = rank;
    s.key = 0;
  } else if (EdgeColour(prev_edge, size) == round) {
    s.edge = prev_edge;
    s.key = 1;
  }
  return s;
}

enum class EdgeRoute {
  kNone,      // Not a neighbour: the transport's point-to-point communicator.
  kToNext,    // Edge (rank, rank+1).
  kFromPrev,  // Edge (rank-1, rank).
};

// Which communicator carries a message between `rank` and `peer`: a send
// to the next rank goes on "to next", a receive from the previous one on
// "from previous" (the peer's "to next": the same edge), anything else on
// the shared one.
inline EdgeRoute RouteOf(int rank, int size, bool is_send, int peer) {
  if (size < 2 || peer == rank || peer < 0 || peer >= size) return EdgeRoute::kNone;
  const int next = (rank + 1) % size;
  const int prev = (rank + size - 1) % size;
  if (is_send && peer == next) return EdgeRoute::kToNext;
  if (!is_send && peer == prev) return EdgeRoute::kFromPrev;
  return EdgeRoute::kNone;
}

}  // namespace relay

#endif  // RELAY_TRANSPORTS_NCCL_RING_EDGES_H_
