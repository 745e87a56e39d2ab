// File: runtime/thread_name.h
//
// NameThisThread: gives the calling thread a name the tools show (top -H,
// perf sched, gdb's "info threads", /proc/PID/task/TID/comm), so a profile
// of a job tells a rank's caller from its UCX progress thread, failure
// monitor or store server.
//
// Linux keeps 15 characters; a longer name is cut, not refused. Elsewhere
// it does nothing.
//
// Example:
//   thread_ = std::thread([this] {
//     NameThisThread("relay-monitor");
//     Loop();
//   });
#ifndef RELAY_RUNTIME_THREAD_NAME_H_
#define RELAY_RUNTIME_THREAD_NAME_H_

#if defined(__linux__)
#include <pthread.h>
#endif

#include <cstring>

namespace relay {

inline void NameThisThread(const char* name) {
#if defined(__linux__)
  char cut[16] = {};
  std::strncpy(cut, name, sizeof(cut) - 1);
  pthread_setname_np(pthread_self(), cut);
#else
  (void)name;
#endif
}

}  // namespace relay

#endif  // RELAY_RUNTIME_THREAD_NAME_H_
