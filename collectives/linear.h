// File: collectives/linear.h
//
// Direct algorithms, where every rank talks to its peers without relays.
//   linear gather / scatter: the root exchanges one block with every other
//     rank, all at once: (n-1) alpha + (n-1) c beta at the root (c = one
//     block's bytes), no staging copies; best for large blocks.
//   pairwise all_to_all: in step k = 1..n-1 rank r sends block r+k to rank
//     r+k and receives block r-k from rank r-k, so every step is a perfect
//     matching: (n-1) (alpha + c beta).
//   dissemination barrier: in round k rank r signals r + 2^k and waits for
//     r - 2^k; ceil(log2 n) alpha, for any n.
//
// Example:
//   Schedule s = PairwiseAllToAll({.rank = 0, .size = 4, .count = 256});
#ifndef RELAY_COLLECTIVES_LINEAR_H_
#define RELAY_COLLECTIVES_LINEAR_H_

#include "collectives/schedule.h"

namespace relay {

Schedule LinearGather(const ScheduleParams& p);
Schedule LinearScatter(const ScheduleParams& p);
Schedule PairwiseAllToAll(const ScheduleParams& p);
Schedule DisseminationBarrier(const ScheduleParams& p);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_LINEAR_H_
