#include "runtime/activity_gate.h"

#include <algorithm>
#include <vector>

namespace relay {
namespace {

// The gates this thread is inside, innermost last (nesting is rare and
// shallow: a completion inside one operation starting another).
thread_local std::vector<const ActivityGate*> gates_entered;

int EnteredByThisThread(const ActivityGate* gate) {
  return static_cast<int>(
      std::count(gates_entered.begin(), gates_entered.end(), gate));
}

}  // namespace

bool ActivityGate::Enter() {
  // Sequentially consistent on both sides (here and in Close): either this
  // thread sees the gate closed, or Close sees this thread inside.
  inside_.fetch_add(1);
  if (closed_.load()) {
    inside_.fetch_sub(1);
    std::lock_guard<std::mutex> lock(mu_);
    left_.notify_all();
    return false;
  }
  gates_entered.push_back(this);
  return true;
}

void ActivityGate::Exit() {
  auto it = std::find(gates_entered.rbegin(), gates_entered.rend(), this);
  if (it != gates_entered.rend()) gates_entered.erase(std::next(it).base());
  inside_.fetch_sub(1);
  if (closed_.load()) {
    std::lock_guard<std::mutex> lock(mu_);
    left_.notify_all();
  }
}

void ActivityGate::Close() {
  closed_.store(true);
  const int mine = EnteredByThisThread(this);
  std::unique_lock<std::mutex> lock(mu_);
  left_.wait(lock, [&] { return inside_.load() <= mine; });
}

}  // namespace relay
