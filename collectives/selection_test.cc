// Tests for collectives/selection.h: the algorithm table, the alpha-beta cost
// model and the RELAY_ALGORITHM override syntax.
#include "collectives/selection.h"

#include <cstddef>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "collectives/shm.h"
#include "gtest/gtest.h"
#include "runtime/collective.h"
#include "runtime/transport.h"

namespace relay {
namespace {

// What the loopback transport reports (transports/loopback).
TransportCapabilities LoopbackLike() {
  TransportCapabilities caps;
  caps.host_memory = true;
  caps.fused_recv_reduce = true;
  caps.shared_address_space = true;
  caps.exchange_bytes = 64 << 10;
  caps.latency_us = 1.0;
  caps.bandwidth_gbps = 10.0;
  return caps;
}

// What the UCX transport reports for a few ranks on one host (a shared-
// memory exchange with 1 MB slots, no shared address space).
TransportCapabilities UcxOneHostLike() {
  TransportCapabilities caps;
  caps.host_memory = true;
  caps.exchange_bytes = 1 << 20;
  caps.latency_us = 2.0;
  caps.bandwidth_gbps = 5.0;
  return caps;
}

bool IsBandwidthOptimal(Algorithm a) {
  return a == Algorithm::kRing || a == Algorithm::kRabenseifner;
}

// Verifies that every collective kind has at least one algorithm, with no
// duplicates and never the pseudo-algorithms auto or native.
TEST(SelectionTest, EveryKindHasAnAlgorithm) {
  for (CollectiveKind kind : AllCollectiveKinds()) {
    const absl::Span<const Algorithm> all = AlgorithmsFor(kind);
    EXPECT_FALSE(all.empty()) << CollectiveName(kind);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_NE(all[i], Algorithm::kAuto) << CollectiveName(kind);
      EXPECT_NE(all[i], Algorithm::kNative) << CollectiveName(kind);
      for (size_t j = 0; j < i; ++j) {
        EXPECT_NE(all[i], all[j]) << CollectiveName(kind);
      }
    }
  }
}

// Verifies that Implements agrees with the table, on known pairs and on
// every (algorithm, kind) pair.
TEST(SelectionTest, Implements) {
  EXPECT_TRUE(Implements(Algorithm::kRing, CollectiveKind::kAllReduce));
  EXPECT_TRUE(Implements(Algorithm::kRing, CollectiveKind::kAllGather));
  EXPECT_TRUE(Implements(Algorithm::kRing, CollectiveKind::kReduceScatter));
  EXPECT_TRUE(
      Implements(Algorithm::kRecursiveDoubling, CollectiveKind::kAllReduce));
  EXPECT_TRUE(Implements(Algorithm::kRabenseifner, CollectiveKind::kAllReduce));
  EXPECT_TRUE(Implements(Algorithm::kBinomialTree, CollectiveKind::kBroadcast));
  EXPECT_TRUE(Implements(Algorithm::kBinomialTree, CollectiveKind::kReduce));
  EXPECT_TRUE(Implements(Algorithm::kBinomialTree, CollectiveKind::kGather));
  EXPECT_TRUE(Implements(Algorithm::kBinomialTree, CollectiveKind::kScatter));
  EXPECT_TRUE(Implements(Algorithm::kLinear, CollectiveKind::kGather));
  EXPECT_TRUE(Implements(Algorithm::kLinear, CollectiveKind::kScatter));
  EXPECT_TRUE(Implements(Algorithm::kPairwise, CollectiveKind::kAllToAll));
  EXPECT_TRUE(Implements(Algorithm::kDissemination, CollectiveKind::kBarrier));

  EXPECT_FALSE(Implements(Algorithm::kBinomialTree, CollectiveKind::kAllReduce));
  EXPECT_FALSE(Implements(Algorithm::kRing, CollectiveKind::kBroadcast));
  EXPECT_FALSE(Implements(Algorithm::kLinear, CollectiveKind::kAllToAll));
  EXPECT_FALSE(Implements(Algorithm::kPairwise, CollectiveKind::kBarrier));
  for (CollectiveKind kind : AllCollectiveKinds()) {
    EXPECT_FALSE(Implements(Algorithm::kAuto, kind)) << CollectiveName(kind);
    EXPECT_FALSE(Implements(Algorithm::kNative, kind)) << CollectiveName(kind);
    for (Algorithm a : AlgorithmsFor(kind)) {
      EXPECT_TRUE(Implements(a, kind))
          << AlgorithmName(a) << " " << CollectiveName(kind);
    }
  }
}

// Verifies that on loopback-like ranks the cost model picks the direct
// algorithm for an 8-byte all_reduce on 8 ranks (one hand-off instead of
// three rounds; recursive doubling without a shared address space) and shm
// on 2 (each rank finishes its own call), and direct for 64 MB on 2, 4 and
// 8 ranks, split over the ranks' threads (less memory traffic than the
// ring's steps), while ranks that share no address space take a
// bandwidth-optimal algorithm (ring or Rabenseifner).
TEST(SelectionTest, ChooseAlgorithmBySize) {
  TransportCapabilities caps = LoopbackLike();
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 8, 8, caps),
            Algorithm::kDirect);
  TransportCapabilities apart = caps;  // Ranks on several hosts.
  apart.shared_address_space = false;
  apart.exchange_bytes = 0;
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 8, 8, apart),
            Algorithm::kRecursiveDoubling);
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 8, 2, caps),
            Algorithm::kShm);
  for (int size : {2, 4, 8}) {
    EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, size_t{64} << 20,
                              size, caps),
              Algorithm::kDirect)
        << size;
  }
  const Algorithm large =
      ChooseAlgorithm(CollectiveKind::kAllReduce, size_t{64} << 20, 8, apart);
  EXPECT_TRUE(IsBandwidthOptimal(large)) << AlgorithmName(large);
}

// Verifies that ChooseAlgorithm always returns an algorithm of the kind, the
// cheapest by EstimateMicros.
TEST(SelectionTest, ChooseAlgorithmIsCheapestImplementation) {
  const TransportCapabilities caps = LoopbackLike();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (int size : {1, 2, 3, 8, 13, 64}) {
      for (size_t bytes : {size_t{0}, size_t{8}, size_t{4096},
                           size_t{1} << 20, size_t{64} << 20}) {
        const Algorithm chosen = ChooseAlgorithm(kind, bytes, size, caps);
        EXPECT_TRUE(Implements(chosen, kind)) << CollectiveName(kind);
        const double cost = EstimateMicros(chosen, kind, bytes, size, caps);
        for (Algorithm a : AlgorithmsFor(kind)) {
          EXPECT_LE(cost, EstimateMicros(a, kind, bytes, size, caps))
              << CollectiveName(kind) << " " << AlgorithmName(a)
              << " size=" << size << " bytes=" << bytes;
        }
      }
    }
  }
}

// Verifies that the cached chooser answers as ChooseAlgorithm does when
// any input changes between calls (size, bytes, rank count, the
// transport's figures), not just on repeats.
TEST(SelectionTest, CachedChoiceFollowsEveryInput) {
  TransportCapabilities caps = LoopbackLike();
  TransportCapabilities apart = caps;
  apart.shared_address_space = false;
  TransportCapabilities slow = caps;
  slow.latency_us = 100;
  for (int pass = 0; pass < 2; ++pass) {
    for (CollectiveKind kind : AllCollectiveKinds()) {
      for (const TransportCapabilities& c : {caps, apart, slow, caps}) {
        for (int size : {2, 8, 2}) {
          for (size_t bytes : {size_t{8}, size_t{8}, size_t{64} << 20}) {
            EXPECT_EQ(ChooseAlgorithmCached(kind, bytes, size, c),
                      ChooseAlgorithm(kind, bytes, size, c))
                << CollectiveName(kind) << " size=" << size
                << " bytes=" << bytes << " latency=" << c.latency_us
                << " shared=" << c.shared_address_space;
          }
        }
      }
    }
  }
}

// Verifies that the direct algorithm is never chosen, and costs infinity,
// where ranks do not share an address space.
TEST(SelectionTest, DirectNeedsASharedAddressSpace) {
  TransportCapabilities caps = LoopbackLike();
  caps.shared_address_space = false;
  for (CollectiveKind kind : AllCollectiveKinds()) {
    EXPECT_TRUE(Implements(Algorithm::kDirect, kind));
    EXPECT_FALSE(IsScheduled(Algorithm::kDirect));
    for (size_t bytes : {size_t{8}, size_t{1} << 20}) {
      EXPECT_NE(ChooseAlgorithm(kind, bytes, 4, caps), Algorithm::kDirect);
    }
  }
  EXPECT_EQ(EstimateMicros(Algorithm::kDirect, CollectiveKind::kAllReduce, 8,
                           4, caps),
            std::numeric_limits<double>::infinity());
}

// Verifies that on loopback-like ranks every all_reduce, 8 B to 64 MB on 2
// to 16 ranks, takes the direct algorithm (README: one rendezvous, split
// over the ranks' threads past kDirectSplitBytes), but for 2 ranks up to
// 1 KB, which take shm.
TEST(SelectionTest, LoopbackAllReduceIsDirectButForSmallCallsOnTwoRanks) {
  const TransportCapabilities caps = LoopbackLike();
  for (int size : {2, 3, 4, 5, 8, 16}) {
    for (size_t bytes = 8; bytes <= (size_t{64} << 20); bytes *= 4) {
      EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, bytes, size, caps),
                size == 2 && bytes < 1024 ? Algorithm::kShm
                                          : Algorithm::kDirect)
          << size << " ranks, " << bytes << " B";
    }
  }
}

// Verifies that EstimateMicros is finite, non-negative and never decreases as
// the message grows, for every algorithm of every kind (shm: finite while
// the largest contribution fits the slots, infinite past that).
TEST(SelectionTest, EstimateMicrosMonotonicInBytes) {
  const TransportCapabilities caps = LoopbackLike();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (Algorithm a : AlgorithmsFor(kind)) {
      for (int size : {1, 2, 3, 4, 7, 8, 16, 17, 64}) {
        double previous = 0;
        for (size_t bytes = 0; bytes <= (size_t{1} << 30);
             bytes = bytes == 0 ? 1 : bytes * 2) {
          const double t = EstimateMicros(a, kind, bytes, size, caps);
          EXPECT_GE(t, previous) << CollectiveName(kind) << " "
                                 << AlgorithmName(a) << " size=" << size
                                 << " bytes=" << bytes;
          const bool fits = a != Algorithm::kShm || bytes <= caps.exchange_bytes;
          if (fits) {
            EXPECT_LT(t, 1e12)
                << CollectiveName(kind) << " " << AlgorithmName(a);
          } else if (kind != CollectiveKind::kAllGather &&
                     kind != CollectiveKind::kGather) {
            EXPECT_EQ(t, std::numeric_limits<double>::infinity())
                << CollectiveName(kind) << " size=" << size
                << " bytes=" << bytes;
          }
          previous = t;
        }
      }
    }
  }
}

// Verifies that ranks on one host without a shared address space (UCX over
// shared memory) take shm for every small collective and for all_reduce of
// any size (its pipeline), and leave it once any other collective's message
// outgrows one exchange or the transport has no exchange.
TEST(SelectionTest, ShmForSmallCollectivesOfProcessesOnOneHost) {
  const TransportCapabilities caps = UcxOneHostLike();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (int size : {2, 4, 8}) {
      EXPECT_EQ(ChooseAlgorithm(kind, 8 * static_cast<size_t>(size), size,
                                caps),
                Algorithm::kShm)
          << CollectiveName(kind) << " on " << size;
      if (kind == CollectiveKind::kBarrier) continue;
      if (kind == CollectiveKind::kAllReduce) {
        EXPECT_EQ(ChooseAlgorithm(kind, size_t{16} << 20, size, caps),
                  Algorithm::kShm)
            << "on " << size;
        EXPECT_TRUE(ShmAllReducePipelines(size_t{16} << 20, size, caps));
        continue;
      }
      EXPECT_NE(ChooseAlgorithm(kind, size_t{16} << 20, size, caps),
                Algorithm::kShm)
          << CollectiveName(kind) << " on " << size;
    }
  }
  // A full slot still beats the messages' protocol (measured 64 KB on 2
  // processes: 7.6-8.3 us by shm, 19.8-47 by recursive doubling).
  EXPECT_EQ(ChooseAlgorithm(CollectiveKind::kAllReduce, 64 << 10, 2, caps),
            Algorithm::kShm);
  EXPECT_FALSE(ShmAllReducePipelines(64 << 10, 2, caps));
  // Past one exchange's range the pipeline, whose chunks are the slots:
  // 2.9-7.1 GB/s busbw at 1-64 MB on 2 processes, where the message
  // algorithms reached 2.2-4.2 a day earlier
  // (bench/results/2026-11-24-allreduce-ucx-shm-pipeline-vs-mpi).
  EXPECT_TRUE(ShmAllReducePipelines((64 << 10) + 4, 2, caps));
  // With more ranks one exchange reads n contributions, and the pipeline
  // takes over below that range: on 8 ranks at 64 KB it moves about 3 S
  // per rank instead of 9 S.
  EXPECT_TRUE(ShmAllReducePipelines(64 << 10, 8, caps));
  // Loopback's ranks share an address space: the model never offers the
  // pipeline there (direct reduces in place), so a small shm stays one
  // exchange.
  EXPECT_FALSE(ShmAllReducePipelines(8 << 10, 16, LoopbackLike()));
  EXPECT_EQ(EstimateMicros(Algorithm::kShm, CollectiveKind::kAllReduce,
                           size_t{1} << 20, 2, LoopbackLike()),
            std::numeric_limits<double>::infinity());
  TransportCapabilities apart = caps;
  apart.exchange_bytes = 0;
  EXPECT_EQ(EstimateMicros(Algorithm::kShm, CollectiveKind::kAllReduce, 8, 2,
                           apart),
            std::numeric_limits<double>::infinity());
  EXPECT_NE(ChooseAlgorithm(CollectiveKind::kAllReduce, 8, 2, apart),
            Algorithm::kShm);
  // The memo keys on the exchange too.
  EXPECT_EQ(ChooseAlgorithmCached(CollectiveKind::kAllReduce, 8, 2, caps),
            Algorithm::kShm);
  EXPECT_NE(ChooseAlgorithmCached(CollectiveKind::kAllReduce, 8, 2, apart),
            Algorithm::kShm);
}

// Verifies where loopback, which has both, picks shm over direct: on 2
// ranks up to 1 KB (each rank finishes its own call; direct's last
// arrival hands the other its result), never on more ranks or from 2 KB
// (direct reads the peers' buffers in place, with no copy through slots).
TEST(SelectionTest, LoopbackPrefersShmToDirectOnlyForSmallCallsOnTwoRanks) {
  const TransportCapabilities caps = LoopbackLike();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (int size : {1, 2, 3, 8, 16}) {
      for (size_t bytes = 0; bytes <= (size_t{1} << 20);
           bytes = bytes == 0 ? 1 : bytes * 2) {
        const Algorithm chosen = ChooseAlgorithm(kind, bytes, size, caps);
        if (size == 2 && bytes <= 1024) {
          EXPECT_EQ(chosen, Algorithm::kShm)
              << CollectiveName(kind) << " bytes=" << bytes;
        } else {
          EXPECT_NE(chosen, Algorithm::kShm)
              << CollectiveName(kind) << " size=" << size
              << " bytes=" << bytes;
        }
      }
    }
  }
}

// Verifies that per-collective overrides parse into one entry per collective.
TEST(SelectionTest, ParseOverridesPerCollective) {
  absl::StatusOr<AlgorithmOverrides> parsed =
      ParseAlgorithmOverrides("all_reduce=ring,gather=linear");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->size(), 2u);
  EXPECT_EQ(parsed->at(CollectiveKind::kAllReduce), Algorithm::kRing);
  EXPECT_EQ(parsed->at(CollectiveKind::kGather), Algorithm::kLinear);
}

// Verifies that a bare algorithm name applies to exactly the collectives it
// implements.
TEST(SelectionTest, ParseOverridesBareName) {
  absl::StatusOr<AlgorithmOverrides> parsed = ParseAlgorithmOverrides("ring");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  for (CollectiveKind kind : AllCollectiveKinds()) {
    if (Implements(Algorithm::kRing, kind)) {
      ASSERT_EQ(parsed->count(kind), 1u) << CollectiveName(kind);
      EXPECT_EQ(parsed->at(kind), Algorithm::kRing) << CollectiveName(kind);
    } else {
      EXPECT_EQ(parsed->count(kind), 0u) << CollectiveName(kind);
    }
  }
  EXPECT_EQ(parsed->size(), 3u);
}

// Verifies that malformed overrides are rejected with InvalidArgument.
TEST(SelectionTest, ParseOverridesRejectsMalformed) {
  for (const char* spec : {"all_reduce=binomial", "nonsense", "all_reduce="}) {
    absl::StatusOr<AlgorithmOverrides> parsed = ParseAlgorithmOverrides(spec);
    EXPECT_FALSE(parsed.ok()) << spec;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << spec << ": " << parsed.status();
  }
}

}  // namespace
}  // namespace relay
