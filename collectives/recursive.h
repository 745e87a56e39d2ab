// File: collectives/recursive.h
//
// Recursive algorithms for all_reduce, for n ranks and S bytes. Both fold a
// non-power-of-two group first: with p the largest power of two <= n, the
// first 2(n-p) ranks pair up, even ones hand their data to odd ones and wait
// for the result, which costs 2 (alpha + S beta) + S gamma more.
//
//   recursive doubling   log2(p) (alpha + S beta + S gamma)
//     partners at distance 1, 2, 4, ... swap whole vectors: fewest steps,
//     for small messages.
//   Rabenseifner         2 log2(p) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma
//     reduce-scatter by recursive halving, then all-gather by recursive
//     doubling: bandwidth-optimal with logarithmic latency, for medium and
//     large messages.
//
// Both pipeline: with `lanes` > 1 each segment of the vector runs the whole
// algorithm as its own lane.
//
// Example:
//   Schedule s = RabenseifnerAllReduce({.rank = 2, .size = 6, .count = 4096});
#ifndef RELAY_COLLECTIVES_RECURSIVE_H_
#define RELAY_COLLECTIVES_RECURSIVE_H_

#include "collectives/schedule.h"

namespace relay {

Schedule RecursiveDoublingAllReduce(const ScheduleParams& p);
Schedule RabenseifnerAllReduce(const ScheduleParams& p);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_RECURSIVE_H_
