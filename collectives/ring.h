// File: collectives/ring.h
//
// Ring algorithms: each rank talks only to its neighbours, rank - 1 (left,
// receives) and rank + 1 (right, sends). The buffer is cut into `size`
// blocks; `lanes` pipelines it further into independent segments.
//
// Costs for n ranks and S bytes (alpha: per-message latency, beta: time per
// byte on a link, gamma: time per byte reduced):
//   reduce_scatter  (n-1) alpha + (n-1)/n S beta + (n-1)/n S gamma
//                   (S = the whole send vector)
//   all_gather      (n-1) alpha + (n-1)/n S beta   (S = the whole result)
//   all_reduce      reduce_scatter + all_gather:
//                   2(n-1) alpha + 2(n-1)/n S beta + (n-1)/n S gamma
// Bandwidth-optimal; the latency term grows linearly with n.
//
// Bidirectional all_reduce (ScheduleParams::bidirectional, n > 2): each
// segment's first half goes round clockwise and its second half the other
// way, and step k of both rings is one step, so every step sends to both
// neighbours at once. Same cost on paper; on GPUs over NCCL it gives each
// step the point-to-point channels of two peers instead of one, where a
// single peer's channels cap the ring well below NCCL's own all_reduce.
//
// Example:
//   Schedule s = RingAllReduce({.rank = 1, .size = 4, .count = 1 << 20});
#ifndef RELAY_COLLECTIVES_RING_H_
#define RELAY_COLLECTIVES_RING_H_

#include "collectives/schedule.h"

namespace relay {

Schedule RingAllReduce(const ScheduleParams& p);
Schedule RingReduceScatter(const ScheduleParams& p);
Schedule RingAllGather(const ScheduleParams& p);

}  // namespace relay

#endif  // RELAY_COLLECTIVES_RING_H_
