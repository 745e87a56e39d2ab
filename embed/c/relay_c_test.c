/* relay_c_test: the C API from C, linked against librelay.so only.
 *
 * For world sizes 1 to 5, ranks as threads of this process on the loopback
 * transport run every collective (and send/recv, split) on data distinct
 * per rank and element, and check every element against what the
 * collective must produce. Then the API's contracts: bad input gives
 * RELAY_INVALID_ARGUMENT with a message and starts nothing, option structs
 * of an older (smaller) or newer (larger, zero tail) layout work, a newer
 * layout with an unknown field set is refused, completion callbacks and
 * polling work, and the library refuses to close under live handles.
 * Exits 0 when every check passes; prints each failure. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed/c/relay_c.h"

static int failures = 0;
static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char* fmt, ...) {
  va_list args;
  pthread_mutex_lock(&print_mu);
  va_start(args, fmt);
  printf("FAIL: ");
  vprintf(fmt, args);
  printf("\n");
  va_end(args);
  ++failures;
  pthread_mutex_unlock(&print_mu);
}

/* Checks a call's status; on failure prints it with the handle's message. */
#define EXPECT_OK(call, comm)                                               \
  do {                                                                      \
    relay_status s_ = (call);                                               \
    if (s_ != RELAY_OK) {                                                   \
      char msg_[512];                                                       \
      relay_comm_last_error((comm), msg_, sizeof msg_);                     \
      fail("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call,                \
           relay_status_name(s_), msg_);                                    \
    }                                                                       \
  } while (0)

/* Waits for a started operation; a failure is reported with the request's
 * message (the caller's EXPECT_OK reports a failure to start). Takes the
 * request's address: C leaves the order of argument evaluation open, so
 * the request must be read here, after the call that set it. */
static relay_status run_and_wait(relay_status started, relay_request** out) {
  if (started != RELAY_OK) return started;
  relay_request* req = *out;
  *out = NULL;
  relay_status s = relay_request_wait(req, 30000);
  if (s != RELAY_OK) {
    char msg[512];
    relay_request_last_error(req, msg, sizeof msg);
    fail("request ended with %s: %s", relay_status_name(s), msg);
  }
  relay_request_release(req);
  return s;
}

/* Element j of rank r's input: exact in float64 sums and products. */
/* Distinct per rank (the r/8 part) and not ordered by rank (the rest), so
   the rank holding an element's max or min changes from element to
   element: a max that returned the last rank's input would fail. Eighths
   keep sums and products of a few ranks exact. */
static double input(int rank, size_t j) {
  return (double)((rank * 5 + (int)(j % 13) * 3) % 17 + 1) + rank / 8.0;
}

static double max_over_ranks(int size, size_t j) {
  double m = input(0, j);
  for (int r = 1; r < size; ++r) m = input(r, j) > m ? input(r, j) : m;
  return m;
}

static double min_over_ranks(int size, size_t j) {
  double m = input(0, j);
  for (int r = 1; r < size; ++r) m = input(r, j) < m ? input(r, j) : m;
  return m;
}

typedef struct {
  int rank;
  int size;
  relay_library* lib;
  relay_store* store;
} rank_args;

static void check(int ok, int rank, int size, const char* what, size_t j,
                  double got, double want) {
  if (!ok) {
    fail("size %d rank %d %s: element %zu is %g, want %g", size, rank, what,
         j, got, want);
  }
}

static void* run_rank(void* p) {
  const rank_args* a = (const rank_args*)p;
  const int rank = a->rank, size = a->size;
  relay_comm_options o = RELAY_COMM_OPTIONS_INIT;
  o.rank = rank;
  o.size = size;
  o.transport = "loopback";
  relay_comm* comm = NULL;
  relay_status s = relay_comm_create(a->lib, a->store, &o, &comm);
  if (s != RELAY_OK) {
    char msg[512];
    relay_library_last_error(a->lib, msg, sizeof msg);
    fail("size %d rank %d: relay_comm_create -> %s: %s", size, rank,
         relay_status_name(s), msg);
    return NULL;
  }
  int got_rank = -1, got_size = -1;
  EXPECT_OK(relay_comm_rank(comm, &got_rank), comm);
  EXPECT_OK(relay_comm_size(comm, &got_size), comm);
  if (got_rank != rank || got_size != size) {
    fail("rank/size %d/%d, want %d/%d", got_rank, got_size, rank, size);
  }

  const size_t n = 37; /* per-rank block: odd, so no algorithm divides it */
  const size_t total = n * (size_t)size;
  double* in = malloc(total * sizeof(double));
  double* out = malloc(total * sizeof(double));
  for (size_t j = 0; j < total; ++j) in[j] = input(rank, j);
  relay_request* req = NULL;

  /* all_reduce: sum, then max. */
  EXPECT_OK(run_and_wait(relay_all_reduce(comm, in, out, n, RELAY_FLOAT64,
                                          RELAY_SUM, NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < n; ++j) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += input(r, j);
    check(out[j] == want, rank, size, "all_reduce sum", j, out[j], want);
  }
  EXPECT_OK(run_and_wait(relay_all_reduce(comm, in, out, n, RELAY_FLOAT64,
                                          RELAY_MAX, NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < n; ++j) {
    const double want = max_over_ranks(size, j);
    check(out[j] == want, rank, size, "all_reduce max", j, out[j], want);
  }

  /* reduce (prod) to the last rank, broadcast from rank 0. */
  const int last = size - 1;
  memset(out, 0, total * sizeof(double));
  EXPECT_OK(run_and_wait(relay_reduce(comm, in, out, n, RELAY_FLOAT64,
                                      RELAY_PROD, last, NULL, &req),
                         &req),
            comm);
  if (rank == last) {
    for (size_t j = 0; j < n; ++j) {
      double want = 1;
      for (int r = 0; r < size; ++r) want *= input(r, j);
      check(out[j] == want, rank, size, "reduce prod", j, out[j], want);
    }
  }
  EXPECT_OK(run_and_wait(relay_broadcast(comm, rank == 0 ? in : NULL, out, n,
                                         RELAY_FLOAT64, 0, NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < n; ++j) {
    check(out[j] == input(0, j), rank, size, "broadcast", j, out[j],
          input(0, j));
  }

  /* all_gather and gather: block r of out is rank r's first n inputs. */
  EXPECT_OK(run_and_wait(relay_all_gather(comm, in, out, n, RELAY_FLOAT64,
                                          NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < total; ++j) {
    const double want = input((int)(j / n), j % n);
    check(out[j] == want, rank, size, "all_gather", j, out[j], want);
  }
  memset(out, 0, total * sizeof(double));
  EXPECT_OK(run_and_wait(relay_gather(comm, in, rank == last ? out : NULL, n,
                                      RELAY_FLOAT64, last, NULL, &req),
                         &req),
            comm);
  if (rank == last) {
    for (size_t j = 0; j < total; ++j) {
      const double want = input((int)(j / n), j % n);
      check(out[j] == want, rank, size, "gather", j, out[j], want);
    }
  }

  /* reduce_scatter (min) and scatter: this rank gets block `rank`. */
  EXPECT_OK(run_and_wait(relay_reduce_scatter(comm, in, out, n, RELAY_FLOAT64,
                                              RELAY_MIN, NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < n; ++j) {
    const double want = min_over_ranks(size, (size_t)rank * n + j);
    check(out[j] == want, rank, size, "reduce_scatter min", j, out[j], want);
  }
  EXPECT_OK(run_and_wait(relay_scatter(comm, rank == 0 ? in : NULL, out, n,
                                       RELAY_FLOAT64, 0, NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < n; ++j) {
    const double want = input(0, (size_t)rank * n + j);
    check(out[j] == want, rank, size, "scatter", j, out[j], want);
  }

  /* all_to_all: block i of out is block `rank` of rank i's input. */
  EXPECT_OK(run_and_wait(relay_all_to_all(comm, in, out, n, RELAY_FLOAT64,
                                          NULL, &req),
                         &req),
            comm);
  for (size_t j = 0; j < total; ++j) {
    const int from = (int)(j / n);
    const double want = input(from, (size_t)rank * n + j % n);
    check(out[j] == want, rank, size, "all_to_all", j, out[j], want);
  }

  /* Ring of send/recv with a tag, then a barrier. */
  if (size > 1) {
    relay_request *sreq = NULL, *rreq = NULL;
    EXPECT_OK(relay_recv(comm, out, n, RELAY_FLOAT64, (rank + size - 1) % size,
                         7, NULL, &rreq),
              comm);
    EXPECT_OK(relay_send(comm, in, n, RELAY_FLOAT64, (rank + 1) % size, 7,
                         NULL, &sreq),
              comm);
    EXPECT_OK(run_and_wait(RELAY_OK, &sreq), comm);
    EXPECT_OK(run_and_wait(RELAY_OK, &rreq), comm);
    const int from = (rank + size - 1) % size;
    for (size_t j = 0; j < n; ++j) {
      check(out[j] == input(from, j), rank, size, "recv", j, out[j],
            input(from, j));
    }
  }
  EXPECT_OK(run_and_wait(relay_barrier(comm, NULL, &req), &req), comm);

  /* Windows: this test's transport has none, on every rank alike. */
  {
    relay_status w = relay_comm_register_window(comm, out, n * sizeof(double), NULL);
    if (w != RELAY_UNIMPLEMENTED) {
      fail("rank %d: relay_comm_register_window gave %s, want RELAY_UNIMPLEMENTED", rank,
           relay_status_name(w));
    }
  }

  /* split: even and odd ranks, reversed; all_reduce in each half. */
  relay_comm* half = NULL;
  EXPECT_OK(relay_comm_split(comm, rank % 2, -rank, &half), comm);
  if (half != NULL) {
    int half_rank = -1, half_size = -1;
    relay_comm_rank(half, &half_rank);
    relay_comm_size(half, &half_size);
    const int want_size = (size + 1 - rank % 2) / 2;
    if (half_size != want_size || half_rank != half_size - 1 - rank / 2) {
      fail("size %d rank %d: split gave rank %d of %d", size, rank, half_rank,
           half_size);
    }
    EXPECT_OK(run_and_wait(relay_all_reduce(half, in, out, n, RELAY_FLOAT64,
                                            RELAY_SUM, NULL, &req),
                           &req),
              half);
    for (size_t j = 0; j < n; ++j) {
      double want = 0;
      for (int r = rank % 2; r < size; r += 2) want += input(r, j);
      check(out[j] == want, rank, size, "split all_reduce", j, out[j], want);
    }
    relay_comm_destroy(half);
  } else {
    fail("size %d rank %d: split gave no communicator", size, rank);
  }

  free(in);
  free(out);
  relay_comm_destroy(comm);
  return NULL;
}

static void run_world(relay_library* lib, int size) {
  relay_store* store = NULL;
  if (relay_store_create_in_memory(lib, &store) != RELAY_OK) {
    fail("relay_store_create_in_memory");
    return;
  }
  pthread_t threads[8];
  rank_args args[8];
  for (int r = 0; r < size; ++r) {
    args[r] = (rank_args){r, size, lib, store};
    pthread_create(&threads[r], NULL, run_rank, &args[r]);
  }
  for (int r = 0; r < size; ++r) pthread_join(threads[r], NULL);
  relay_store_release(store);
}

/* ---- Contracts, on a one-rank communicator --------------------------- */

static void expect_invalid(relay_status s, relay_comm* comm, const char* what,
                           const char* message_part) {
  char msg[512];
  relay_comm_last_error(comm, msg, sizeof msg);
  if (s != RELAY_INVALID_ARGUMENT) {
    fail("%s: got %s, want INVALID_ARGUMENT", what, relay_status_name(s));
  } else if (strstr(msg, message_part) == NULL) {
    fail("%s: message \"%s\" does not mention \"%s\"", what, msg,
         message_part);
  }
}

typedef struct {
  int calls;
  relay_status status;
} done_notice;

static void on_done(void* user_data, relay_status status) {
  done_notice* notice = (done_notice*)user_data;
  notice->calls++;
  notice->status = status;
}

/* The relay_call_options of a later API version: one more field. */
typedef struct {
  relay_call_options v1;
  int64_t future_field;
} call_options_v2;

static void check_contracts(relay_library* lib) {
  relay_store* store = NULL;
  relay_store_create_in_memory(lib, &store);
  relay_comm_options o = RELAY_COMM_OPTIONS_INIT;
  relay_comm* comm = NULL;
  if (relay_comm_create(lib, store, &o, &comm) != RELAY_OK) {
    fail("one-rank relay_comm_create");
    return;
  }
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
  relay_request* req = NULL;

  /* Bad input: nothing started, a message naming the problem. */
  expect_invalid(relay_all_reduce(comm, in, out, 8, (relay_dtype)42, RELAY_SUM,
                                  NULL, &req),
                 comm, "bad dtype", "dtype 42");
  if (req != NULL) fail("bad dtype left a request");
  expect_invalid(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32,
                                  (relay_op)9, NULL, &req),
                 comm, "bad op", "op 9");
  expect_invalid(relay_broadcast(comm, in, out, 8, RELAY_FLOAT32, 3, NULL,
                                 &req),
                 comm, "root out of range", "root 3");
  expect_invalid(relay_all_reduce(comm, in, in + 1, 4, RELAY_FLOAT32,
                                  RELAY_SUM, NULL, &req),
                 comm, "overlapping buffers", "overlap");
  expect_invalid(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32, RELAY_SUM,
                                  NULL, NULL),
                 comm, "NULL out", "NULL");
  expect_invalid(relay_send(comm, in, 8, RELAY_FLOAT32, 1, 0, NULL, &req),
                 comm, "peer out of range", "peer");
  relay_call_options bad_algorithm = RELAY_CALL_OPTIONS_INIT;
  bad_algorithm.algorithm = "no_such_algorithm";
  expect_invalid(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32, RELAY_SUM,
                                  &bad_algorithm, &req),
                 comm, "unknown algorithm", "no_such_algorithm");
  if (relay_all_reduce(NULL, in, out, 8, RELAY_FLOAT32, RELAY_SUM, NULL,
                       &req) != RELAY_INVALID_ARGUMENT) {
    fail("NULL communicator accepted");
  }
  if (out[0] != 0) fail("a refused call wrote the output");

  /* Option structs: a newer caller's zero tail is fine, a set field is
   * refused; an older caller's shorter struct gets the defaults. */
  call_options_v2 newer;
  memset(&newer, 0, sizeof newer);
  newer.v1 = (relay_call_options)RELAY_CALL_OPTIONS_INIT;
  newer.v1.struct_size = sizeof newer;
  newer.v1.algorithm = "ring";
  EXPECT_OK(run_and_wait(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32,
                                          RELAY_SUM, &newer.v1, &req),
                         &req),
            comm);
  if (out[7] != 8) fail("all_reduce with newer options: out[7] = %g", out[7]);
  newer.future_field = 5;
  expect_invalid(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32, RELAY_SUM,
                                  &newer.v1, &req),
                 comm, "unknown option field set", "does not know");
  relay_call_options older = RELAY_CALL_OPTIONS_INIT;
  older.struct_size = offsetof(relay_call_options, device);
  older.device = 0; /* beyond its size: must read as host memory */
  memset(out, 0, sizeof out);
  EXPECT_OK(run_and_wait(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32,
                                          RELAY_SUM, &older, &req),
                         &req),
            comm);
  if (out[3] != 4) fail("all_reduce with older options: out[3] = %g", out[3]);
  relay_call_options bad_order = RELAY_CALL_OPTIONS_INIT;
  bad_order.stream_order = 7;
  expect_invalid(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32, RELAY_SUM,
                                  &bad_order, &req),
                 comm, "unknown stream order", "stream_order");
  relay_call_options unset;
  memset(&unset, 0, sizeof unset);
  expect_invalid(relay_barrier(comm, &unset, &req), comm,
                 "struct_size 0", "struct_size");

  /* Completion notices, polling, and a host request's stream wait. */
  done_notice notice = {0, RELAY_UNKNOWN};
  EXPECT_OK(relay_all_reduce(comm, in, out, 8, RELAY_FLOAT32, RELAY_SUM, NULL,
                             &req),
            comm);
  if (req != NULL) {
    int done = 0;
    for (int i = 0; i < 100000 && !done; ++i) relay_request_test(req, &done);
    if (!done) fail("relay_request_test never saw a one-rank all_reduce end");
    relay_request_on_done(req, on_done, &notice);
    if (notice.calls != 1 || notice.status != RELAY_OK) {
      fail("on_done after completion: %d calls, status %s", notice.calls,
           relay_status_name(notice.status));
    }
    if (relay_request_stream_wait(req, NULL) != RELAY_UNIMPLEMENTED) {
      fail("stream wait on a host request did not say UNIMPLEMENTED");
    }
    relay_request_release(req);
  }

  /* Abort: later calls fail, with a message. */
  EXPECT_OK(relay_comm_abort(comm), comm);
  relay_status s = relay_barrier(comm, NULL, &req);
  if (s == RELAY_OK) {
    s = relay_request_wait(req, 1000);
    relay_request_release(req);
  }
  if (s != RELAY_FAILED_PRECONDITION && s != RELAY_CANCELLED) {
    fail("barrier after abort: %s", relay_status_name(s));
  }

  /* Store round trip, and a value larger than the buffer. */
  char value[4];
  size_t value_size = 0;
  relay_store_set(store, "greeting", "hello", 5);
  if (relay_store_get(store, "greeting", 1000, value, sizeof value,
                      &value_size) != RELAY_OUT_OF_RANGE ||
      value_size != 5) {
    fail("store get into a short buffer: size %zu", value_size);
  }
  int64_t counter = 0;
  relay_store_add(store, "n", 2, &counter);
  relay_store_add(store, "n", 3, &counter);
  if (counter != 5) fail("store add: %lld", (long long)counter);
  if (relay_store_get(store, "missing", 10, value, sizeof value,
                      &value_size) != RELAY_DEADLINE_EXCEEDED) {
    fail("store get of a missing key did not time out");
  }

  /* The library stays open while handles live. */
  if (relay_library_close(lib) != RELAY_FAILED_PRECONDITION) {
    fail("relay_library_close with live handles did not refuse");
  }
  relay_comm_destroy(comm);
  relay_store_release(store);
}

int main(void) {
  relay_library* lib = NULL;
  if (relay_library_open(RELAY_C_API_VERSION + 1, &lib) !=
      RELAY_FAILED_PRECONDITION) {
    fail("a newer API version was accepted");
  }
  if (relay_library_open(RELAY_C_API_VERSION, &lib) != RELAY_OK) {
    printf("FAIL: relay_library_open\n");
    return 1;
  }
  for (int size = 1; size <= 5; ++size) {
    run_world(lib, size);
    printf("%s: every collective on %d rank(s)\n",
           failures == 0 ? "ok" : "checked", size);
  }
  check_contracts(lib);
  if (relay_library_close(lib) != RELAY_OK) fail("relay_library_close");
  if (failures != 0) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
