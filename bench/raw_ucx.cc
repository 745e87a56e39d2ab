// File: bench/raw_ucx.cc
#include "bench/raw_ucx.h"

#include <ucp/api/ucp.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace relay {
namespace bench {
namespace {

constexpr ucp_tag_t kTag = 0x5241575563780000;  // "RAWUcx", any fixed tag.
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};

absl::Status UcxError(const std::string& what, ucs_status_t s) {
  return absl::InternalError(
      absl::StrCat("raw ucx: ", what, ": ", ucs_status_string(s)));
}

// Sends `bytes` to the peer, or receives them, through relay.
absl::Status Swap(Communicator& comm, const void* mine, void* theirs,
                  size_t bytes) {
  const int peer = 1 - comm.rank();
  absl::StatusOr<Request> sent = comm.Send(
      ConstBuffer{mine, bytes, DataType::kUint8, Device::Host()}, peer, 7);
  if (!sent.ok()) return sent.status();
  absl::StatusOr<Request> got = comm.Recv(
      Buffer{theirs, bytes, DataType::kUint8, Device::Host()}, peer, 7);
  if (!got.ok()) return got.status();
  if (absl::Status s = sent->Wait(absl::Seconds(60)); !s.ok()) return s;
  return got->Wait(absl::Seconds(60));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RawUcxPair>> RawUcxPair::Connect(
    Communicator& comm) {
  if (comm.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw ucx: needs 2 ranks, the job has ", comm.size()));
  }
  std::unique_ptr<RawUcxPair> pair(new RawUcxPair(comm.rank()));
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcxError("ucp_config_read", s);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  s = ucp_init(&params, config, &pair->context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcxError("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(pair->context_, &wp, &pair->worker_);
  if (s != UCS_OK) return UcxError("ucp_worker_create", s);

  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(pair->worker_, &address, &length);
  if (s != UCS_OK) return UcxError("ucp_worker_get_address", s);
  const std::string mine(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(pair->worker_, address);
  uint64_t my_length = mine.size(), their_length = 0;
  if (absl::Status st =
          Swap(comm, &my_length, &their_length, sizeof(uint64_t));
      !st.ok()) {
    return st;
  }
  if (their_length == 0 || their_length > (uint64_t{1} << 20)) {
    return absl::DataLossError(absl::StrCat(
        "raw ucx: the peer's worker address is ", their_length, " bytes"));
  }
  std::string theirs(their_length, '\0');
  if (absl::Status st = Swap(comm, mine.data(), theirs.data(), mine.size());
      !st.ok()) {
    return st;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
  s = ucp_ep_create(pair->worker_, &ep, &pair->ep_);
  if (s != UCS_OK) return UcxError("ucp_ep_create", s);
  return pair;
}

RawUcxPair::~RawUcxPair() {
  if (next_recv_posted_ && UCS_PTR_IS_PTR(next_recv_)) {
    ucp_request_cancel(worker_, next_recv_);
    ucp_request_free(next_recv_);
  }
  if (ep_ != nullptr) {
    // Flushed, within 5 s: the peer closes its own at about the same time.
    ucp_request_param_t param{};
    void* closing = ucp_ep_close_nbx(ep_, &param);
    const absl::Time until = absl::Now() + absl::Seconds(5);
    if (UCS_PTR_IS_PTR(closing)) {
      while (ucp_request_check_status(closing) == UCS_INPROGRESS &&
             absl::Now() < until) {
        ucp_worker_progress(worker_);
      }
      ucp_request_free(closing);
    }
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

absl::Status RawUcxPair::WaitFor(void* request, const char* what) {
  if (request == nullptr) return absl::OkStatus();  // Done at once.
  if (UCS_PTR_IS_ERR(request)) return UcxError(what, UCS_PTR_STATUS(request));
  ucs_status_t s;
  absl::Time until = absl::InfiniteFuture();
  for (uint64_t polls = 1;
       (s = ucp_request_check_status(request)) == UCS_INPROGRESS; ++polls) {
    ucp_worker_progress(worker_);
    if (polls % 65536 == 0) {  // The clock, now and then only.
      const absl::Time now = absl::Now();
      if (until == absl::InfiniteFuture()) until = now + absl::Seconds(60);
      if (now > until) {
        // Left to UCX: the worker's destruction takes it back.
        return absl::DeadlineExceededError(
            absl::StrCat("raw ucx: ", what, " not done within 60 s"));
      }
    }
  }
  ucp_request_free(request);
  return s == UCS_OK ? absl::OkStatus() : UcxError(what, s);
}

absl::StatusOr<void*> RawUcxPair::PostRecv(void* recv, size_t bytes) {
  ucp_request_param_t param{};
  void* r = ucp_tag_recv_nbx(worker_, recv, bytes, kTag, kFullMask, &param);
  if (UCS_PTR_IS_ERR(r)) return UcxError("receive", UCS_PTR_STATUS(r));
  return r;
}

absl::Status RawUcxPair::RoundTrip(const void* send, void* recv, size_t bytes,
                                   bool post_next) {
  ucp_request_param_t param{};
  if (rank_ == 0) {
    void* sent = ucp_tag_send_nbx(ep_, send, bytes, kTag, &param);
    absl::StatusOr<void*> got = PostRecv(recv, bytes);
    if (!got.ok()) {
      (void)WaitFor(sent, "send");
      return got.status();
    }
    if (absl::Status s = WaitFor(sent, "send"); !s.ok()) return s;
    return WaitFor(*got, "receive");
  }
  if (!next_recv_posted_) {
    absl::StatusOr<void*> got = PostRecv(recv, bytes);
    if (!got.ok()) return got.status();
    next_recv_ = *got;
  }
  next_recv_posted_ = false;
  if (absl::Status s = WaitFor(next_recv_, "receive"); !s.ok()) return s;
  void* sent = ucp_tag_send_nbx(ep_, send, bytes, kTag, &param);
  if (post_next) {
    absl::StatusOr<void*> got = PostRecv(recv, bytes);
    if (!got.ok()) {
      (void)WaitFor(sent, "send");
      return got.status();
    }
    next_recv_ = *got;
    next_recv_posted_ = true;
  }
  return WaitFor(sent, "send");
}

}  // namespace bench
}  // namespace relay
