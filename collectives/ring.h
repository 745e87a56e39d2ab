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
