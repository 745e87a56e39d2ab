// File: testing/fuzz/fuzz_check.h
//
// RELAY_FUZZ_CHECK: the property a fuzz target asserts about a decoder
// (a round trip, a bound). On failure it prints the condition and aborts,
// which libFuzzer reports as a crash with the input saved, and which fails
// the corpus replay test (replay_main.cc) under any compiler.
#ifndef RELAY_TESTING_FUZZ_FUZZ_CHECK_H_
#define RELAY_TESTING_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define RELAY_FUZZ_CHECK(cond)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                      \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

#endif  // RELAY_TESTING_FUZZ_FUZZ_CHECK_H_
