// File: embed/c/relay_c.cc
//
// The C API (relay_c.h) over relay's C++ API: handles wrap the C++ objects,
// option structs are read by their struct_size, and every absl::Status
// becomes a relay_status with its message kept on the handle.
#include "embed/c/relay_c.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "relay.h"
#include "runtime/bootstrap/tcp_store.h"

namespace {

// The message of a handle's latest failure. Several threads may fail on one
// handle; the last writer wins, and readers copy under the lock.
class LastError {
 public:
  relay_status Record(const absl::Status& status) {
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      message_ = status.ToString();
    }
    return static_cast<relay_status>(status.code());
  }
  size_t CopyTo(char* buf, size_t size) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (buf != nullptr && size > 0) {
      const size_t n = std::min(size - 1, message_.size());
      std::memcpy(buf, message_.data(), n);
      buf[n] = '\0';
    }
    return message_.size();
  }

 private:
  mutable std::mutex mu_;
  std::string message_;
};

static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              RELAY_UNAUTHENTICATED);
static_assert(static_cast<int>(relay::DataType::kFloat64) == RELAY_FLOAT64);
static_assert(static_cast<int>(relay::ReduceOp::kAvg) == RELAY_AVG);

// Reads a caller's option struct of (its) size `struct_size` into `out`,
// which holds the defaults: fields the caller's struct lacks keep them, and
// fields this library lacks must be zero.
template <typename Options>
absl::Status ReadOptions(const Options* in, const char* name, Options* out) {
  if (in == nullptr) return absl::OkStatus();
  const size_t given = in->struct_size;
  if (given < sizeof(size_t) || given > (1u << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ".struct_size is ", given,
                     ": set it with the RELAY_*_INIT macro"));
  }
  const size_t known = sizeof(Options);
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = known; i < given; ++i) {
    if (bytes[i] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " sets a field at byte ", i,
          " that this relay library (C API version ", RELAY_C_API_VERSION,
          ", struct size ", known, ") does not know"));
    }
  }
  std::memcpy(static_cast<void*>(out), in, std::min(given, known));
  out->struct_size = known;
  return absl::OkStatus();
}

absl::Duration MillisOr(int64_t ms, absl::Duration otherwise) {
  return ms > 0 ? absl::Milliseconds(ms) : otherwise;
}

constexpr relay_status kNullArgument = RELAY_INVALID_ARGUMENT;

}  // namespace

struct relay_library {
  // Stores and communicators made through this library and not yet freed.
  std::atomic<int> live{0};
  LastError error;
};

struct relay_store {
  relay_library* lib;
  std::shared_ptr<relay::Store> store;
  int port = 0;
  LastError error;
};

struct relay_comm {
  relay_library* lib;
  std::unique_ptr<relay::Communicator> comm;
  LastError error;
};

struct relay_request {
  relay::Request request;
  LastError error;
};

namespace {

relay_store* NewStore(relay_library* lib, std::shared_ptr<relay::Store> store,
                      int port) {
  lib->live.fetch_add(1);
  return new relay_store{lib, std::move(store), port, {}};
}

relay_comm* NewComm(relay_library* lib,
                    std::unique_ptr<relay::Communicator> comm) {
  lib->live.fetch_add(1);
  return new relay_comm{lib, std::move(comm), {}};
}

// The C++ options of one call; InvalidArgument for a bad struct or name.
absl::StatusOr<relay::CollectiveOptions> CallOptions(
    const relay_call_options* in, relay::Device* device) {
  relay_call_options o = RELAY_CALL_OPTIONS_INIT;
  absl::Status s = ReadOptions(in, "relay_call_options", &o);
  if (!s.ok()) return s;
  relay::CollectiveOptions options;
  options.timeout = MillisOr(o.timeout_ms, absl::ZeroDuration());
  if (o.timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay_call_options.timeout_ms is ", o.timeout_ms,
                     "; want 0 (the default) or more"));
  }
  if (o.algorithm != nullptr && o.algorithm[0] != '\0') {
    absl::StatusOr<relay::Algorithm> a = relay::ParseAlgorithm(o.algorithm);
    if (!a.ok()) return a.status();
    options.algorithm = *a;
  }
  options.stream = o.stream;
  if (o.stream_order != RELAY_AFTER_STREAM && o.stream_order != RELAY_ON_STREAM) {
    return absl::InvalidArgumentError(absl::StrCat(
        "relay_call_options.stream_order is ", o.stream_order,
        "; want RELAY_AFTER_STREAM (0) or RELAY_ON_STREAM (1)"));
  }
  options.stream_order = o.stream_order == RELAY_ON_STREAM
                             ? relay::StreamOrder::kOnStream
                             : relay::StreamOrder::kAfterStream;
  *device = o.device < 0 ? relay::Device::Host() : relay::Device::Cuda(o.device);
  return options;
}

absl::Status CheckTypes(relay_dtype dtype, relay_op op) {
  if (!relay::IsValid(static_cast<relay::DataType>(dtype))) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", static_cast<int>(dtype), " is not a relay_dtype"));
  }
  if (!relay::IsValid(static_cast<relay::ReduceOp>(op))) {
    return absl::InvalidArgumentError(
        absl::StrCat("op ", static_cast<int>(op), " is not a relay_op"));
  }
  return absl::OkStatus();
}

// Every operation's common part: checks the handle, the output pointer,
// the types and the per-call options, then posts through `post(device,
// options)` and hands out the request.
template <typename Post>
relay_status StartOp(relay_comm* comm, relay_dtype dtype, relay_op op,
                     const relay_call_options* options, relay_request** out,
                     Post post) {
  if (comm == nullptr) return kNullArgument;
  if (out == nullptr) {
    return comm->error.Record(
        absl::InvalidArgumentError("out (the request pointer) is NULL"));
  }
  *out = nullptr;
  absl::Status s = CheckTypes(dtype, op);
  if (!s.ok()) return comm->error.Record(s);
  relay::Device device;
  absl::StatusOr<relay::CollectiveOptions> o = CallOptions(options, &device);
  if (!o.ok()) return comm->error.Record(o.status());
  absl::StatusOr<relay::Request> r = post(device, *o);
  if (!r.ok()) return comm->error.Record(r.status());
  *out = new relay_request{std::move(*r), {}};
  return RELAY_OK;
}

// Which of a collective's buffers holds one block of `count` per rank.
enum class PerRank { kNeither, kSend, kRecv, kBoth };

// One collective from the C counts: `count` elements, or count x ranks in
// the buffers `per_rank` names (the C++ API takes buffer lengths).
struct CallShape {
  relay::CollectiveKind kind;
  const void* send;
  void* recv;
  size_t count;
  PerRank per_rank;
  relay_dtype dtype;
  relay_op op;
  int root;
};

relay_status StartCollective(relay_comm* comm, const CallShape& call,
                             const relay_call_options* options,
                             relay_request** out) {
  return StartOp(
      comm, call.dtype, call.op, options, out,
      [&](relay::Device device, const relay::CollectiveOptions& o)
          -> absl::StatusOr<relay::Request> {
        const int ranks = comm->comm->size();
        size_t blocks = 0;
        if (__builtin_mul_overflow(call.count, static_cast<size_t>(ranks),
                                   &blocks)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "count ", call.count, " x ", ranks, " ranks overflows"));
        }
        const bool send_blocks =
            call.per_rank == PerRank::kSend || call.per_rank == PerRank::kBoth;
        const bool recv_blocks =
            call.per_rank == PerRank::kRecv || call.per_rank == PerRank::kBoth;
        const auto dtype = static_cast<relay::DataType>(call.dtype);
        return comm->comm->Collective(
            call.kind,
            relay::ConstBuffer{call.send, send_blocks ? blocks : call.count,
                               dtype, device},
            relay::Buffer{call.recv, recv_blocks ? blocks : call.count, dtype,
                          device},
            static_cast<relay::ReduceOp>(call.op), call.root, o);
      });
}

}  // namespace

extern "C" {

uint32_t relay_api_version(void) { return RELAY_C_API_VERSION; }

const char* relay_status_name(relay_status status) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",          "UNKNOWN",
      "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED",     "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",          "UNAVAILABLE",
      "DATA_LOSS",    "UNAUTHENTICATED"};
  const int i = static_cast<int>(status);
  if (i < 0 || i >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) {
    return "UNKNOWN_STATUS";
  }
  return kNames[i];
}

relay_status relay_library_open(uint32_t api_version, relay_library** out) {
  if (out == nullptr) return kNullArgument;
  *out = nullptr;
  if (api_version == 0 || api_version > RELAY_C_API_VERSION) {
    return RELAY_FAILED_PRECONDITION;
  }
  *out = new relay_library;
  return RELAY_OK;
}

relay_status relay_library_close(relay_library* lib) {
  if (lib == nullptr) return kNullArgument;
  const int live = lib->live.load();
  if (live != 0) {
    return lib->error.Record(absl::FailedPreconditionError(absl::StrCat(
        live, " store(s) or communicator(s) made through this library are "
              "still alive; release them first")));
  }
  delete lib;
  return RELAY_OK;
}

size_t relay_library_last_error(const relay_library* lib, char* buf,
                                size_t size) {
  if (buf != nullptr && size > 0) buf[0] = '\0';
  return lib == nullptr ? 0 : lib->error.CopyTo(buf, size);
}

// ---- Store -----------------------------------------------------------------

relay_status relay_store_create_in_memory(relay_library* lib,
                                          relay_store** out) {
  if (lib == nullptr) return kNullArgument;
  if (out == nullptr) {
    return lib->error.Record(absl::InvalidArgumentError("out is NULL"));
  }
  *out = NewStore(lib, std::make_shared<relay::InMemoryStore>(), 0);
  return RELAY_OK;
}

relay_status relay_store_create_tcp(relay_library* lib,
                                    const relay_tcp_store_options* options,
                                    relay_store** out) {
  if (lib == nullptr) return kNullArgument;
  if (out == nullptr || options == nullptr) {
    return lib->error.Record(
        absl::InvalidArgumentError("options or out is NULL"));
  }
  *out = nullptr;
  relay_tcp_store_options o = RELAY_TCP_STORE_OPTIONS_INIT;
  absl::Status s = ReadOptions(options, "relay_tcp_store_options", &o);
  if (!s.ok()) return lib->error.Record(s);
  if (o.port < 0 || o.port > 65535 || (o.port == 0 && !o.is_host)) {
    return lib->error.Record(absl::InvalidArgumentError(absl::StrCat(
        "port ", o.port, " is not a port to ",
        o.is_host ? "listen on (0-65535)" : "connect to (1-65535)")));
  }
  relay::TcpStoreOptions tcp;
  if (o.host != nullptr) tcp.host = o.host;
  tcp.port = o.port;
  if (o.token != nullptr) tcp.token = o.token;
  tcp.connect_timeout = MillisOr(o.connect_timeout_ms, tcp.connect_timeout);
  absl::StatusOr<std::shared_ptr<relay::TcpStore>> store =
      o.is_host ? relay::TcpStore::Host(tcp) : relay::TcpStore::Connect(tcp);
  if (!store.ok()) return lib->error.Record(store.status());
  const int port = (*store)->port();
  *out = NewStore(lib, std::move(*store), port);
  return RELAY_OK;
}

relay_status relay_store_port(relay_store* store, int* port) {
  if (store == nullptr) return kNullArgument;
  if (port == nullptr) {
    return store->error.Record(absl::InvalidArgumentError("port is NULL"));
  }
  *port = store->port;
  return RELAY_OK;
}

relay_status relay_store_create_prefix(relay_store* base, const char* prefix,
                                       relay_store** out) {
  if (base == nullptr) return kNullArgument;
  if (prefix == nullptr || out == nullptr) {
    return base->error.Record(
        absl::InvalidArgumentError("prefix or out is NULL"));
  }
  *out = NewStore(base->lib,
                  std::make_shared<relay::PrefixStore>(base->store, prefix),
                  base->port);
  return RELAY_OK;
}

relay_status relay_store_set(relay_store* store, const char* key,
                             const void* value, size_t size) {
  if (store == nullptr) return kNullArgument;
  if (key == nullptr || (value == nullptr && size > 0)) {
    return store->error.Record(
        absl::InvalidArgumentError("key or value is NULL"));
  }
  return store->error.Record(store->store->Set(
      key, absl::string_view(static_cast<const char*>(value), size)));
}

relay_status relay_store_get(relay_store* store, const char* key,
                             int64_t timeout_ms, void* buf, size_t buf_size,
                             size_t* value_size) {
  if (store == nullptr) return kNullArgument;
  if (key == nullptr || value_size == nullptr || (buf == nullptr && buf_size)) {
    return store->error.Record(
        absl::InvalidArgumentError("key, buf or value_size is NULL"));
  }
  absl::StatusOr<std::string> value = store->store->Get(
      key, timeout_ms < 0 ? absl::Minutes(5) : absl::Milliseconds(timeout_ms));
  if (!value.ok()) return store->error.Record(value.status());
  *value_size = value->size();
  if (value->size() > 0 && buf != nullptr) {
    std::memcpy(buf, value->data(), std::min(buf_size, value->size()));
  }
  if (value->size() > buf_size) {
    return store->error.Record(absl::OutOfRangeError(
        absl::StrCat("the value of ", key, " has ", value->size(),
                     " bytes; the buffer holds ", buf_size)));
  }
  return RELAY_OK;
}

relay_status relay_store_add(relay_store* store, const char* key,
                             int64_t delta, int64_t* result) {
  if (store == nullptr) return kNullArgument;
  if (key == nullptr) {
    return store->error.Record(absl::InvalidArgumentError("key is NULL"));
  }
  absl::StatusOr<int64_t> sum = store->store->Add(key, delta);
  if (!sum.ok()) return store->error.Record(sum.status());
  if (result != nullptr) *result = *sum;
  return RELAY_OK;
}

relay_status relay_store_release(relay_store* store) {
  if (store == nullptr) return kNullArgument;
  store->lib->live.fetch_sub(1);
  delete store;
  return RELAY_OK;
}

size_t relay_store_last_error(const relay_store* store, char* buf,
                              size_t size) {
  if (buf != nullptr && size > 0) buf[0] = '\0';
  return store == nullptr ? 0 : store->error.CopyTo(buf, size);
}

// ---- Communicator ------------------------------------------------------------

namespace {

absl::StatusOr<relay::CommunicatorOptions> CommOptions(
    const relay_comm_options& o) {
  if (o.timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("relay_comm_options.timeout_ms is ", o.timeout_ms,
                     "; want 0 (the default) or more"));
  }
  relay::CommunicatorOptions options;
  options.default_timeout = MillisOr(o.timeout_ms, options.default_timeout);
  return options;
}

}  // namespace

relay_status relay_comm_create(relay_library* lib, relay_store* store,
                               const relay_comm_options* options,
                               relay_comm** out) {
  if (lib == nullptr) return kNullArgument;
  if (store == nullptr || options == nullptr || out == nullptr) {
    return lib->error.Record(
        absl::InvalidArgumentError("store, options or out is NULL"));
  }
  *out = nullptr;
  relay_comm_options o = RELAY_COMM_OPTIONS_INIT;
  absl::Status s = ReadOptions(options, "relay_comm_options", &o);
  if (!s.ok()) return lib->error.Record(s);
  absl::StatusOr<relay::CommunicatorOptions> comm_options = CommOptions(o);
  if (!comm_options.ok()) return lib->error.Record(comm_options.status());
  relay::CommunicatorConfig config;
  config.rank = o.rank;
  config.size = o.size;
  config.store = store->store;
  if (o.transport != nullptr) config.transport = o.transport;
  config.options = *comm_options;
  absl::StatusOr<std::unique_ptr<relay::Communicator>> comm =
      relay::CreateCommunicator(config);
  if (!comm.ok()) return lib->error.Record(comm.status());
  *out = NewComm(lib, std::move(*comm));
  return RELAY_OK;
}

relay_status relay_comm_create_from_environment(
    relay_library* lib, const relay_comm_options* options, relay_comm** out) {
  if (lib == nullptr) return kNullArgument;
  if (out == nullptr) {
    return lib->error.Record(absl::InvalidArgumentError("out is NULL"));
  }
  *out = nullptr;
  relay_comm_options o = RELAY_COMM_OPTIONS_INIT;
  absl::Status s = ReadOptions(options, "relay_comm_options", &o);
  if (!s.ok()) return lib->error.Record(s);
  absl::StatusOr<relay::CommunicatorOptions> comm_options = CommOptions(o);
  if (!comm_options.ok()) return lib->error.Record(comm_options.status());
  absl::StatusOr<std::unique_ptr<relay::Communicator>> comm =
      relay::CreateCommunicatorFromEnvironment(
          *comm_options, absl::Minutes(2),
          o.transport != nullptr ? o.transport : "");
  if (!comm.ok()) return lib->error.Record(comm.status());
  *out = NewComm(lib, std::move(*comm));
  return RELAY_OK;
}

relay_status relay_comm_rank(const relay_comm* comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return kNullArgument;
  *rank = comm->comm->rank();
  return RELAY_OK;
}

relay_status relay_comm_size(const relay_comm* comm, int* size) {
  if (comm == nullptr || size == nullptr) return kNullArgument;
  *size = comm->comm->size();
  return RELAY_OK;
}

relay_status relay_comm_split(relay_comm* comm, int color, int key,
                              relay_comm** out) {
  if (comm == nullptr) return kNullArgument;
  if (out == nullptr) {
    return comm->error.Record(absl::InvalidArgumentError("out is NULL"));
  }
  *out = nullptr;
  absl::StatusOr<std::unique_ptr<relay::Communicator>> part =
      comm->comm->Split(color, key);
  if (!part.ok()) return comm->error.Record(part.status());
  if (*part != nullptr) *out = NewComm(comm->lib, std::move(*part));
  return RELAY_OK;
}

relay_status relay_comm_register_window(relay_comm* comm, void* data, size_t bytes,
                                        const relay_call_options* options) {
  if (comm == nullptr) return kNullArgument;
  relay::Device device;
  absl::StatusOr<relay::CollectiveOptions> o = CallOptions(options, &device);
  if (!o.ok()) return comm->error.Record(o.status());
  return comm->error.Record(comm->comm->RegisterWindow(
      relay::Buffer{data, bytes, relay::DataType::kUint8, device}, *o));
}

relay_status relay_comm_deregister_window(relay_comm* comm, void* data,
                                          const relay_call_options* options) {
  if (comm == nullptr) return kNullArgument;
  relay::Device device;
  absl::StatusOr<relay::CollectiveOptions> o = CallOptions(options, &device);
  if (!o.ok()) return comm->error.Record(o.status());
  return comm->error.Record(comm->comm->DeregisterWindow(data, *o));
}

relay_status relay_comm_abort(relay_comm* comm) {
  if (comm == nullptr) return kNullArgument;
  return comm->error.Record(
      comm->comm->Abort(absl::CancelledError("aborted through the C API")));
}

relay_status relay_comm_destroy(relay_comm* comm) {
  if (comm == nullptr) return kNullArgument;
  relay_library* lib = comm->lib;
  delete comm;
  lib->live.fetch_sub(1);
  return RELAY_OK;
}

size_t relay_comm_last_error(const relay_comm* comm, char* buf, size_t size) {
  if (buf != nullptr && size > 0) buf[0] = '\0';
  return comm == nullptr ? 0 : comm->error.CopyTo(buf, size);
}

// ---- Operations ------------------------------------------------------------

relay_status relay_all_reduce(relay_comm* comm, const void* send, void* recv,
                              size_t count, relay_dtype dtype, relay_op op,
                              const relay_call_options* options,
                              relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kAllReduce, send, recv, count,
                          PerRank::kNeither, dtype, op, 0},
                         options, out);
}

relay_status relay_reduce(relay_comm* comm, const void* send, void* recv,
                          size_t count, relay_dtype dtype, relay_op op,
                          int root, const relay_call_options* options,
                          relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kReduce, send, recv, count,
                          PerRank::kNeither, dtype, op, root},
                         options, out);
}

relay_status relay_broadcast(relay_comm* comm, const void* send, void* recv,
                             size_t count, relay_dtype dtype, int root,
                             const relay_call_options* options,
                             relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kBroadcast, send, recv, count,
                          PerRank::kNeither, dtype, RELAY_SUM, root},
                         options, out);
}

relay_status relay_all_gather(relay_comm* comm, const void* send, void* recv,
                              size_t send_count, relay_dtype dtype,
                              const relay_call_options* options,
                              relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kAllGather, send, recv,
                          send_count, PerRank::kRecv, dtype, RELAY_SUM, 0},
                         options, out);
}

relay_status relay_reduce_scatter(relay_comm* comm, const void* send,
                                  void* recv, size_t recv_count,
                                  relay_dtype dtype, relay_op op,
                                  const relay_call_options* options,
                                  relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kReduceScatter, send, recv,
                          recv_count, PerRank::kSend, dtype, op, 0},
                         options, out);
}

relay_status relay_gather(relay_comm* comm, const void* send, void* recv,
                          size_t send_count, relay_dtype dtype, int root,
                          const relay_call_options* options,
                          relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kGather, send, recv,
                          send_count, PerRank::kRecv, dtype, RELAY_SUM, root},
                         options, out);
}

relay_status relay_scatter(relay_comm* comm, const void* send, void* recv,
                           size_t recv_count, relay_dtype dtype, int root,
                           const relay_call_options* options,
                           relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kScatter, send, recv,
                          recv_count, PerRank::kSend, dtype, RELAY_SUM, root},
                         options, out);
}

relay_status relay_all_to_all(relay_comm* comm, const void* send, void* recv,
                              size_t count_per_rank, relay_dtype dtype,
                              const relay_call_options* options,
                              relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kAllToAll, send, recv,
                          count_per_rank, PerRank::kBoth, dtype, RELAY_SUM, 0},
                         options, out);
}

relay_status relay_barrier(relay_comm* comm, const relay_call_options* options,
                           relay_request** out) {
  return StartCollective(comm,
                         {relay::CollectiveKind::kBarrier, nullptr, nullptr, 0,
                          PerRank::kNeither, RELAY_UINT8, RELAY_SUM, 0},
                         options, out);
}

relay_status relay_send(relay_comm* comm, const void* data, size_t count,
                        relay_dtype dtype, int peer, int64_t tag,
                        const relay_call_options* options,
                        relay_request** out) {
  return StartOp(comm, dtype, RELAY_SUM, options, out,
                 [&](relay::Device device, const relay::CollectiveOptions& o) {
                   return comm->comm->Send(
                       relay::ConstBuffer{data, count,
                                          static_cast<relay::DataType>(dtype),
                                          device},
                       peer, tag, o);
                 });
}

relay_status relay_recv(relay_comm* comm, void* data, size_t count,
                        relay_dtype dtype, int peer, int64_t tag,
                        const relay_call_options* options,
                        relay_request** out) {
  return StartOp(comm, dtype, RELAY_SUM, options, out,
                 [&](relay::Device device, const relay::CollectiveOptions& o) {
                   return comm->comm->Recv(
                       relay::Buffer{data, count,
                                     static_cast<relay::DataType>(dtype),
                                     device},
                       peer, tag, o);
                 });
}

// ---- Requests ---------------------------------------------------------------

relay_status relay_request_wait(relay_request* request, int64_t timeout_ms) {
  if (request == nullptr) return kNullArgument;
  return request->error.Record(
      timeout_ms < 0 ? request->request.Wait()
                     : request->request.Wait(absl::Milliseconds(timeout_ms)));
}

relay_status relay_request_test(relay_request* request, int* done) {
  if (request == nullptr) return kNullArgument;
  if (done == nullptr) {
    return request->error.Record(absl::InvalidArgumentError("done is NULL"));
  }
  *done = request->request.Test() ? 1 : 0;
  return *done ? request->error.Record(request->request.status()) : RELAY_OK;
}

relay_status relay_request_on_done(relay_request* request, relay_done_fn fn,
                                   void* user_data) {
  if (request == nullptr) return kNullArgument;
  if (fn == nullptr) {
    return request->error.Record(absl::InvalidArgumentError("fn is NULL"));
  }
  request->request.OnDone([fn, user_data](absl::Status status) {
    fn(user_data, static_cast<relay_status>(status.code()));
  });
  return RELAY_OK;
}

relay_status relay_request_stream_wait(relay_request* request, void* stream) {
  if (request == nullptr) return kNullArgument;
  return request->error.Record(request->request.StreamWait(stream));
}

relay_status relay_request_release(relay_request* request) {
  if (request == nullptr) return kNullArgument;
  delete request;
  return RELAY_OK;
}

size_t relay_request_last_error(const relay_request* request, char* buf,
                                size_t size) {
  if (buf != nullptr && size > 0) buf[0] = '\0';
  return request == nullptr ? 0 : request->error.CopyTo(buf, size);
}

}  // extern "C"
