// File: embed/bucketing/bucketed_buffers.cc
#include "embed/bucketing/bucketed_buffers.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace relay {

absl::StatusOr<BucketedBuffers> BucketedBuffers::Create(
    DataType dtype, absl::Span<const size_t> counts, size_t bucket_bytes) {
  if (!IsValid(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BucketedBuffers: unknown data type ", static_cast<int>(dtype)));
  }
  if (counts.empty()) {
    return absl::InvalidArgumentError("BucketedBuffers: no buffers to lay out");
  }
  if (bucket_bytes == 0) {
    return absl::InvalidArgumentError("BucketedBuffers: bucket_bytes is 0");
  }
  const size_t element = DataTypeSize(dtype);
  const size_t bucket_elements = std::max<size_t>(1, bucket_bytes / element);
  std::vector<size_t> offsets, bucket_starts, bucket_counts, bucket_of;
  offsets.reserve(counts.size());
  bucket_of.reserve(counts.size());
  size_t total = 0;
  for (size_t count : counts) {
    if (count > std::numeric_limits<size_t>::max() / element - total) {
      return absl::InvalidArgumentError(
          "BucketedBuffers: the buffers' total size overflows");
    }
    // The open bucket takes this buffer if it fits, or if the bucket is
    // still empty (a buffer larger than a bucket goes alone).
    const bool fits = !bucket_counts.empty() &&
                      (bucket_counts.back() == 0 ||
                       bucket_counts.back() + count <= bucket_elements);
    if (!fits) {
      bucket_starts.push_back(total);
      bucket_counts.push_back(0);
    }
    offsets.push_back(total);
    bucket_of.push_back(bucket_starts.size() - 1);
    bucket_counts.back() += count;
    total += count;
  }
  // Zero-filled: a buffer the framework never writes reduces as zeros.
  std::unique_ptr<char[]> memory(new char[std::max<size_t>(total * element, 1)]());
  return BucketedBuffers(dtype, std::move(memory), std::move(offsets),
                         std::vector<size_t>(counts.begin(), counts.end()),
                         std::move(bucket_starts), std::move(bucket_counts),
                         std::move(bucket_of));
}

BucketedBuffers::BucketedBuffers(DataType dtype, std::unique_ptr<char[]> memory,
                                 std::vector<size_t> offsets,
                                 std::vector<size_t> counts,
                                 std::vector<size_t> bucket_starts,
                                 std::vector<size_t> bucket_counts,
                                 std::vector<size_t> bucket_of)
    : dtype_(dtype),
      memory_(std::move(memory)),
      offsets_(std::move(offsets)),
      counts_(std::move(counts)),
      bucket_starts_(std::move(bucket_starts)),
      bucket_counts_(std::move(bucket_counts)),
      bucket_of_(std::move(bucket_of)) {}

Buffer BucketedBuffers::Elements(size_t first, size_t count) const {
  return Buffer{memory_.get() + first * DataTypeSize(dtype_), count, dtype_,
                Device::Host()};
}

Buffer BucketedBuffers::buffer(size_t i) const {
  return Elements(offsets_[i], counts_[i]);
}

absl::StatusOr<Request> BucketedBuffers::AllReduceBucket(
    Communicator& comm, size_t b, ReduceOp op, const CollectiveOptions& options) {
  if (b >= buckets()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BucketedBuffers: bucket ", b, " of ", buckets()));
  }
  const Buffer bucket = Elements(bucket_starts_[b], bucket_counts_[b]);
  return comm.AllReduce(bucket, bucket, op, options);
}

absl::StatusOr<Request> BucketedBuffers::AllReduce(
    Communicator& comm, ReduceOp op, const CollectiveOptions& options) {
  std::vector<Request> started;
  started.reserve(buckets());
  for (size_t b = 0; b < buckets(); ++b) {
    absl::StatusOr<Request> r = AllReduceBucket(comm, b, op, options);
    if (!r.ok()) {
      // Buckets already started hold this object's memory: finish them.
      for (Request& s : started) s.Wait().IgnoreError();
      return r.status();
    }
    started.push_back(*std::move(r));
  }
  return WhenAll(std::move(started));
}

}  // namespace relay
