#include "transports/nccl/ring_edges.h"

#include <map>
#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace relay {
namespace {

// The edge a route names at `rank`: -1 for none.
int EdgeOf(int rank, int size, EdgeRoute route) {
  switch (route) {
    case EdgeRoute::kToNext: return rank;
    case EdgeRoute::kFromPrev: return (rank + size - 1) % size;
    case EdgeRoute::kNone: return -1;
  }
  return -1;
}

TEST(RingEdgesTest, EveryRoundSplitsIntoTheEdgesOfOneColour) {
  for (int size = 1; size <= 9; ++size) {
    std::map<int, int> rounds_per_edge;
    for (int round = 0; round < EdgeSplitRounds(size); ++round) {
      // edge -> (rank, key) of its members in this round.
      std::map<int, std::set<std::pair<int, int>>> members;
      for (int rank = 0; rank < size; ++rank) {
        const EdgeSplit s = EdgeSplitFor(rank, size, round);
        if (s.edge >= 0) members[s.edge].insert({rank, s.key});
      }
      for (const auto& [edge, ranks] : members) {
        const std::set<std::pair<int, int>> want = {{edge, 0},
                                                    {(edge + 1) % size, 1}};
        EXPECT_EQ(ranks, want) << "size " << size << " round " << round
                               << " edge " << edge;
        EXPECT_EQ(EdgeColour(edge, size), round);
        ++rounds_per_edge[edge];
      }
    }
    // Every edge made exactly once.
    EXPECT_EQ(static_cast<int>(rounds_per_edge.size()), size < 2 ? 0 : size)
        << "size " << size;
    for (const auto& [edge, n] : rounds_per_edge) EXPECT_EQ(n, 1) << edge;
  }
}

TEST(RingEdgesTest, EachRankJoinsItsTwoEdgesInDifferentRounds) {
  for (int size = 2; size <= 9; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      std::set<int> edges;
      for (int round = 0; round < EdgeSplitRounds(size); ++round) {
        const EdgeSplit s = EdgeSplitFor(rank, size, round);
        if (s.edge >= 0) {
          EXPECT_TRUE(edges.insert(s.edge).second);
        }
      }
      const std::set<int> want = {rank, (rank + size - 1) % size};
      EXPECT_EQ(edges, want) << "size " << size << " rank " << rank;
    }
  }
}

TEST(RingEdgesTest, BothEndsOfAMessageRouteItThroughOneEdge) {
  for (int size = 1; size <= 9; ++size) {
    for (int from = 0; from < size; ++from) {
      for (int to = 0; to < size; ++to) {
        if (from == to) continue;
        const int at_sender = EdgeOf(from, size, RouteOf(from, size, true, to));
        const int at_receiver = EdgeOf(to, size, RouteOf(to, size, false, from));
        EXPECT_EQ(at_sender, at_receiver) << "size " << size << ": " << from
                                          << " -> " << to;
        // Only the ring's direction: from a rank to the next.
        const bool along_the_ring = to == (from + 1) % size;
        EXPECT_EQ(at_sender >= 0, along_the_ring)
            << "size " << size << ": " << from << " -> " << to;
        // The sender is the edge's lower end, the receiver its upper end.
        if (at_sender >= 0) {
          EXPECT_EQ(at_sender, from) << "size " << size;
        }
      }
    }
  }
}

TEST(RingEdgesTest, TwoRanksUseOneEdgePerDirection) {
  EXPECT_EQ(EdgeOf(0, 2, RouteOf(0, 2, true, 1)), 0);
  EXPECT_EQ(EdgeOf(1, 2, RouteOf(1, 2, true, 0)), 1);
  EXPECT_EQ(RouteOf(0, 1, true, 0), EdgeRoute::kNone);
  EXPECT_EQ(RouteOf(0, 4, true, 7), EdgeRoute::kNone);
  // Against the ring's direction (from 3 ranks): the shared communicator.
  EXPECT_EQ(RouteOf(1, 4, true, 0), EdgeRoute::kNone);
  EXPECT_EQ(RouteOf(0, 4, false, 1), EdgeRoute::kNone);
}

}  // namespace
}  // namespace relay
