/* File: embed/c/relay_c.h
 *
 * relay's stable C API: what librelay.so exports (and nothing else; see
 * relay_c.map). For programs in C, and for runtimes in other languages that
 * bind to C.
 *
 * Stability rules.
 *  - Handles are opaque pointers; their layout never reaches the caller.
 *  - Option structs start with `struct_size`, which the caller sets to
 *    sizeof(the struct as it compiled it) with the RELAY_*_INIT macros or the
 *    relay_*_options_init functions. A library newer than the caller reads
 *    only the fields the caller knows and defaults the rest; a library older
 *    than the caller accepts fields it does not know only while they are
 *    zero (their default), else returns RELAY_INVALID_ARGUMENT naming the
 *    offset. New fields are only ever appended.
 *  - Enum values and status codes never change meaning; new ones are
 *    appended.
 *  - RELAY_C_API_VERSION rises when functions are added; a library refuses
 *    (at relay_library_open) a caller built against a newer version.
 *
 * Errors. Every call returns a relay_status (the Abseil status codes:
 * RELAY_OK, RELAY_INVALID_ARGUMENT for bad input with nothing sent,
 * RELAY_DEADLINE_EXCEEDED, RELAY_UNAVAILABLE for a lost peer, ...). The
 * message of the most recent failure on a handle is copied out by
 * relay_*_last_error(handle, buf, size). A null handle gives
 * RELAY_INVALID_ARGUMENT with no message (there is no handle to keep it), as
 * does a null output of the const accessors relay_comm_rank/size; any other
 * null pointer gets a message on its handle.
 *
 * State. Nothing is global beyond what a relay_library owns: every store
 * and communicator is made through one, and relay_library_close refuses
 * (RELAY_FAILED_PRECONDITION) while any of them is still alive.
 *
 * Threads. Handles may be used from several threads at once, with the
 * same rules as the C++ API (one thread per rank on loopback; any thread
 * may wait on a request).
 *
 * Progress and notices. relay makes progress on its own threads: a host
 * runtime does not have to drive it, but relay_request_test makes progress
 * where the transport allows and never blocks, so an event loop can poll;
 * relay_request_on_done calls the host back (once, on some relay thread or
 * at once if already done) when an operation completes.
 *
 * Example (four ranks as threads of one process, on each thread r):
 *   relay_comm_options o = RELAY_COMM_OPTIONS_INIT;
 *   o.rank = r; o.size = 4;
 *   relay_comm* comm;
 *   if (relay_comm_create(lib, store, &o, &comm) != RELAY_OK) ...;
 *   relay_request* req;
 *   relay_all_reduce(comm, in, out, n, RELAY_FLOAT32, RELAY_SUM, NULL, &req);
 *   relay_status s = relay_request_wait(req, -1);
 *   relay_request_release(req);
 */
#ifndef RELAY_EMBED_C_RELAY_C_H_
#define RELAY_EMBED_C_RELAY_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RELAY_C_API_VERSION 1

/* The Abseil status codes, same numbers. */
typedef enum relay_status {
  RELAY_OK = 0,
  RELAY_CANCELLED = 1,
  RELAY_UNKNOWN = 2,
  RELAY_INVALID_ARGUMENT = 3,
  RELAY_DEADLINE_EXCEEDED = 4,
  RELAY_NOT_FOUND = 5,
  RELAY_ALREADY_EXISTS = 6,
  RELAY_PERMISSION_DENIED = 7,
  RELAY_RESOURCE_EXHAUSTED = 8,
  RELAY_FAILED_PRECONDITION = 9,
  RELAY_ABORTED = 10,
  RELAY_OUT_OF_RANGE = 11,
  RELAY_UNIMPLEMENTED = 12,
  RELAY_INTERNAL = 13,
  RELAY_UNAVAILABLE = 14,
  RELAY_DATA_LOSS = 15,
  RELAY_UNAUTHENTICATED = 16,
  /* Not a status: makes the enum int-sized, so any int a caller passes is
   * a value of the type (C++ reads others as undefined behaviour). */
  RELAY_STATUS_MAX_ENUM = 0x7fffffff
} relay_status;

typedef enum relay_dtype {
  RELAY_INT8 = 0,
  RELAY_UINT8 = 1,
  RELAY_INT32 = 2,
  RELAY_UINT32 = 3,
  RELAY_INT64 = 4,
  RELAY_UINT64 = 5,
  RELAY_FLOAT16 = 6,
  RELAY_BFLOAT16 = 7,
  RELAY_FLOAT32 = 8,
  RELAY_FLOAT64 = 9,
  RELAY_DTYPE_MAX_ENUM = 0x7fffffff /* not a type; see RELAY_STATUS_MAX_ENUM */
} relay_dtype;

typedef enum relay_op {
  RELAY_SUM = 0,
  RELAY_PROD = 1,
  RELAY_MIN = 2,
  RELAY_MAX = 3,
  RELAY_AVG = 4,
  RELAY_OP_MAX_ENUM = 0x7fffffff /* not an op; see RELAY_STATUS_MAX_ENUM */
} relay_op;

typedef struct relay_library relay_library;
typedef struct relay_store relay_store;
typedef struct relay_comm relay_comm;
typedef struct relay_request relay_request;

/* ---- Library ------------------------------------------------------------ */

/* The API version this library implements. */
uint32_t relay_api_version(void);
/* "OK", "INVALID_ARGUMENT", ...; "UNKNOWN_STATUS" for other values. */
const char* relay_status_name(relay_status status);

/* Pass RELAY_C_API_VERSION: a caller built against a newer API than the
 * library gets RELAY_FAILED_PRECONDITION. */
relay_status relay_library_open(uint32_t api_version, relay_library** out);
/* RELAY_FAILED_PRECONDITION (and nothing closed) while stores or
 * communicators made through it are alive. */
relay_status relay_library_close(relay_library* lib);
/* Copies the message of the most recent failure on `lib` into buf (always
 * NUL-terminated when size > 0) and returns its full length, as snprintf
 * does; 0 when none. */
size_t relay_library_last_error(const relay_library* lib, char* buf,
                                size_t size);

/* ---- Store: rendezvous key-value store ----------------------------------- */

/* A store in this process, for ranks that are threads of it. */
relay_status relay_store_create_in_memory(relay_library* lib,
                                          relay_store** out);

typedef struct relay_tcp_store_options {
  size_t struct_size;
  const char* host; /* NULL: "127.0.0.1" */
  int port;         /* host: 0 picks a free one (relay_store_port) */
  int is_host;      /* nonzero: start the server here and connect to it */
  const char* token; /* the job token both sides must know; NULL: none */
  int64_t connect_timeout_ms; /* 0: 60 s */
} relay_tcp_store_options;
#define RELAY_TCP_STORE_OPTIONS_INIT \
  { sizeof(relay_tcp_store_options), NULL, 0, 0, NULL, 0 }

/* relay's TCP store (runtime/bootstrap/tcp_store.h), for ranks that are
 * processes: one of them hosts it, the others connect. */
relay_status relay_store_create_tcp(relay_library* lib,
                                    const relay_tcp_store_options* options,
                                    relay_store** out);
/* The port a TCP store listens on or connects to (0 for other stores). */
relay_status relay_store_port(relay_store* store, int* port);
/* A view of `base` under `prefix`, so several groups share one store. */
relay_status relay_store_create_prefix(relay_store* base, const char* prefix,
                                       relay_store** out);
relay_status relay_store_set(relay_store* store, const char* key,
                             const void* value, size_t size);
/* Waits up to timeout_ms (< 0: 5 minutes) for `key`. Copies at most
 * buf_size bytes of the value into buf and sets *value_size to its full
 * size; RELAY_OUT_OF_RANGE if it did not fit (call again with a larger
 * buffer). */
relay_status relay_store_get(relay_store* store, const char* key,
                             int64_t timeout_ms, void* buf, size_t buf_size,
                             size_t* value_size);
/* Atomically adds `delta` to the integer at `key` (0 when unset). */
relay_status relay_store_add(relay_store* store, const char* key,
                             int64_t delta, int64_t* result);
/* Communicators made with the store keep what they need of it alive. */
relay_status relay_store_release(relay_store* store);
size_t relay_store_last_error(const relay_store* store, char* buf,
                              size_t size);

/* ---- Communicator ------------------------------------------------------ */

typedef struct relay_comm_options {
  size_t struct_size;
  int rank;
  int size;
  /* A registered transport ("loopback", "ucx", "nccl"); NULL or "": the
   * default (loopback for threads; for relay_comm_create_from_environment
   * RELAY_TRANSPORT, else ucx). */
  const char* transport;
  /* Default bound on every operation, in ms; 0: relay's default (10 min). */
  int64_t timeout_ms;
} relay_comm_options;
#define RELAY_COMM_OPTIONS_INIT \
  { sizeof(relay_comm_options), 0, 1, NULL, 0 }

/* Every rank of the group calls it with the same store. */
relay_status relay_comm_create(relay_library* lib, relay_store* store,
                               const relay_comm_options* options,
                               relay_comm** out);
/* This process's communicator from its launcher's variables (relayrun,
 * torchrun, mpirun, srun); options->rank and size are ignored (the
 * environment has them); options may be NULL. */
relay_status relay_comm_create_from_environment(
    relay_library* lib, const relay_comm_options* options, relay_comm** out);
relay_status relay_comm_rank(const relay_comm* comm, int* rank);
relay_status relay_comm_size(const relay_comm* comm, int* size);
/* Collective over the group: ranks with the same color form a new
 * communicator, ordered by key (then by old rank). A negative color gives
 * *out == NULL (the rank joins none). */
relay_status relay_comm_split(relay_comm* comm, int color, int key,
                              relay_comm** out);
/* Fails every outstanding and later operation; peers learn of it. */
relay_status relay_comm_abort(relay_comm* comm);
/* Frees the communicator; outstanding requests keep what they need. */
relay_status relay_comm_destroy(relay_comm* comm);
size_t relay_comm_last_error(const relay_comm* comm, char* buf, size_t size);

/* ---- Operations -------------------------------------------------------- */

/* Per-call options; NULL means all defaults. */
typedef struct relay_call_options {
  size_t struct_size;
  int64_t timeout_ms;    /* 0: the communicator's default */
  const char* algorithm; /* NULL: auto; "ring", "recursive_doubling", ... */
  int device;            /* buffers in: < 0 or RELAY_HOST host memory,
                            >= 0 that CUDA device (default host) */
  void* stream;          /* cudaStream_t for device buffers; NULL: default */
  int stream_order;      /* device buffers: RELAY_AFTER_STREAM (default):
                            starts after `stream`'s work, later work there
                            does not wait (relay_request_stream_wait does);
                            RELAY_ON_STREAM: queued on `stream` itself, as
                            NCCL's calls, so later work there waits */
} relay_call_options;
#define RELAY_HOST (-1)
#define RELAY_AFTER_STREAM 0
#define RELAY_ON_STREAM 1
#define RELAY_CALL_OPTIONS_INIT \
  { sizeof(relay_call_options), 0, NULL, RELAY_HOST, NULL, RELAY_AFTER_STREAM }

/* Collective: every rank registers `bytes` of memory at `data` (on the
 * device options->device names) as a symmetric window, as
 * ncclCommWindowRegister does; the sizes must match. Collectives whose
 * receive buffers lie in windows at the same offset on every rank may
 * then store straight into the peers' buffers (cuda_ipc: all_gather from
 * 32 MiB). Of the options only timeout_ms and device apply.
 * RELAY_UNIMPLEMENTED where the transport has no windows (all but
 * cuda_ipc); RELAY_INVALID_ARGUMENT on every rank when one refuses its
 * region. relay_comm_deregister_window, collective too, removes the
 * window at `data` once every rank's earlier calls are done with it. */
relay_status relay_comm_register_window(relay_comm* comm, void* data, size_t bytes,
                                        const relay_call_options* options);
relay_status relay_comm_deregister_window(relay_comm* comm, void* data,
                                          const relay_call_options* options);

/* Every operation validates its input first (RELAY_INVALID_ARGUMENT,
 * nothing sent), then starts and returns a request in *out, which the
 * caller releases. Buffers must stay valid until the request completes.
 * In place: send == recv (for all_gather, send == recv + rank * count; for
 * reduce_scatter, recv == send + rank * count). Counts are elements. */
relay_status relay_all_reduce(relay_comm* comm, const void* send, void* recv,
                              size_t count, relay_dtype dtype, relay_op op,
                              const relay_call_options* options,
                              relay_request** out);
/* recv matters at the root only (may be NULL elsewhere). */
relay_status relay_reduce(relay_comm* comm, const void* send, void* recv,
                          size_t count, relay_dtype dtype, relay_op op,
                          int root, const relay_call_options* options,
                          relay_request** out);
/* send matters at the root only (may be NULL elsewhere). */
relay_status relay_broadcast(relay_comm* comm, const void* send, void* recv,
                             size_t count, relay_dtype dtype, int root,
                             const relay_call_options* options,
                             relay_request** out);
/* recv holds send_count x size elements, rank r's block at r * send_count. */
relay_status relay_all_gather(relay_comm* comm, const void* send, void* recv,
                              size_t send_count, relay_dtype dtype,
                              const relay_call_options* options,
                              relay_request** out);
/* send holds recv_count x size elements; rank r gets block r reduced. */
relay_status relay_reduce_scatter(relay_comm* comm, const void* send,
                                  void* recv, size_t recv_count,
                                  relay_dtype dtype, relay_op op,
                                  const relay_call_options* options,
                                  relay_request** out);
/* recv (send_count x size elements) matters at the root only. */
relay_status relay_gather(relay_comm* comm, const void* send, void* recv,
                          size_t send_count, relay_dtype dtype, int root,
                          const relay_call_options* options,
                          relay_request** out);
/* send (recv_count x size elements) matters at the root only. */
relay_status relay_scatter(relay_comm* comm, const void* send, void* recv,
                           size_t recv_count, relay_dtype dtype, int root,
                           const relay_call_options* options,
                           relay_request** out);
/* send and recv hold count_per_rank x size elements; block j of send goes
 * to rank j, block i of recv comes from rank i. */
relay_status relay_all_to_all(relay_comm* comm, const void* send, void* recv,
                              size_t count_per_rank, relay_dtype dtype,
                              const relay_call_options* options,
                              relay_request** out);
relay_status relay_barrier(relay_comm* comm, const relay_call_options* options,
                           relay_request** out);
/* Counts: the collectives above take per-rank counts (NCCL's convention),
 * where relay's C++ Buffer carries each buffer's total element count; the
 * two describe the same call (an all_gather of n per rank here is a C++
 * recv Buffer of n x size). */
/* Point to point; messages between a pair with one tag arrive in order.
 * 0 <= tag <= RELAY_MAX_TAG on every transport, else RELAY_INVALID_ARGUMENT. */
#define RELAY_MAX_TAG ((int64_t)((INT64_C(1) << 43) - 1))
relay_status relay_send(relay_comm* comm, const void* data, size_t count,
                        relay_dtype dtype, int peer, int64_t tag,
                        const relay_call_options* options,
                        relay_request** out);
relay_status relay_recv(relay_comm* comm, void* data, size_t count,
                        relay_dtype dtype, int peer, int64_t tag,
                        const relay_call_options* options,
                        relay_request** out);

/* ---- Requests ---------------------------------------------------------- */

/* Blocks until the operation completes and returns its status, or
 * RELAY_DEADLINE_EXCEEDED after timeout_ms (< 0: the operation's own
 * deadline); the operation goes on after a wait times out. */
relay_status relay_request_wait(relay_request* request, int64_t timeout_ms);
/* Never blocks: *done = 1 and the operation's status once it completed,
 * else *done = 0 and RELAY_OK. */
relay_status relay_request_test(relay_request* request, int* done);
/* Calls fn(user_data, status) once when the operation completes: on a relay
 * thread, or on this one before returning if it already has. fn must not
 * block on other relay operations. */
typedef void (*relay_done_fn)(void* user_data, relay_status status);
relay_status relay_request_on_done(relay_request* request, relay_done_fn fn,
                                   void* user_data);
/* Device operations: makes `stream` (a cudaStream_t) wait for the
 * operation's GPU work without blocking the host. RELAY_UNIMPLEMENTED for
 * host operations. */
relay_status relay_request_stream_wait(relay_request* request, void* stream);
/* Releasing before completion is allowed: the operation goes on, its
 * buffers must stay valid until it ends. */
relay_status relay_request_release(relay_request* request);
size_t relay_request_last_error(const relay_request* request, char* buf,
                                size_t size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RELAY_EMBED_C_RELAY_C_H_ */
