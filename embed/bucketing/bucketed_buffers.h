// File: embed/bucketing/bucketed_buffers.h
//
// BucketedBuffers: many small buffers laid out inside a few large buckets,
// so that all_reducing them is one in-place all_reduce per bucket and no
// copy at all. This is DistributedDataParallel's gradient_as_bucket_view:
// a framework allocates its gradients here instead of on their own, its
// backward pass writes them in place, and a step's reduction is a handful
// of large operations. GradientBucketer (gradient_bucketer.h) is the
// alternative for buffers that live elsewhere: it copies into and out of
// its buckets, which on a fast transport costs more than the reduction.
//
// Layout: the buffers are packed in order, contiguously, into buckets of
// at most `bucket_bytes`; a buffer of more gets a bucket of its own. Every
// rank must create the same layout (the same counts, type and bucket size)
// and reduce the same buckets in the same order, as for any collective.
// Host memory only.
//
// Lifetime and ownership. Owns the memory; the Buffers handed out point
// into it and are valid while this object lives. Movable, not copyable.
// Requests returned by AllReduce/AllReduceBucket must complete before the
// object is destroyed. Not thread-safe.
//
// Example (DDP-style: gradients are views into their buckets):
//   RELAY_ASSIGN_OR_RETURN(BucketedBuffers grads, BucketedBuffers::Create(
//       DataType::kFloat32, parameter_counts, 25 << 20));
//   backward(grads.buffer(0), grads.buffer(1), ...);   // writes in place
//   RELAY_ASSIGN_OR_RETURN(Request r, grads.AllReduce(*comm, ReduceOp::kAvg));
//   RELAY_RETURN_IF_ERROR(r.Wait());
#ifndef RELAY_EMBED_BUCKETING_BUCKETED_BUFFERS_H_
#define RELAY_EMBED_BUCKETING_BUCKETED_BUFFERS_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "relay.h"

namespace relay {

class BucketedBuffers {
 public:
  // Lays out buffers of `counts` elements of `dtype`. InvalidArgument for
  // an unknown type, no buffers, a zero bucket size, or a total that does
  // not fit in memory's addressable range.
  static absl::StatusOr<BucketedBuffers> Create(DataType dtype,
                                                absl::Span<const size_t> counts,
                                                size_t bucket_bytes);

  size_t size() const { return offsets_.size(); }
  // The i-th buffer (0 <= i < size()): what the framework reads and writes.
  Buffer buffer(size_t i) const;
  size_t buckets() const { return bucket_starts_.size(); }
  // Which bucket holds buffer i.
  size_t BucketOf(size_t i) const { return bucket_of_[i]; }

  // One in-place all_reduce per bucket; the request completes when every
  // bucket's has, with the first error.
  absl::StatusOr<Request> AllReduce(Communicator& comm, ReduceOp op,
                                    const CollectiveOptions& options = {});
  // Only bucket `b`: to start a bucket as soon as its buffers are final
  // (overlapping the reduction with the rest of a backward pass).
  // InvalidArgument for a bucket that does not exist.
  absl::StatusOr<Request> AllReduceBucket(Communicator& comm, size_t b,
                                          ReduceOp op,
                                          const CollectiveOptions& options = {});

 private:
  BucketedBuffers(DataType dtype, std::unique_ptr<char[]> memory,
                  std::vector<size_t> offsets, std::vector<size_t> counts,
                  std::vector<size_t> bucket_starts,
                  std::vector<size_t> bucket_counts,
                  std::vector<size_t> bucket_of);
  Buffer Elements(size_t first, size_t count) const;

  DataType dtype_;
  std::unique_ptr<char[]> memory_;
  std::vector<size_t> offsets_;        // First element of each buffer.
  std::vector<size_t> counts_;         // Elements of each buffer.
  std::vector<size_t> bucket_starts_;  // First element of each bucket.
  std::vector<size_t> bucket_counts_;  // Elements of each bucket.
  std::vector<size_t> bucket_of_;      // Bucket of each buffer.
};

}  // namespace relay

#endif  // RELAY_EMBED_BUCKETING_BUCKETED_BUFFERS_H_
