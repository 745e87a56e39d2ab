// File: embed/torch/c10d_store.h
//
// relay's Store over a torch.distributed store (c10d::Store: the TCPStore
// torchrun or init_process_group made, under the PrefixStore of a process
// group), so a relay communicator rendezvouses where torch does. c10d's
// exceptions become statuses: a timeout is DeadlineExceeded, anything else
// Unavailable, with torch's message.
#ifndef RELAY_EMBED_TORCH_C10D_STORE_H_
#define RELAY_EMBED_TORCH_C10D_STORE_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "runtime/store.h"

namespace relay_torch {

class C10dStore final : public relay::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store)
      : store_(std::move(store)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  // A zero or negative timeout checks once (c10d's wait reads a zero
  // timeout as "forever").
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;

 private:
  const c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace relay_torch

#endif  // RELAY_EMBED_TORCH_C10D_STORE_H_
