#include "runtime/store.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace relay {
namespace {

// Keys are arbitrary bytes; messages show them C-escaped and quoted.
std::string Quoted(absl::string_view key) {
  return absl::StrCat("\"", absl::CHexEscape(key), "\"");
}

absl::Status CheckKey(absl::string_view op, absl::string_view key) {
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Store::", op, ": key must not be empty"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> Store::MultiGet(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value = Get(key, deadline - absl::Now());
    if (!value.ok()) return value.status();
    values.push_back(*std::move(value));
  }
  return values;
}

// --- InMemoryStore -----------------------------------------------------------

absl::Status InMemoryStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status s = CheckKey("Set", key); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    map_.insert_or_assign(std::string(key), std::string(value));
  }
  key_set_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key,
                                               absl::Duration timeout) {
  if (absl::Status s = CheckKey("Get", key); !s.ok()) return s;
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  if (!key_set_.wait_until(lock, deadline,
                           [&] { return map_.contains(key); })) {
    return absl::DeadlineExceededError(
        absl::StrCat("Store::Get: key ", Quoted(key), " was not set within ",
                     absl::FormatDuration(timeout)));
  }
  return map_.find(key)->second;
}

absl::StatusOr<int64_t> InMemoryStore::Add(absl::string_view key,
                                           int64_t delta) {
  if (absl::Status s = CheckKey("Add", key); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  // A new counter starts at "0"; neither error below can then occur, so a
  // failed Add never leaves a key behind.
  auto it = map_.try_emplace(key, "0").first;
  int64_t current = 0;
  if (!absl::SimpleAtoi(it->second, &current)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Store::Add: key ", Quoted(key),
                     " holds a value that is not a decimal int64"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("Store::Add: key ", Quoted(key), ": ", current, " + ",
                     delta, " overflows int64"));
  }
  it->second = absl::StrCat(sum);
  return sum;
}

absl::Status InMemoryStore::Delete(absl::string_view key) {
  if (absl::Status s = CheckKey("Delete", key); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    return absl::NotFoundError(
        absl::StrCat("Store::Delete: key ", Quoted(key), " not found"));
  }
  map_.erase(it);
  return absl::OkStatus();
}

absl::Status InMemoryStore::DeletePrefix(absl::string_view prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::erase_if(map_, [&](const auto& entry) {
    return absl::StartsWith(entry.first, prefix);
  });
  return absl::OkStatus();
}

size_t InMemoryStore::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

size_t InMemoryStore::size(absl::string_view prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, value] : map_) n += absl::StartsWith(key, prefix) ? 1 : 0;
  return n;
}

// --- PrefixStore -------------------------------------------------------------

std::string PrefixStore::Scoped(absl::string_view key) const {
  return absl::StrCat(prefix_, key);
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status s = CheckKey("Set", key); !s.ok()) return s;
  return base_->Set(Scoped(key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key,
                                             absl::Duration timeout) {
  if (absl::Status s = CheckKey("Get", key); !s.ok()) return s;
  return base_->Get(Scoped(key), timeout);
}

absl::StatusOr<int64_t> PrefixStore::Add(absl::string_view key, int64_t delta) {
  if (absl::Status s = CheckKey("Add", key); !s.ok()) return s;
  return base_->Add(Scoped(key), delta);
}

absl::StatusOr<std::vector<std::string>> PrefixStore::MultiGet(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  std::vector<std::string> scoped;
  scoped.reserve(keys.size());
  for (const std::string& key : keys) {
    if (absl::Status s = CheckKey("Get", key); !s.ok()) return s;
    scoped.push_back(Scoped(key));
  }
  return base_->MultiGet(scoped, timeout);
}

absl::Status PrefixStore::Delete(absl::string_view key) {
  if (absl::Status s = CheckKey("Delete", key); !s.ok()) return s;
  return base_->Delete(Scoped(key));
}

absl::Status PrefixStore::DeletePrefix(absl::string_view prefix) {
  return base_->DeletePrefix(Scoped(prefix));
}

}  // namespace relay
