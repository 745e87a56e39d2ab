// File: collectives/tree.h
//
// Binomial-tree algorithms for the rooted collectives. Ranks are renumbered
// relative to the root (v = rank - root mod n); rank v's parent is v with
// its lowest set bit cleared, and its children are v + 1, v + 2, v + 4, ...
// below that bit. ceil(log2 n) rounds; for n ranks and S bytes:
//   broadcast  ceil(log2 n) (alpha + S beta); with `lanes` segments the
//              rounds overlap (a pipelined tree).
//   reduce     ceil(log2 n) (alpha + S beta + S gamma), also pipelined.
//   gather     ceil(log2 n) alpha + (n-1) c beta   (c = one rank's bytes);
//   scatter    the same in reverse. Subtrees travel as one message, so
//              latency is logarithmic, at the price of staging copies.
//
// Example:
//   Schedule s = BinomialBroadcast({.rank = 3, .size = 8, .root = 2,
//                                   .count = 1024});
#ifndef RELAY_COLLECTIVES_TREE_H_
#define RELAY_COLLECTIVES_TREE_H_

#include "collectives/schedule.h"

namespace relay {

Schedule BinomialBroadcast(const ScheduleParams& p);
Schedule BinomialReduce(const ScheduleParams& p);
Schedule BinomialGather(const ScheduleParams& p);
Schedule BinomialScatter(const ScheduleParams& p);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_TREE_H_
