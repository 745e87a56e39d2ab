// File: embed/bucketing/gradient_bucketer.h
//
// GradientBucketer fuses many small all_reduces into few large ones, as
// Horovod's tensor fusion and DistributedDataParallel's buckets do: a
// training step's gradients are often thousands of small tensors, and one
// all_reduce per tensor pays the per-operation latency thousands of times.
// Buffers are added one by one; those of one data type are copied into a
// bucket, and a bucket is all_reduced (in one call) once it holds
// `bucket_bytes`, or at Flush; when it completes, the results are copied
// back into the buffers. A buffer of `bucket_bytes` or more goes alone,
// without staging.
//
// Every rank must add the same buffers (counts and types) in the same order
// and flush at the same points, as for any collective. Host memory only.
// Not thread-safe: one thread adds and flushes (the all_reduces run on).
//
// Example (one training step):
//   GradientBucketer fuse(*comm, {.bucket_bytes = 4 << 20,
//                                 .op = ReduceOp::kAvg});
//   for (Tensor& g : grads) RELAY_RETURN_IF_ERROR(fuse.Add(g.buffer()));
//   RELAY_ASSIGN_OR_RETURN(Request done, fuse.Flush());
//   RELAY_RETURN_IF_ERROR(done.Wait());   // every gradient is averaged
#ifndef RELAY_EMBED_BUCKETING_GRADIENT_BUCKETER_H_
#define RELAY_EMBED_BUCKETING_GRADIENT_BUCKETER_H_

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay.h"

namespace relay {

struct BucketerOptions {
  // A bucket starts once it holds this many bytes (DDP's default: 25 MiB).
  size_t bucket_bytes = size_t{25} << 20;
  ReduceOp op = ReduceOp::kSum;
  // Passed to each bucket's all_reduce (timeout, algorithm).
  CollectiveOptions collective;
};

class GradientBucketer {
 public:
  explicit GradientBucketer(Communicator& comm, BucketerOptions options = {});
  // Flushes nothing: buckets started and not waited on keep running.
  ~GradientBucketer() = default;

  // Queues an in-place all_reduce of `data`; may start a full bucket.
  // InvalidArgument (nothing queued) for device memory, an unknown type, or
  // null data with a non-zero count; a failure to start a bucket is
  // returned here too.
  absl::Status Add(Buffer data);
  // Starts every partly filled bucket. The request completes once every
  // buffer added since the last Flush holds its reduced value, with the
  // first error among the buckets.
  absl::StatusOr<Request> Flush();

  // All_reduces started since construction (a test's and a benchmark's
  // view of how much was fused).
  size_t buckets_started() const { return buckets_started_; }

 private:
  struct Bucket {
    std::vector<Buffer> parts;
    size_t count = 0;  // Elements over all parts.
  };
  absl::Status Start(DataType dtype, Bucket bucket);

  // A staging buffer no running bucket uses, of at least `bytes` (kept
  // across flushes: a fresh one per bucket costs its page faults again).
  std::shared_ptr<std::vector<char>> Staging(size_t bytes);

  Communicator& comm_;
  const BucketerOptions options_;
  std::vector<std::shared_ptr<std::vector<char>>> staging_pool_;
  std::map<DataType, Bucket> open_;  // One filling bucket per data type.
  std::vector<Request> started_;     // Since the last Flush.
  size_t buckets_started_ = 0;
};

}  // namespace relay

#endif  // RELAY_EMBED_BUCKETING_GRADIENT_BUCKETER_H_
