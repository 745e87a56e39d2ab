// File: embed/bucketing/gradient_bucketer.cc
#include "embed/bucketing/gradient_bucketer.h"

#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace relay {
namespace {

// A bucket's request: completes after the results are copied back, so a
// waiter never sees a buffer without its value. Waiting drives the inner
// all_reduce (a polling transport moves only when polled).
class BucketState final : public RequestState {
 public:
  BucketState(absl::Time deadline, Request inner)
      : RequestState(deadline), inner_(std::move(inner)) {}
  bool Progress() override { return inner_.Test(); }
  void StoppedPolling() override {
    if (inner_.valid()) inner_.state()->StopPolling();
  }

 private:
  Request inner_;
};

}  // namespace

GradientBucketer::GradientBucketer(Communicator& comm, BucketerOptions options)
    : comm_(comm), options_(options) {}

absl::Status GradientBucketer::Add(Buffer data) {
  if (!data.device.is_host()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GradientBucketer stages through host memory; got a buffer on ",
        data.device.ToString()));
  }
  if (!IsValid(data.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GradientBucketer: unknown data type ", static_cast<int>(data.dtype)));
  }
  if (data.data == nullptr && data.count > 0) {
    return absl::InvalidArgumentError(
        "GradientBucketer: null buffer with a non-zero count");
  }
  if (data.count == 0) return absl::OkStatus();
  if (data.bytes() >= options_.bucket_bytes) {
    // Big enough alone: reduce it in place, no staging.
    Bucket alone;
    alone.parts.push_back(data);
    alone.count = data.count;
    return Start(data.dtype, std::move(alone));
  }
  Bucket& bucket = open_[data.dtype];
  bucket.parts.push_back(data);
  bucket.count += data.count;
  if (bucket.count * DataTypeSize(data.dtype) < options_.bucket_bytes) {
    return absl::OkStatus();
  }
  Bucket full = std::move(bucket);
  open_.erase(data.dtype);
  return Start(data.dtype, std::move(full));
}

absl::StatusOr<Request> GradientBucketer::Flush() {
  std::map<DataType, Bucket> open = std::move(open_);
  open_.clear();
  absl::Status first_error;
  for (auto& [dtype, bucket] : open) {
    absl::Status s = Start(dtype, std::move(bucket));
    if (first_error.ok()) first_error = s;
  }
  std::vector<Request> started = std::move(started_);
  started_.clear();
  if (!first_error.ok()) return first_error;
  return WhenAll(std::move(started));
}

absl::Status GradientBucketer::Start(DataType dtype, Bucket bucket) {
  ++buckets_started_;
  if (bucket.parts.size() == 1) {
    const Buffer& only = bucket.parts[0];
    absl::StatusOr<Request> r =
        comm_.AllReduce(only, only, options_.op, options_.collective);
    if (!r.ok()) return r.status();
    started_.push_back(std::move(*r));
    return absl::OkStatus();
  }
  const size_t element = DataTypeSize(dtype);
  std::shared_ptr<std::vector<char>> staging = Staging(bucket.count * element);
  char* at = staging->data();
  for (const Buffer& part : bucket.parts) {
    std::memcpy(at, part.data, part.bytes());
    at += part.bytes();
  }
  const Buffer fused{staging->data(), bucket.count, dtype, Device::Host()};
  absl::StatusOr<Request> r =
      comm_.AllReduce(fused, fused, options_.op, options_.collective);
  if (!r.ok()) return r.status();
  auto state = std::make_shared<BucketState>(r->state()->deadline(), *r);
  r->OnDone([staging, parts = std::move(bucket.parts), state](absl::Status s) {
    if (s.ok()) {
      const char* from = staging->data();
      for (const Buffer& part : parts) {
        std::memcpy(part.data, from, part.bytes());
        from += part.bytes();
      }
    }
    state->Complete(std::move(s));
  });
  started_.push_back(Request(state));
  return absl::OkStatus();
}

std::shared_ptr<std::vector<char>> GradientBucketer::Staging(size_t bytes) {
  // In use while a bucket's completion callback holds another reference.
  for (std::shared_ptr<std::vector<char>>& buffer : staging_pool_) {
    if (buffer.use_count() == 1 && buffer->size() >= bytes) return buffer;
  }
  staging_pool_.push_back(std::make_shared<std::vector<char>>(bytes));
  return staging_pool_.back();
}

}  // namespace relay
