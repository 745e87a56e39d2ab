// PostedList: items come out oldest first, each exactly once, with several
// threads pushing while one takes; items left on the list are released.
#include "runtime/posted_list.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace relay {
namespace {

struct Item {
  Item(int producer, int seq) : producer(producer), seq(seq) {}
  const int producer;
  const int seq;
  Item* next_posted = nullptr;
  std::shared_ptr<Item> posted_ref;
};

TEST(PostedListTest, TakesOldestFirstAndEmpties) {
  PostedList<Item> list;
  EXPECT_TRUE(list.empty());
  int calls = 0;
  list.TakeAll([&](std::shared_ptr<Item>) { ++calls; });
  EXPECT_EQ(calls, 0);
  for (int i = 0; i < 5; ++i) list.Push(std::make_shared<Item>(0, i));
  EXPECT_FALSE(list.empty());
  std::vector<int> seen;
  list.TakeAll([&](std::shared_ptr<Item> item) {
    ASSERT_NE(item, nullptr);
    EXPECT_EQ(item->next_posted, nullptr);
    EXPECT_EQ(item->posted_ref, nullptr);  // The list let go of it.
    seen.push_back(item->seq);
  });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(list.empty());
  // Taken again: nothing new.
  list.TakeAll([&](std::shared_ptr<Item>) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(PostedListTest, HoldsItemsUntilTakenOrDestroyed) {
  std::weak_ptr<Item> taken, left;
  {
    PostedList<Item> list;
    {
      auto a = std::make_shared<Item>(0, 0);
      auto b = std::make_shared<Item>(0, 1);
      taken = a;
      left = b;
      list.Push(std::move(a));
      list.TakeAll([](std::shared_ptr<Item>) {});  // Dropped at once.
      list.Push(std::move(b));
    }
    EXPECT_TRUE(taken.expired());
    EXPECT_FALSE(left.expired());  // Only the list holds it.
  }
  EXPECT_TRUE(left.expired());  // Released with the list.
}

TEST(PostedListTest, ManyProducersOneConsumerEachItemOnceInOrder) {
  constexpr int kProducers = 4;
  constexpr int kItems = 20000;
  PostedList<Item> list;
  std::atomic<int> producers_done{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kItems; ++i) list.Push(std::make_shared<Item>(p, i));
      producers_done.fetch_add(1);
    });
  }
  std::vector<int> next(kProducers, 0);  // The seq expected next.
  int total = 0;
  bool in_order = true;
  auto take = [&](std::shared_ptr<Item> item) {
    if (item->seq != next[item->producer]) in_order = false;
    next[item->producer] = item->seq + 1;
    ++total;
  };
  while (producers_done.load() < kProducers) list.TakeAll(take);
  list.TakeAll(take);  // What the last pushes left.
  for (std::thread& t : producers) t.join();
  EXPECT_TRUE(in_order);
  EXPECT_EQ(total, kProducers * kItems);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kItems);
  EXPECT_TRUE(list.empty());
}

}  // namespace
}  // namespace relay
