#include "runtime/store.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kShort = absl::Milliseconds(50);
constexpr absl::Duration kLong = absl::Seconds(10);

// Verifies that Set then Get returns the exact bytes, embedded NULs included.
TEST(InMemoryStoreTest, SetGetRoundTripBinary) {
  InMemoryStore store;
  const std::string key("k\0ey", 4);
  const std::string value("\0a\0\xff\0", 5);
  ASSERT_TRUE(store.Set(key, value).ok());
  absl::StatusOr<std::string> got = store.Get(key, kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  EXPECT_EQ(got->size(), 5u);
  // A key differing only after the NUL is a different key.
  EXPECT_EQ(store.Get(std::string("k\0ex", 4), kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Verifies that Set overwrites an existing value, including with an empty one.
TEST(InMemoryStoreTest, SetOverwrites) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", "first").ok());
  ASSERT_TRUE(store.Set("k", "second").ok());
  EXPECT_EQ(*store.Get("k", kLong), "second");
  ASSERT_TRUE(store.Set("k", "").ok());
  absl::StatusOr<std::string> got = store.Get("k", kShort);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
}

// Verifies that Get blocks until another thread sets the key, then returns it.
TEST(InMemoryStoreTest, GetBlocksUntilSet) {
  InMemoryStore store;
  std::thread setter([&store] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("late", "value").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = store.Get("late", kLong);
  const absl::Duration waited = absl::Now() - start;
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
  EXPECT_GE(waited, absl::Milliseconds(40));
  EXPECT_LT(waited, kLong);
}

// Verifies that Get of a never-set key returns DeadlineExceeded naming the key
// and the timeout, no earlier than the timeout and within 100 ms after it.
TEST(InMemoryStoreTest, GetTimesOut) {
  InMemoryStore store;
  const absl::Duration timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = store.Get("missing", timeout);
  const absl::Duration waited = absl::Now() - start;
  ASSERT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(got.status().message(), HasSubstr("missing"));
  EXPECT_THAT(got.status().message(), HasSubstr("200ms"));
  EXPECT_GE(waited, timeout);
  EXPECT_LT(waited, timeout + absl::Milliseconds(100));
}

// Verifies that a zero timeout returns a present key and fails at once on an
// absent one.
TEST(InMemoryStoreTest, GetZeroTimeout) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("here", "v").ok());
  EXPECT_EQ(*store.Get("here", absl::ZeroDuration()), "v");
  EXPECT_EQ(store.Get("absent", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Verifies that Add creates a counter at 0, returns each new value, accepts
// negative deltas, and stores the value as a decimal string.
TEST(InMemoryStoreTest, AddCreatesAndIncrements) {
  InMemoryStore store;
  EXPECT_EQ(*store.Add("n", 5), 5);
  EXPECT_EQ(*store.Add("n", 3), 8);
  EXPECT_EQ(*store.Add("n", -10), -2);
  EXPECT_EQ(*store.Add("n", 0), -2);
  EXPECT_EQ(*store.Get("n", kShort), "-2");
  EXPECT_EQ(*store.Add("fresh", -7), -7);
  // Add continues from a value written by Set.
  ASSERT_TRUE(store.Set("s", "40").ok());
  EXPECT_EQ(*store.Add("s", 2), 42);
  EXPECT_EQ(*store.Get("s", kShort), "42");
}

// Verifies that concurrent Adds from 16 threads x 1000 give the exact total.
TEST(InMemoryStoreTest, AddIsAtomicAcrossThreads) {
  InMemoryStore store;
  constexpr int kThreads = 16;
  constexpr int kAddsPerThread = 1000;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store] {
      for (int i = 0; i < kAddsPerThread; ++i) {
        // Alternate +3 and -1: each pair contributes +2.
        const int64_t delta = (i % 2 == 0) ? 3 : -1;
        ASSERT_TRUE(store.Add("counter", delta).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  constexpr int64_t kExpected = int64_t{kThreads} * (kAddsPerThread / 2) * 2;
  EXPECT_EQ(*store.Get("counter", kShort), std::to_string(kExpected));
  EXPECT_EQ(*store.Add("counter", 0), kExpected);
}

// Verifies that Add on a key holding a non-integer value is InvalidArgument
// naming the key, and leaves the value unchanged.
TEST(InMemoryStoreTest, AddOnNonIntegerValue) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("text", "hello").ok());
  absl::StatusOr<int64_t> r = store.Add("text", 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("text"));
  EXPECT_EQ(*store.Get("text", kShort), "hello");
  ASSERT_TRUE(store.Set("big", "99999999999999999999").ok());
  EXPECT_EQ(store.Add("big", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Verifies that Add past the int64 range is OutOfRange and keeps the old value.
TEST(InMemoryStoreTest, AddOverflow) {
  InMemoryStore store;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(*store.Add("hi", kMax), kMax);
  EXPECT_EQ(store.Add("hi", 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*store.Get("hi", kShort), std::to_string(kMax));
  EXPECT_EQ(*store.Add("lo", kMin), kMin);
  EXPECT_EQ(store.Add("lo", -1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*store.Get("lo", kShort), std::to_string(kMin));
}

// Verifies that after Delete a Get of the key times out.
TEST(InMemoryStoreTest, DeleteThenGetTimesOut) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", "v").ok());
  ASSERT_TRUE(store.Delete("k").ok());
  EXPECT_EQ(store.Get("k", kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Add after Delete starts a fresh counter.
  EXPECT_EQ(*store.Add("k", 1), 1);
}

// Verifies that deleting an absent key is NotFound naming the key.
TEST(InMemoryStoreTest, DeleteAbsentIsNotFound) {
  InMemoryStore store;
  absl::Status s = store.Delete("nope");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nope"));
  ASSERT_TRUE(store.Set("once", "v").ok());
  ASSERT_TRUE(store.Delete("once").ok());
  EXPECT_EQ(store.Delete("once").code(), absl::StatusCode::kNotFound);
}

// Verifies that every operation rejects an empty key with InvalidArgument.
TEST(InMemoryStoreTest, EmptyKeyIsInvalidArgument) {
  InMemoryStore store;
  EXPECT_EQ(store.Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Get("", kShort).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Add("", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Delete("").code(), absl::StatusCode::kInvalidArgument);
}

// Verifies that PrefixStore rejects an empty key even though prefix + key
// would be non-empty, and writes nothing to the base.
TEST(PrefixStoreTest, EmptyKeyIsInvalidArgument) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore store(base, "p/");
  EXPECT_EQ(store.Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Get("", kShort).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Add("", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Delete("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(base->Get("p/", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Verifies that two prefixes over one base do not see each other's keys, and
// the base sees each under its prefixed name.
TEST(PrefixStoreTest, PrefixesAreIsolated) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore a(base, "a/");
  PrefixStore b(base, "b/");
  EXPECT_EQ(a.prefix(), "a/");
  ASSERT_TRUE(a.Set("addr", "A").ok());
  ASSERT_TRUE(b.Set("addr", "B").ok());
  EXPECT_EQ(*a.Get("addr", kShort), "A");
  EXPECT_EQ(*b.Get("addr", kShort), "B");
  EXPECT_EQ(*base->Get("a/addr", kShort), "A");
  EXPECT_EQ(*base->Get("b/addr", kShort), "B");
  EXPECT_EQ(base->Get("addr", kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(a.Set("only_a", "x").ok());
  EXPECT_EQ(b.Get("only_a", kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  EXPECT_EQ(*a.Add("n", 2), 2);
  EXPECT_EQ(*b.Add("n", 5), 5);
  EXPECT_EQ(*base->Get("a/n", kShort), "2");

  ASSERT_TRUE(a.Delete("addr").ok());
  EXPECT_EQ(*b.Get("addr", kShort), "B");
  EXPECT_EQ(a.Delete("addr").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(base->Get("a/addr", kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// Verifies that a PrefixStore Get blocks until the prefixed key is set through
// the base.
TEST(PrefixStoreTest, GetBlocksUntilSetThroughBase) {
  auto base = std::make_shared<InMemoryStore>();
  PrefixStore group(base, "g/");
  std::thread setter([base] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(base->Set("g/key", "v").ok());
  });
  absl::StatusOr<std::string> got = group.Get("key", kLong);
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
}

// Verifies that nested PrefixStores compose prefixes, the outer one first.
TEST(PrefixStoreTest, NestedPrefixes) {
  auto base = std::make_shared<InMemoryStore>();
  auto outer = std::make_shared<PrefixStore>(base, "outer/");
  PrefixStore inner(outer, "inner/");
  ASSERT_TRUE(inner.Set("k", "v").ok());
  EXPECT_EQ(*inner.Get("k", kShort), "v");
  EXPECT_EQ(*outer->Get("inner/k", kShort), "v");
  EXPECT_EQ(*base->Get("outer/inner/k", kShort), "v");
  EXPECT_EQ(*inner.Add("c", 4), 4);
  EXPECT_EQ(*base->Get("outer/inner/c", kShort), "4");
  ASSERT_TRUE(inner.Delete("k").ok());
  EXPECT_EQ(base->Get("outer/inner/k", kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace relay
