// File: embed/torch/c10d_store.cc
#include "embed/torch/c10d_store.h"

#include <chrono>
#include <exception>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace relay_torch {
namespace {

absl::Status FromException(const char* what, absl::string_view key,
                           const std::exception& e) {
  const std::string message =
      absl::StrCat("torch store ", what, "(", key, "): ", e.what());
  // c10d reports its timeouts as plain runtime errors ("Socket Timeout",
  // "Wait timeout").
  if (absl::StrContains(absl::AsciiStrToLower(e.what()), "timeout")) {
    return absl::DeadlineExceededError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

absl::Status C10dStore::Set(absl::string_view key, absl::string_view value) {
  try {
    store_->set(std::string(key),
                std::vector<uint8_t>(value.begin(), value.end()));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException("set", key, e);
  }
}

absl::StatusOr<std::string> C10dStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  const std::string k(key);
  try {
    if (timeout <= absl::ZeroDuration()) {
      if (!store_->check({k})) {
        return absl::DeadlineExceededError(
            absl::StrCat("torch store: key ", key, " is not set"));
      }
    } else {
      // At least 1 ms: c10d's wait reads 0 ms as "no timeout".
      store_->wait({k}, std::chrono::milliseconds(std::max<int64_t>(
                            1, absl::ToInt64Milliseconds(timeout))));
    }
    const std::vector<uint8_t> value = store_->get(k);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    return FromException("get", key, e);
  }
}

absl::StatusOr<int64_t> C10dStore::Add(absl::string_view key, int64_t delta) {
  try {
    return store_->add(std::string(key), delta);
  } catch (const std::exception& e) {
    return FromException("add", key, e);
  }
}

absl::Status C10dStore::Delete(absl::string_view key) {
  try {
    store_->deleteKey(std::string(key));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException("delete", key, e);
  }
}

}  // namespace relay_torch
