// File: runtime/posted_list.h
//
// PostedList: how a GPU transport hands the requests it posts to its
// watchdog thread. Any thread pushes with one compare-exchange; the
// consumer takes everything pushed so far in one exchange, oldest first.
// There is no lock and no node allocation: the list is intrusive, and each
// item holds its own reference while it is on the list. A mutex and a
// deque that the watchdog also touched moved cache lines between the two
// threads' cores on every post; this moves a line once per look of the
// consumer (docs/design/tuning-history.md).
//
// Order: items taken are oldest first in push order (the order of their
// successful compare-exchanges), so the pushes of one thread come out in
// the order it made them.
//
// Memory order: Push and TakeAll are seq_cst, so a consumer that announces
// it is about to sleep (a seq_cst store to a flag of its own, then a look
// at empty()) and a producer that pushes and then reads that flag cannot
// both miss each other: either the consumer sees the item, or the producer
// sees the flag and wakes it.
//
// T must have two members this list owns while the item is on it:
//   T* next_posted;                // the next older item
//   std::shared_ptr<T> posted_ref;  // the item's own reference
//
// Example:
//   PostedList<Request> posted;
//   posted.Push(std::make_shared<Request>(...));        // any thread
//   posted.TakeAll([&](std::shared_ptr<Request> r) {    // consumer
//     pending.push_back(std::move(r));
//   });
#ifndef RELAY_RUNTIME_POSTED_LIST_H_
#define RELAY_RUNTIME_POSTED_LIST_H_

#include <atomic>
#include <memory>
#include <utility>

namespace relay {

template <typename T>
class PostedList {
 public:
  PostedList() = default;
  PostedList(const PostedList&) = delete;
  PostedList& operator=(const PostedList&) = delete;
  // Items still on the list are released.
  ~PostedList() {
    TakeAll([](std::shared_ptr<T>) {});
  }

  void Push(std::shared_ptr<T> item) {
    T* node = item.get();
    node->posted_ref = std::move(item);
    T* head = head_.load(std::memory_order_relaxed);
    do {
      node->next_posted = head;
    } while (!head_.compare_exchange_weak(head, node, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  }

  // Calls take(std::shared_ptr<T>) for every item pushed so far, oldest
  // first, and leaves the list empty. One consumer at a time.
  template <typename Take>
  void TakeAll(Take&& take) {
    T* newest = head_.exchange(nullptr, std::memory_order_seq_cst);
    T* oldest = nullptr;
    while (newest != nullptr) {  // Reversed: oldest first.
      T* older = newest->next_posted;
      newest->next_posted = oldest;
      oldest = newest;
      newest = older;
    }
    while (oldest != nullptr) {
      T* next = oldest->next_posted;
      oldest->next_posted = nullptr;
      take(std::move(oldest->posted_ref));  // May release the item.
      oldest = next;
    }
  }

  bool empty() const {
    return head_.load(std::memory_order_seq_cst) == nullptr;
  }

 private:
  std::atomic<T*> head_{nullptr};
};

}  // namespace relay

#endif  // RELAY_RUNTIME_POSTED_LIST_H_
