#include "testing/conformance.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/selection.h"
#include "runtime/communicator.h"
#include "runtime/status_macros.h"
#include "testing/device_memory.h"
#include "testing/rank_harness.h"
#include "testing/reference.h"

namespace relay {
namespace {

constexpr int kSizes[] = {1, 2, 3, 4, 5, 7, 8, 16};
constexpr size_t kGuard = 16;  // Elements past each output, checked intact.
constexpr unsigned char kGarbage = 0xA5, kGuardByte = 0x5A;
const absl::Duration kTimeout = absl::Seconds(120);

bool HasInPlaceForm(CollectiveKind k) {
  return k != CollectiveKind::kAllToAll && k != CollectiveKind::kBarrier;
}

std::vector<int> RootsFor(CollectiveKind kind, int size) {
  if (!IsRooted(kind)) return {0};
  if (size <= 8) {
    std::vector<int> all;
    for (int r = 0; r < size; ++r) all.push_back(r);
    return all;
  }
  return {0, 5, size - 1};
}

// Elements of the send vector each rank passes.
size_t SendCount(CollectiveKind kind, size_t count, int size) {
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kScatter:
    case CollectiveKind::kAllToAll:
      return count * static_cast<size_t>(size);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return count;
  }
}

size_t RecvCount(CollectiveKind kind, size_t count, int size) {
  switch (kind) {
    case CollectiveKind::kAllGather:
    case CollectiveKind::kGather:
    case CollectiveKind::kAllToAll:
      return count * static_cast<size_t>(size);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return count;
  }
}

// One rank's call: sets up buffers (in place or not), runs, checks.
absl::Status RunOneRank(const ConformanceCase& c, Communicator& comm,
                        BarrierArrivals& arrived) {
  const int rank = comm.rank(), n = c.size;
  const size_t esize = DataTypeSize(c.dtype);
  CollectiveOptions options;
  options.algorithm = c.algorithm;
  options.timeout = kTimeout;

  if (c.kind == CollectiveKind::kBarrier) {
    RELAY_RETURN_IF_ERROR(arrived.Arrive());
    RELAY_ASSIGN_OR_RETURN(Request r, comm.Barrier(options));
    RELAY_RETURN_IF_ERROR(r.Wait());
    RELAY_ASSIGN_OR_RETURN(const int count, arrived.Count());
    if (count != n) {
      return absl::InternalError(absl::StrCat(
          "left the barrier when only ", count, " of ", n,
          " ranks had entered it"));
    }
    return absl::OkStatus();
  }

  const bool root = rank == c.root;
  const bool in_place = c.in_place && (!IsRooted(c.kind) || root);
  const size_t send_count = SendCount(c.kind, c.count, n);
  const size_t recv_count = RecvCount(c.kind, c.count, n);
  const size_t block = c.count * esize;

  // The send vector, and the recv vector plus its guard; the in-place forms
  // alias them instead.
  std::vector<char> send_mem = InputBytes(c.dtype, c.op, rank, send_count);
  std::vector<char> recv_mem((recv_count + kGuard) * esize, kGarbage);
  std::memset(recv_mem.data() + recv_count * esize, kGuardByte, kGuard * esize);
  char* send_ptr = send_mem.data();
  char* recv_ptr = recv_mem.data();
  if (in_place) {
    switch (c.kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kReduce:
        if (!send_mem.empty()) {
          std::memcpy(recv_ptr, send_mem.data(), send_mem.size());
        }
        send_ptr = recv_ptr;
        break;
      case CollectiveKind::kAllGather:
      case CollectiveKind::kGather:
        if (block) std::memcpy(recv_ptr + rank * block, send_mem.data(), block);
        send_ptr = recv_ptr + rank * block;
        break;
      case CollectiveKind::kReduceScatter:
      case CollectiveKind::kScatter:
        // recv is this rank's block of the send vector; no guard applies.
        recv_ptr = send_ptr + rank * block;
        break;
      default:
        break;
    }
  }
  ConstBuffer send{send_ptr, send_count, c.dtype, Device::Host()};
  Buffer recv{recv_ptr, recv_count, c.dtype, Device::Host()};

  // A transport that moves device memory only (NCCL), or a case asking for
  // device memory, gets device copies of both images, aliased the same way,
  // and the results are copied back.
  const bool on_device = c.on_device || !comm.capabilities().host_memory;
  DeviceMirror mirror;
  if (on_device) {
    RELAY_ASSIGN_OR_RETURN(mirror, DeviceMirror::Of(send_mem, recv_mem));
    send = mirror.Map(send);
    recv = mirror.Map(recv);
  }

  if (c.blocking) {
    RELAY_RETURN_IF_ERROR(
        comm.RunCollective(c.kind, send, recv, c.op, c.root, options));
  } else {
    RELAY_ASSIGN_OR_RETURN(
        Request request,
        comm.Collective(c.kind, send, recv, c.op, c.root, options));
    RELAY_RETURN_IF_ERROR(request.Wait());
  }
  if (on_device) RELAY_RETURN_IF_ERROR(mirror.CopyBack(absl::MakeSpan(send_mem),
                                                       absl::MakeSpan(recv_mem)));

  const bool defined = !(c.kind == CollectiveKind::kReduce ||
                         c.kind == CollectiveKind::kGather) || root;
  if (defined) {
    // Checked element by element against the formula: the large section's
    // buffers are megabytes a rank, and materialising every rank's input
    // and the expected vector as doubles was most of the suite's time.
    std::string detail;
    const size_t wrong = CountWrong(c.kind, c.dtype, c.op, c.root, rank, n,
                                    c.count, recv_ptr, recv_count, &detail);
    if (wrong > 0) {
      return absl::InternalError(
          absl::StrCat(wrong, " of ", recv_count, " elements wrong:", detail));
    }
  }
  if (recv_ptr == recv_mem.data()) {
    for (size_t i = recv_count * esize; i < recv_mem.size(); ++i) {
      if (static_cast<unsigned char>(recv_mem[i]) != kGuardByte) {
        return absl::InternalError(absl::StrCat(
            "wrote past the end of the recv buffer (byte ", i, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ConformanceCase::Name() const {
  return absl::StrCat(CollectiveName(kind), "_", AlgorithmName(algorithm),
                      "_n", size, "_c", count, "_", DataTypeName(dtype), "_",
                      ReduceOpName(op), "_root", root,
                      in_place ? "_inplace" : "", on_device ? "_device" : "",
                      blocking ? "_blocking" : "");
}

namespace {

// World sizes of the large section (over a million elements). Under
// ThreadSanitizer only 2: at 5 ranks its 86 cases (in three suites) took
// two thirds of the loopback conformance test's time there (most of it the
// kernel filling fresh shadow pages),
// and what tsan looks for, a race between a pipeline's segments in flight,
// happens between any two ranks. The plain and ASan/UBSan runs keep 5, an
// odd world for the algorithms' arithmetic.
#if defined(__SANITIZE_THREAD__)
constexpr int kLargeCaseSizes[] = {2};
#else
constexpr int kLargeCaseSizes[] = {2, 5};
#endif

// The matrix over the world sizes `sizes` (see ConformanceCases()).
std::vector<ConformanceCase> CasesForSizes(absl::Span<const int> sizes) {
  std::vector<ConformanceCase> cases;
  auto add = [&](ConformanceCase c) {
    if (std::find(sizes.begin(), sizes.end(), c.size) == sizes.end()) return;
    cases.push_back(c);
    if (HasInPlaceForm(c.kind)) {
      c.in_place = true;
      cases.push_back(c);
    }
  };
  // 1. Shapes: every collective, algorithm, size, root; float32 sum.
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (Algorithm algorithm : AlgorithmsFor(kind)) {
      for (int size : sizes) {
        const size_t counts[] = {0, 1, static_cast<size_t>(size) * 37 + 3};
        for (size_t count : counts) {
          if (kind == CollectiveKind::kBarrier && count > 0) continue;
          for (int root : RootsFor(kind, size)) {
            add({kind, algorithm, size, count, DataType::kFloat32,
                 ReduceOp::kSum, root, false});
          }
        }
      }
    }
  }
  // 2. Arithmetic: every dtype and op for each reduction algorithm.
  for (CollectiveKind kind : {CollectiveKind::kAllReduce,
                              CollectiveKind::kReduceScatter,
                              CollectiveKind::kReduce}) {
    for (Algorithm algorithm : AlgorithmsFor(kind)) {
      for (int size : {3, 4}) {
        for (DataType dtype : AllDataTypes()) {
          for (ReduceOp op : AllReduceOps()) {
            add({kind, algorithm, size, 53, dtype, op, size - 1, false});
            // shm's all_reduce pipeline (shm.h) past 64 KB for every
            // dtype, in chunks of loopback's 64 KB slots, with pieces of
            // unequal length.
            if (kind == CollectiveKind::kAllReduce &&
                algorithm == Algorithm::kShm) {
              add({kind, algorithm, size, 70001, dtype, op, size - 1, false});
            }
          }
        }
      }
    }
  }
  // 3. Blocking (Communicator::RunCollective): every collective at every
  // size, relay's choice (shm's one exchange on the calling thread where
  // the model picks it, else a schedule started and waited for) and shm
  // forced; the last rank as root; and shm's all_reduce pipeline, which
  // the blocking form starts and waits for.
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kShm}) {
      for (int size : sizes) {
        const size_t counts[] = {0, 1, static_cast<size_t>(size) * 37 + 3};
        for (size_t count : counts) {
          if (kind == CollectiveKind::kBarrier && count > 0) continue;
          ConformanceCase c{kind,           algorithm,
                            size,           count,
                            DataType::kFloat32, ReduceOp::kSum,
                            IsRooted(kind) ? size - 1 : 0, false};
          c.blocking = true;
          add(c);
        }
      }
    }
  }
  for (int size : {2, 3}) {
    ConformanceCase c{CollectiveKind::kAllReduce, Algorithm::kShm, size, 70001,
                      DataType::kBfloat16, ReduceOp::kMax, 0, false};
    c.blocking = true;
    add(c);
  }
  // 4. A group of one under relay's choice, which runs every collective as
  // a copy (collectives/engine.h, RunsAlone), started and blocking. A
  // reduction of one contribution is that contribution for every dtype and
  // op (avg included): all_reduce tries them all, the other reductions sum
  // and avg on every dtype; a copy depends only on the element's size,
  // which the other collectives try in each width.
  for (CollectiveKind kind : AllCollectiveKinds()) {
    std::vector<DataType> dtypes = {DataType::kInt8, DataType::kFloat16,
                                    DataType::kFloat32, DataType::kFloat64};
    std::vector<ReduceOp> ops = {ReduceOp::kSum};
    if (kind == CollectiveKind::kAllReduce) {
      dtypes = AllDataTypes();
      ops = AllReduceOps();
    } else if (IsReduction(kind)) {
      dtypes = AllDataTypes();
      ops = {ReduceOp::kSum, ReduceOp::kAvg};
    } else if (kind == CollectiveKind::kBarrier) {
      dtypes = {DataType::kFloat32};
    }
    const size_t count = kind == CollectiveKind::kBarrier ? 0 : 53;
    for (DataType dtype : dtypes) {
      for (ReduceOp op : ops) {
        for (bool blocking : {false, true}) {
          // Section 3 has the blocking barrier of one already.
          if (blocking && kind == CollectiveKind::kBarrier) continue;
          ConformanceCase c{kind, Algorithm::kAuto, 1, count, dtype, op, 0,
                            false};
          c.blocking = blocking;
          add(c);
        }
      }
    }
  }
  // 5. Large: over a million elements, pipelined into many segments (shm
  // for all_reduce only, whose pipeline runs any size: the other kinds'
  // one exchange must fit a transport's slots).
  for (CollectiveKind kind : AllCollectiveKinds()) {
    if (kind == CollectiveKind::kBarrier) continue;
    for (Algorithm algorithm : AlgorithmsFor(kind)) {
      if (algorithm == Algorithm::kShm && kind != CollectiveKind::kAllReduce) {
        continue;
      }
      for (int size : kLargeCaseSizes) {
        add({kind, algorithm, size, (size_t{1} << 20) + 3, DataType::kFloat32,
             ReduceOp::kSum, size - 1, false});
      }
    }
  }
  return cases;
}

}  // namespace

std::vector<ConformanceCase> ConformanceCases(int max_size) {
  std::vector<int> sizes;
  for (int size : kSizes) {
    if (size <= max_size) sizes.push_back(size);
  }
  return CasesForSizes(sizes);
}

std::vector<ConformanceCase> ConformanceCases() {
  return ConformanceCases(16);
}

std::vector<ConformanceCase> ConformanceCasesForSize(int size) {
  const int sizes[] = {size};
  return CasesForSizes(sizes);
}

std::vector<ConformanceCase> NativeConformanceCases(int size) {
  std::vector<ConformanceCase> cases;
  auto add = [&](ConformanceCase c) {
    cases.push_back(c);
    if (HasInPlaceForm(c.kind)) {
      c.in_place = true;
      cases.push_back(c);
    }
  };
  const size_t counts[] = {0, 1, static_cast<size_t>(size) * 37 + 3,
                           (size_t{1} << 20) + 3};
  for (CollectiveKind kind : AllCollectiveKinds()) {
    for (size_t count : counts) {
      if (kind == CollectiveKind::kBarrier && count > 0) continue;
      for (int root : RootsFor(kind, size)) {
        add({kind, Algorithm::kNative, size, count, DataType::kFloat32,
             ReduceOp::kSum, root, false});
      }
    }
  }
  for (CollectiveKind kind : {CollectiveKind::kAllReduce,
                              CollectiveKind::kReduceScatter,
                              CollectiveKind::kReduce}) {
    for (DataType dtype : AllDataTypes()) {
      for (ReduceOp op : AllReduceOps()) {
        add({kind, Algorithm::kNative, size, 53, dtype, op, size - 1, false});
      }
    }
  }
  return cases;
}

std::vector<ConformanceCase> DeviceConformanceCases(int size) {
  std::vector<ConformanceCase> cases = NativeConformanceCases(size);
  for (const ConformanceCase& c : ConformanceCasesForSize(size)) {
    // Direct and shm run on host memory only.
    if (c.algorithm != Algorithm::kDirect && c.algorithm != Algorithm::kShm) {
      cases.push_back(c);
    }
  }
  return cases;
}

std::vector<ConformanceCase> DeviceAlgorithmConformanceCases(int size) {
  std::vector<ConformanceCase> cases;
  for (ConformanceCase c : DeviceConformanceCases(size)) {
    if (c.algorithm == Algorithm::kNative) continue;
    c.on_device = true;
    cases.push_back(c);
  }
  return cases;
}

absl::Status RunConformanceCase(const ConformanceCase& c,
                                TransportFactory& factory,
                                const CollectiveEngine& engine) {
  CommunicatorOptions options;
  options.failure_poll_interval = absl::ZeroDuration();
  return RunRanksWithStore(
      c.size, factory, engine,
      [&](Communicator& comm, Store& store) {
        BarrierArrivals arrived(store, "barrier");
        return RunOneRank(c, comm, arrived);
      },
      options);
}

absl::Status RunConformanceCasesOnOneGroup(
    const std::vector<ConformanceCase>& cases, int size,
    TransportFactory& factory, const CollectiveEngine& engine,
    const CommunicatorOptions& options, const RankSetup& setup,
    std::vector<std::string>* failures) {
  std::mutex mu;
  int failed = 0;  // Guarded by mu.
  return RunRanksWithStore(
      size, factory, engine,
      [&](Communicator& comm, Store& store) -> absl::Status {
        for (size_t i = 0; i < cases.size(); ++i) {
          BarrierArrivals arrivals(store, absl::StrCat("barrier/", i));
          absl::Status one = RunConformanceCaseOnRank(cases[i], comm, arrivals);
          if (one.ok()) continue;
          std::lock_guard<std::mutex> lock(mu);
          failures->push_back(absl::StrCat("rank ", comm.rank(), ": ",
                                           cases[i].Name(), ": ",
                                           one.ToString()));
          if (++failed > 20 || one.code() != absl::StatusCode::kInternal) {
            return one;
          }
        }
        return absl::OkStatus();
      },
      options, setup);
}

absl::Status RunConformanceCaseOnRank(const ConformanceCase& c,
                                      Communicator& comm,
                                      BarrierArrivals& arrivals) {
  if (comm.size() != c.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "case ", c.Name(), " needs ", c.size, " ranks, the communicator has ",
        comm.size()));
  }
  return RunOneRank(c, comm, arrivals);
}

}  // namespace relay

namespace relay {
namespace {

// One all_reduce of RunCallbackProgressCaseOnRank: its buffers, and what
// its callback found.
struct CallbackOp {
  std::string name;
  std::vector<float> send, recv;
  float rank_sum = 0;  // The sum over ranks of (rank + 1) * scale.
  bool done = false;
  absl::Status status;
};

// Rank r's element i: (r + 1) * scale * (i % 7 + 1), small integers that
// float32 sums exactly, different at every position and on every rank.
std::vector<float> CallbackInput(int rank, size_t count, float scale) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) {
    v[i] = static_cast<float>(rank + 1) * scale * static_cast<float>(i % 7 + 1);
  }
  return v;
}

absl::Status CheckCallbackOp(const CallbackOp& op) {
  RELAY_RETURN_IF_ERROR(op.status);
  for (size_t i = 0; i < op.recv.size(); ++i) {
    const float want = op.rank_sum * static_cast<float>(i % 7 + 1);
    if (op.recv[i] != want) {
      return absl::InternalError(absl::StrCat(op.name, ": element ", i, " is ",
                                              op.recv[i], ", expected ", want));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunCallbackProgressCaseOnRank(Communicator& comm,
                                           absl::Duration timeout) {
  RELAY_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> half,
      comm.Split(comm.rank() % 2, comm.rank(), CollectiveOptions{timeout}));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<CallbackOp>> ops;
  const absl::Time deadline = absl::Now() + timeout;

  // Posts every all_reduce of one communicator, callbacks only; `tag`
  // names the communicator and sets the scale, so the two differ.
  auto post_all = [&](Communicator& c, const char* tag,
                      float scale) -> absl::Status {
    const TransportCapabilities caps = c.capabilities();
    std::vector<Algorithm> algorithms = {Algorithm::kAuto, Algorithm::kRing,
                                         Algorithm::kRecursiveDoubling};
    if (caps.exchange_bytes > 0) algorithms.push_back(Algorithm::kShm);
    if (caps.shared_address_space) algorithms.push_back(Algorithm::kDirect);
    float rank_sum = 0;
    for (int r = 0; r < c.size(); ++r) rank_sum += static_cast<float>(r + 1);
    for (Algorithm algorithm : algorithms) {
      for (size_t count : {size_t{1}, size_t{256}, size_t{70000}}) {
        auto op = std::make_unique<CallbackOp>();
        op->name = absl::StrCat(tag, " all_reduce(", AlgorithmName(algorithm),
                                ", ", count, " floats)");
        op->send = CallbackInput(c.rank(), count, scale);
        op->recv.assign(count, -1.0f);
        op->rank_sum = rank_sum * scale;
        CollectiveOptions options;
        options.algorithm = algorithm;
        options.timeout = timeout;
        RELAY_ASSIGN_OR_RETURN(
            Request request,
            c.AllReduce(ConstBuffer::Of(op->send), Buffer::Of(op->recv),
                        ReduceOp::kSum, options));
        CallbackOp* raw = op.get();
        {
          std::lock_guard<std::mutex> lock(mu);
          ops.push_back(std::move(op));
        }
        request.OnDone([&mu, &cv, raw](absl::Status status) {
          std::lock_guard<std::mutex> lock(mu);
          raw->status = std::move(status);
          raw->done = true;
          cv.notify_all();
        });
      }
    }
    return absl::OkStatus();
  };
  // A blocking call behind the posted ones, then one waited on: neither
  // may depend on this rank driving what it posted before.
  auto blocking_then_waited = [&](Communicator& c, float scale,
                                  const char* tag) -> absl::Status {
    CollectiveOptions options;
    options.timeout = timeout;
    if (c.capabilities().exchange_bytes > 0) options.algorithm = Algorithm::kShm;
    CallbackOp blocking{absl::StrCat(tag, " blocking all_reduce")};
    blocking.send = CallbackInput(c.rank(), 64, scale);
    blocking.recv.assign(64, -1.0f);
    for (int r = 0; r < c.size(); ++r) {
      blocking.rank_sum += static_cast<float>(r + 1) * scale;
    }
    blocking.status = c.RunAllReduce(ConstBuffer::Of(blocking.send),
                                     Buffer::Of(blocking.recv), ReduceOp::kSum,
                                     options);
    RELAY_RETURN_IF_ERROR(CheckCallbackOp(blocking));
    CallbackOp waited = blocking;
    waited.name = absl::StrCat(tag, " waited all_reduce");
    waited.recv.assign(64, -1.0f);
    options.algorithm = Algorithm::kAuto;
    RELAY_ASSIGN_OR_RETURN(
        Request request, c.AllReduce(ConstBuffer::Of(waited.send),
                                     Buffer::Of(waited.recv), ReduceOp::kSum,
                                     options));
    waited.status = request.Wait();
    return CheckCallbackOp(waited);
  };

  Communicator* first = &comm;
  Communicator* second = half.get();
  const char* first_tag = "world";
  const char* second_tag = "half";
  if (comm.rank() % 2 == 1) {
    std::swap(first, second);
    std::swap(first_tag, second_tag);
  }
  const float first_scale = first == &comm ? 1.0f : 3.0f;
  const float second_scale = first == &comm ? 3.0f : 1.0f;
  auto all_done = [&] {
    return std::all_of(ops.begin(), ops.end(),
                       [](const auto& op) { return op->done; });
  };
  absl::Status status = [&]() -> absl::Status {
    RELAY_RETURN_IF_ERROR(post_all(*first, first_tag, first_scale));
    RELAY_RETURN_IF_ERROR(post_all(*second, second_tag, second_scale));
    RELAY_RETURN_IF_ERROR(
        blocking_then_waited(*second, second_scale, second_tag));
    RELAY_RETURN_IF_ERROR(
        blocking_then_waited(*first, first_scale, first_tag));
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, absl::ToChronoNanoseconds(deadline - absl::Now()),
                     all_done)) {
      std::string missing;
      for (const auto& op : ops) {
        if (!op->done) {
          absl::StrAppend(&missing, missing.empty() ? "" : "; ", op->name);
        }
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", comm.rank(), ": no callback within ",
          absl::FormatDuration(timeout), " for: ", missing));
    }
    for (const auto& op : ops) RELAY_RETURN_IF_ERROR(CheckCallbackOp(*op));
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    // The callbacks hold this frame's buffers and lock: end every request
    // before the frame goes.
    half->Abort(status).IgnoreError();
    comm.Abort(status).IgnoreError();
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(30), all_done);
  }
  return status;
}

}  // namespace relay
