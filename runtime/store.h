// File: runtime/store.h
//
// Store: the rendezvous key-value store ranks use to find each other (transport
// addresses, fabric ids, unique ids), with two implementations here:
//   InMemoryStore  one process, ranks as threads (tests, loopback);
//   PrefixStore    scopes every key under a prefix, so sub-communicators made
//                  by Split() or several communicators can share one store.
// The TCP and file stores for multi-process jobs implement the same interface.
//
// Semantics. Set overwrites. Get blocks until the key exists or the timeout
// passes (DeadlineExceeded). Add atomically adds to a counter stored as a
// decimal string, creating it at 0, and returns the new value. Delete removes
// a key and returns NotFound if it was absent. MultiGet waits for every key
// of a list (one round trip on a networked store; rendezvous read all peers'
// addresses with it). Keys and values are arbitrary bytes; an empty key is
// InvalidArgument.
//
// Lifetime and ownership. Stores are shared by every rank and communicator
// that rendezvous through them: hold them by std::shared_ptr. All methods are
// thread-safe.
//
// Example:
//   auto store = std::make_shared<InMemoryStore>();
//   PrefixStore group(store, "group7/");
//   RELAY_RETURN_IF_ERROR(group.Set("addr/0", my_address));
//   RELAY_ASSIGN_OR_RETURN(std::string peer, group.Get("addr/1", absl::Seconds(30)));
#ifndef RELAY_RUNTIME_STORE_H_
#define RELAY_RUNTIME_STORE_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace relay {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;
  virtual absl::Status Delete(absl::string_view key) = 0;
  // The values of `keys`, in order, once all are set; DeadlineExceeded naming
  // a missing key after `timeout`. The default calls Get once per key.
  virtual absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout);
  // Deletes every key that starts with `prefix` ("" is every key): a
  // communicator's keys once its last rank has gone. Unimplemented where
  // the store cannot (then the keys stay).
  virtual absl::Status DeletePrefix(absl::string_view prefix) {
    (void)prefix;
    return absl::UnimplementedError("this store cannot delete by prefix");
  }
};

class InMemoryStore final : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::Status DeletePrefix(absl::string_view prefix) override;
  size_t size();  // Keys held (tests).
  size_t size(absl::string_view prefix);  // Keys that start with `prefix` (tests).

 private:
  // std::mutex rather than absl::Mutex throughout relay: Debian's Abseil is
  // not built with -fsanitize=thread, so TSAN cannot see absl::Mutex.
  std::mutex mu_;
  std::condition_variable key_set_;
  absl::flat_hash_map<std::string, std::string> map_;  // Guarded by mu_.
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::Status Delete(absl::string_view key) override;
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status DeletePrefix(absl::string_view prefix) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string Scoped(absl::string_view key) const;

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace relay

#endif  // RELAY_RUNTIME_STORE_H_
