// File: embed/torch/process_group_relay.cc
// Python.h first: it defines feature macros the system headers read.
#include <Python.h>

#include "embed/torch/process_group_relay.h"

#include <ATen/core/ivalue.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "embed/torch/c10d_store.h"
#include "runtime/config.h"

#ifdef RELAY_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace relay_torch {
namespace {

// all_to_all with uneven splits runs as send/recv on this tag, which torch
// users (whose tags are ints) cannot reach.
constexpr int64_t kAllToAllTag = int64_t{1} << 40;

relay::DataType TypeOf(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kChar: return relay::DataType::kInt8;
    case at::kByte: return relay::DataType::kUint8;
    case at::kInt: return relay::DataType::kInt32;
    case at::kLong: return relay::DataType::kInt64;
    case at::kHalf: return relay::DataType::kFloat16;
    case at::kBFloat16: return relay::DataType::kBfloat16;
    case at::kFloat: return relay::DataType::kFloat32;
    case at::kDouble: return relay::DataType::kFloat64;
    default:
      TORCH_CHECK(false, "relay backend: tensors of type ", t.scalar_type(),
                  " are not supported (int8, uint8, int32, int64, float16, "
                  "bfloat16, float32, float64 are)");
  }
}

relay::ReduceOp OpOf(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return relay::ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return relay::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return relay::ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return relay::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return relay::ReduceOp::kMax;
    default:
      TORCH_CHECK(false, "relay backend: reduce op ", static_cast<int>(op.op_),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX are)");
  }
}

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "relay backend: ", what, " is undefined");
  TORCH_CHECK(t.layout() == at::kStrided && t.is_contiguous(),
              "relay backend: ", what, " must be dense and contiguous");
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), "relay backend: ", what,
              " must be in host or CUDA memory, not ", t.device());
  TypeOf(t);
}

relay::Device DeviceOf(const at::Tensor& t) {
  return t.is_cuda() ? relay::Device::Cuda(t.device().index())
                     : relay::Device::Host();
}

// The caller's current stream on `t`'s device (CUDA tensors), else null.
void* CurrentStream(const at::Tensor& t) {
#ifdef RELAY_TORCH_CUDA
  if (t.is_cuda()) {
    return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
  }
#endif
  TORCH_CHECK(!t.is_cuda(), "relay backend: this build of the extension has "
              "no CUDA support (built without RELAY_TORCH_CUDA)");
  return nullptr;
}

relay::Buffer BufferOf(const at::Tensor& t) {
  return relay::Buffer{t.data_ptr(), static_cast<size_t>(t.numel()), TypeOf(t),
                       DeviceOf(t)};
}

const at::Tensor& Single(const std::vector<at::Tensor>& tensors,
                         const char* what) {
  TORCH_CHECK(tensors.size() == 1, "relay backend: ", what,
              " takes one tensor per process (got ", tensors.size(), ")");
  CheckTensor(tensors[0], what);
  return tensors[0];
}

// Every tensor of `list` matches `like` (type, element count) and is usable.
void CheckList(const std::vector<at::Tensor>& list, const at::Tensor& like,
               size_t want, const char* what) {
  TORCH_CHECK(list.size() == want, "relay backend: ", what, " holds ",
              list.size(), " tensors; want one per rank (", want, ")");
  for (const at::Tensor& t : list) {
    CheckTensor(t, what);
    TORCH_CHECK(t.scalar_type() == like.scalar_type() &&
                    t.numel() == like.numel() && t.device() == like.device(),
                "relay backend: every tensor of ", what,
                " must match the input's type, size and device");
  }
}

size_t Bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// Copies between a list of tensors and consecutive blocks of `flat`: host
// tensors with memcpy (the copy-out runs on a relay thread once the
// operation is done), CUDA tensors as copies queued on the current stream.
void CopyIntoFlat(const std::vector<at::Tensor>& list, const at::Tensor& flat) {
  if (flat.is_cuda()) {
    int64_t at = 0;
    for (const at::Tensor& t : list) {
      flat.narrow(0, at, t.numel()).copy_(t.reshape(-1));
      at += t.numel();
    }
    return;
  }
  char* at = static_cast<char*>(flat.data_ptr());
  for (const at::Tensor& t : list) {
    std::memcpy(at, t.data_ptr(), Bytes(t));
    at += Bytes(t);
  }
}
void CopyOutOfFlat(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  if (flat.is_cuda()) {
    int64_t at = 0;
    for (const at::Tensor& t : list) {
      t.view(-1).copy_(flat.narrow(0, at, t.numel()));
      at += t.numel();
    }
    return;
  }
  const char* at = static_cast<const char*>(flat.data_ptr());
  for (const at::Tensor& t : list) {
    std::memcpy(t.data_ptr(), at, Bytes(t));
    at += Bytes(t);
  }
}

[[noreturn]] void Raise(const absl::Status& status, const char* what) {
  TORCH_CHECK(false, "relay backend: ", what, ": ", status.ToString());
}

// A relay request as a torch Work. The completion state is shared with the
// request's OnDone callback, which runs the copy-out, then completes the
// future (on a relay thread, or at once if the request already ended).
class RelayWork final : public c10d::Work {
 public:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;             // Guarded by mu.
    absl::Status status;           // Guarded by mu; set once done.
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> keep_alive;  // Dropped when done.
    std::function<void()> finish;
    c10::intrusive_ptr<c10::ivalue::Future> future;
  };

  // `device`: CUDA tensors' device index, or -1 for host tensors.
  RelayWork(c10d::OpType type, relay::Request request,
            std::shared_ptr<State> state, int device)
      : Work(-1, type),
        request_(std::move(request)),
        state_(std::move(state)),
        device_(device) {}

  static void Complete(const std::shared_ptr<State>& state, absl::Status s) {
    if (s.ok() && state->finish) {
      try {
        state->finish();
      } catch (const std::exception& e) {
        s = absl::InternalError(absl::StrCat("copying results out: ", e.what()));
      }
    }
    {
      std::lock_guard<std::mutex> lock(state->mu);
      state->status = s;
      state->done = true;
      state->keep_alive.clear();
      state->finish = nullptr;
    }
    state->cv.notify_all();
    if (s.ok()) {
      state->future->markCompleted(c10::IValue(state->outputs));
    } else {
      state->future->setError(std::make_exception_ptr(
          std::runtime_error(absl::StrCat("relay backend: ", s.ToString()))));
    }
  }

  bool isCompleted() override {
    request_.Test();  // Moves a polling transport along.
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->done;
  }

  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->done && state_->status.ok();
  }

  std::exception_ptr exception() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done || state_->status.ok()) return nullptr;
    return std::make_exception_ptr(std::runtime_error(
        absl::StrCat("relay backend: ", state_->status.ToString())));
  }

  std::vector<at::Tensor> result() override { return state_->outputs; }

  void synchronize() override {
    if (device_ >= 0) OrderCurrentStream();
  }

  // Zero (torch's kNoTimeout) waits up to the operation's own deadline.
  // CUDA operations (but barrier) order the current stream after the
  // operation instead, like ProcessGroupNCCL, and raise only an error the
  // operation already reported.
  bool wait(std::chrono::milliseconds timeout) override {
    if (device_ >= 0 && retrieveOpType() != c10d::OpType::BARRIER) {
      OrderCurrentStream();
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->done && !state_->status.ok()) {
        Raise(state_->status, c10d::opTypeToString(retrieveOpType()).c_str());
      }
      return true;
    }
    absl::Status s = timeout.count() > 0
                         ? request_.Wait(absl::Milliseconds(timeout.count()))
                         : request_.Wait();
    if (s.ok() || s.code() != absl::StatusCode::kDeadlineExceeded) {
      // The request ended; its callback may still be copying out.
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [&] { return state_->done; });
      s = state_->status;
    }
    if (!s.ok()) Raise(s, c10d::opTypeToString(retrieveOpType()).c_str());
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    return state_->future;
  }

 private:
  void OrderCurrentStream() {
#ifdef RELAY_TORCH_CUDA
    const absl::Status s = request_.StreamWait(
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_))
            .stream());
    if (!s.ok()) Raise(s, c10d::opTypeToString(retrieveOpType()).c_str());
#endif
  }

  relay::Request request_;
  const std::shared_ptr<State> state_;
  const int device_;
};

}  // namespace

// torch destroys a process group from Python, holding the GIL, and the
// communicator's destructor joins its threads. One of them (UCX's progress
// thread) may be completing a request whose callback drops the last
// reference to tensors with Python objects, which waits for the GIL: with
// the GIL held here the two would wait for each other forever. So the GIL
// is let go while the communicator goes.
ProcessGroupRelay::~ProcessGroupRelay() {
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* saved = PyEval_SaveThread();
    comm_.reset();
    PyEval_RestoreThread(saved);
  } else {
    comm_.reset();
  }
}

ProcessGroupRelay::ProcessGroupRelay(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout)
    : BackendBase(rank, size) {
  const std::shared_ptr<relay::Store> base = std::make_shared<C10dStore>(store);
  auto create = [&](const std::string& transport, std::shared_ptr<relay::Store> on) {
    relay::CommunicatorConfig config;
    config.rank = rank;
    config.size = size;
    config.store = std::move(on);
    config.transport = transport;
    if (timeout.count() > 0) {
      config.options.default_timeout = absl::Milliseconds(timeout.count());
    }
    return relay::CreateCommunicator(config);
  };
  const absl::StatusOr<std::optional<std::string>> named =
      relay::ReadText("RELAY_TRANSPORT");
  if (named.ok() && named->has_value() && !(*named)->empty()) {
    // One transport for every tensor, as asked.
    absl::StatusOr<std::unique_ptr<relay::Communicator>> comm = create(**named, base);
    if (!comm.ok()) Raise(comm.status(), "creating the communicator");
    comm_ = std::move(*comm);
    return;
  }
  // Host tensors over UCX, where this build has it.
  if (relay::Transports().Get("ucx").ok()) {
    absl::StatusOr<std::unique_ptr<relay::Communicator>> comm = create("ucx", base);
    if (!comm.ok()) Raise(comm.status(), "creating the communicator (ucx)");
    comm_ = std::move(*comm);
  }
#ifdef RELAY_TORCH_CUDA
  // CUDA tensors over relay's own GPU wiring where every rank is on this
  // host and their GPUs reach each other (cuda_ipc refuses the job with
  // FailedPrecondition otherwise, on every rank alike), else over NCCL.
  // Each on the device current here: set it before init_process_group.
  if (c10::cuda::device_count() > 0) {
    absl::StatusOr<std::unique_ptr<relay::Communicator>> device =
        create("cuda_ipc", std::make_shared<relay::PrefixStore>(base, "cuda_ipc/"));
    if (device.status().code() == absl::StatusCode::kFailedPrecondition) {
      device = create("nccl", std::make_shared<relay::PrefixStore>(base, "nccl/"));
    }
    if (!device.ok()) Raise(device.status(), "creating the communicator for CUDA tensors");
    device_comm_ = std::move(*device);
  }
#endif
  if (comm_ == nullptr && device_comm_ == nullptr) {
    Raise(absl::FailedPreconditionError(
              "this build has neither UCX nor CUDA; set RELAY_TRANSPORT"),
          "creating the communicator");
  }
}

relay::Communicator* ProcessGroupRelay::CommFor(const at::Tensor* like) const {
  const bool cuda = like != nullptr && like->is_cuda();
  if (cuda && device_comm_ != nullptr) return device_comm_.get();
  if (comm_ != nullptr) return comm_.get();
  // Only a device communicator: barrier uses it; host tensors have none.
  TORCH_CHECK(!like || cuda, "relay backend: host tensors need RELAY_TRANSPORT=ucx "
              "(this build has no UCX)");
  return device_comm_.get();
}

std::string ProcessGroupRelay::transport() const {
  return comm_ != nullptr ? std::string(comm_->transport_name()) : device_transport();
}

std::string ProcessGroupRelay::device_transport() const {
  return device_comm_ != nullptr ? std::string(device_comm_->transport_name())
         : comm_ != nullptr      ? std::string(comm_->transport_name())
                                 : std::string();
}

std::string ProcessGroupRelay::metrics_text() const {
  std::string text = comm_ != nullptr ? comm_->MetricsText() : std::string();
  if (device_comm_ != nullptr) text += device_comm_->MetricsText();
  return text;
}

void ProcessGroupRelay::register_window(const at::Tensor& tensor) {
  CheckTensor(tensor, "the window");
  TORCH_CHECK(tensor.is_cuda(), "relay backend: a window must be a CUDA tensor, not on ",
              tensor.device());
  const absl::Status s = CommFor(&tensor)->RegisterWindow(BufferOf(tensor), OptionsFor(std::chrono::milliseconds(0)));
  if (!s.ok()) Raise(s, "register_window");
}

void ProcessGroupRelay::deregister_window(const at::Tensor& tensor) {
  CheckTensor(tensor, "the window");
  TORCH_CHECK(tensor.is_cuda(), "relay backend: a window must be a CUDA tensor, not on ",
              tensor.device());
  const absl::Status s = CommFor(&tensor)->DeregisterWindow(tensor.data_ptr(),
                                                        OptionsFor(std::chrono::milliseconds(0)));
  if (!s.ok()) Raise(s, "deregister_window");
}

relay::CollectiveOptions ProcessGroupRelay::OptionsFor(
    std::chrono::milliseconds timeout, const at::Tensor* like) const {
  relay::CollectiveOptions options;
  if (timeout.count() > 0) options.timeout = absl::Milliseconds(timeout.count());
  if (like != nullptr) options.stream = CurrentStream(*like);
  return options;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::Start(Launch launch) {
  absl::StatusOr<relay::Request> request = launch.start();
  if (!request.ok()) {
    Raise(request.status(), c10d::opTypeToString(launch.type).c_str());
  }
  int device = -1;
  void* stream = nullptr;
  for (const at::Tensor& t : launch.keep_alive) {
    if (t.is_cuda()) {
      device = t.device().index();
      stream = CurrentStream(t);
    }
  }
  if (device >= 0) {
    // Copy-out on the caller's stream, after the operation (on the GPU).
    if (launch.finish) {
      const absl::Status ordered = request->StreamWait(stream);
      if (!ordered.ok()) Raise(ordered, c10d::opTypeToString(launch.type).c_str());
      launch.finish();
      launch.finish = nullptr;
    }
  }
  auto state = std::make_shared<RelayWork::State>();
  state->outputs = std::move(launch.outputs);
  state->keep_alive = std::move(launch.keep_alive);
  state->finish = std::move(launch.finish);
  state->future = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()));
  auto work =
      c10::make_intrusive<RelayWork>(launch.type, *request, state, device);
  request->OnDone([state](absl::Status s) {
    RelayWork::Complete(state, std::move(s));
  });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = Single(tensors, "broadcast");
  const relay::Buffer b = BufferOf(t);
  const int root = static_cast<int>(opts.rootRank);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &t);
  relay::Communicator* const comm = CommFor(&t);
  return Start({c10d::OpType::BROADCAST,
                [=] { return comm->Broadcast(b, b, root, o); },
                tensors, tensors, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "all_reduce");
  const relay::Buffer b = BufferOf(t);
  const relay::ReduceOp op = OpOf(opts.reduceOp);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &t);
  relay::Communicator* const comm = CommFor(&t);
  return Start({c10d::OpType::ALLREDUCE,
                [=] { return comm->AllReduce(b, b, op, o); }, tensors,
                tensors, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "relay backend: allreduce_coalesced of no tensors");
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    CheckTensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "relay backend: allreduce_coalesced tensors must share a type");
    total += t.numel();
  }
  at::Tensor flat = at::empty({total}, tensors[0].options());
  CopyIntoFlat(tensors, flat);
  const relay::Buffer b = BufferOf(flat);
  const relay::ReduceOp op = OpOf(opts.reduceOp);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &tensors[0]);
  relay::Communicator* const comm = CommFor(&tensors[0]);
  std::vector<at::Tensor> keep = tensors;
  keep.push_back(flat);
  return Start({c10d::OpType::ALLREDUCE_COALESCED,
                [=] { return comm->AllReduce(b, b, op, o); }, tensors, keep,
                [flat, tensors] { CopyOutOfFlat(flat, tensors); }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& t = Single(tensors, "reduce");
  const relay::Buffer b = BufferOf(t);
  const relay::ReduceOp op = OpOf(opts.reduceOp);
  const int root = static_cast<int>(opts.rootRank);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &t);
  relay::Communicator* const comm = CommFor(&t);
  return Start({c10d::OpType::REDUCE,
                [=] { return comm->Reduce(b, b, op, root, o); }, tensors,
                tensors, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = Single(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1,
              "relay backend: all_gather takes one output list per process");
  std::vector<at::Tensor> list = outputs[0];
  CheckList(list, in, static_cast<size_t>(getSize()), "all_gather's outputs");
  at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
  const relay::Buffer send = BufferOf(in), recv = BufferOf(flat);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &in);
  relay::Communicator* const comm = CommFor(&in);
  std::vector<at::Tensor> keep = list;
  keep.push_back(in);
  keep.push_back(flat);
  return Start({c10d::OpType::ALLGATHER,
                [=] { return comm->AllGather(send, recv, o); }, list, keep,
                [flat, list] { CopyOutOfFlat(flat, list); }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  CheckTensor(input, "all_gather_into_tensor's input");
  CheckTensor(output, "all_gather_into_tensor's output");
  const relay::Buffer send = BufferOf(input), recv = BufferOf(output);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &input);
  relay::Communicator* const comm = CommFor(&input);
  return Start({c10d::OpType::_ALLGATHER_BASE,
                [=] { return comm->AllGather(send, recv, o); }, {output},
                {input, output}, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const at::Tensor& in = Single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "relay backend: gather root ",
              root, " is out of range [0, ", getSize(), ")");
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &in);
  relay::Communicator* const comm = CommFor(&in);
  const relay::Buffer send = BufferOf(in);
  if (getRank() != root) {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "relay backend: gather's outputs belong on the root only");
    const relay::Buffer none{nullptr, 0, send.dtype, send.device};
    return Start({c10d::OpType::GATHER,
                  [=] { return comm->Gather(send, none, root, o); }, {},
                  inputs, nullptr});
  }
  TORCH_CHECK(outputs.size() == 1,
              "relay backend: gather takes one output list at the root");
  std::vector<at::Tensor> list = outputs[0];
  CheckList(list, in, static_cast<size_t>(getSize()), "gather's outputs");
  at::Tensor flat = at::empty({in.numel() * getSize()}, in.options());
  const relay::Buffer recv = BufferOf(flat);
  std::vector<at::Tensor> keep = list;
  keep.push_back(in);
  keep.push_back(flat);
  return Start({c10d::OpType::GATHER,
                [=] { return comm->Gather(send, recv, root, o); }, list, keep,
                [flat, list] { CopyOutOfFlat(flat, list); }});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = Single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  TORCH_CHECK(root >= 0 && root < getSize(), "relay backend: scatter root ",
              root, " is out of range [0, ", getSize(), ")");
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &out);
  relay::Communicator* const comm = CommFor(&out);
  const relay::Buffer recv = BufferOf(out);
  if (getRank() != root) {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "relay backend: scatter's inputs belong on the root only");
    const relay::ConstBuffer none{nullptr, 0, recv.dtype, recv.device};
    return Start({c10d::OpType::SCATTER,
                  [=] { return comm->Scatter(none, recv, root, o); }, outputs,
                  outputs, nullptr});
  }
  TORCH_CHECK(inputs.size() == 1,
              "relay backend: scatter takes one input list at the root");
  const std::vector<at::Tensor>& list = inputs[0];
  CheckList(list, out, static_cast<size_t>(getSize()), "scatter's inputs");
  at::Tensor flat = at::empty({out.numel() * getSize()}, out.options());
  CopyIntoFlat(list, flat);
  const relay::Buffer send = BufferOf(flat);
  return Start({c10d::OpType::SCATTER,
                [=] { return comm->Scatter(send, recv, root, o); }, outputs,
                {out, flat}, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = Single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1,
              "relay backend: reduce_scatter takes one input list per process");
  const std::vector<at::Tensor>& list = inputs[0];
  CheckList(list, out, static_cast<size_t>(getSize()), "reduce_scatter's inputs");
  at::Tensor flat = at::empty({out.numel() * getSize()}, out.options());
  CopyIntoFlat(list, flat);
  const relay::Buffer send = BufferOf(flat), recv = BufferOf(out);
  const relay::ReduceOp op = OpOf(opts.reduceOp);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &out);
  relay::Communicator* const comm = CommFor(&out);
  return Start({c10d::OpType::REDUCE_SCATTER,
                [=] { return comm->ReduceScatter(send, recv, op, o); },
                outputs, {out, flat}, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  CheckTensor(input, "reduce_scatter_tensor's input");
  CheckTensor(output, "reduce_scatter_tensor's output");
  const relay::Buffer send = BufferOf(input), recv = BufferOf(output);
  const relay::ReduceOp op = OpOf(opts.reduceOp);
  const relay::CollectiveOptions o = OptionsFor(opts.timeout, &input);
  relay::Communicator* const comm = CommFor(&input);
  return Start({c10d::OpType::_REDUCE_SCATTER_BASE,
                [=] { return comm->ReduceScatter(send, recv, op, o); },
                {output}, {input, output}, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  CheckTensor(input, "all_to_all_single's input");
  CheckTensor(output, "all_to_all_single's output");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "relay backend: all_to_all_single's tensors must share a type");
  const int n = getSize();
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    const relay::Buffer send = BufferOf(input), recv = BufferOf(output);
    const relay::CollectiveOptions o = OptionsFor(opts.timeout, &input);
    relay::Communicator* const comm = CommFor(&input);
    return Start({c10d::OpType::ALLTOALL_BASE,
                  [=] { return comm->AllToAll(send, recv, o); }, {output},
                  {input, output}, nullptr});
  }
  // Uneven: rows of dim 0 per rank; an empty list means even rows.
  auto blocks = [n](const at::Tensor& t, const std::vector<int64_t>& splits,
                    const char* what) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    std::vector<at::Tensor> out;
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "relay backend: ", what, " has ", rows,
                  " rows, not a multiple of the ", n, " ranks");
      for (int i = 0; i < n; ++i) out.push_back(t.narrow(0, i * (rows / n), rows / n));
      return out;
    }
    TORCH_CHECK(static_cast<int>(splits.size()) == n, "relay backend: ", what,
                " split sizes hold ", splits.size(), " entries; want ", n);
    int64_t at = 0;
    for (int64_t s : splits) {
      TORCH_CHECK(s >= 0 && at + s <= rows, "relay backend: ", what,
                  " split sizes do not fit its ", rows, " rows");
      out.push_back(t.narrow(0, at, s));
      at += s;
    }
    TORCH_CHECK(at == rows, "relay backend: ", what, " split sizes sum to ",
                at, ", not its ", rows, " rows");
    return out;
  };
  return Exchange(c10d::OpType::ALLTOALL_BASE,
                  blocks(input, input_split_sizes, "input"),
                  blocks(output, output_split_sizes, "output"),
                  {input, output}, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  const size_t n = static_cast<size_t>(getSize());
  TORCH_CHECK(inputs.size() == n && outputs.size() == n,
              "relay backend: all_to_all takes one input and one output "
              "tensor per rank");
  for (size_t i = 0; i < n; ++i) {
    CheckTensor(inputs[i], "all_to_all's inputs");
    CheckTensor(outputs[i], "all_to_all's outputs");
  }
  std::vector<at::Tensor> keep = inputs;
  keep.insert(keep.end(), outputs.begin(), outputs.end());
  return Exchange(c10d::OpType::ALLTOALL, inputs, outputs, keep, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::Exchange(
    c10d::OpType type, std::vector<at::Tensor> send,
    std::vector<at::Tensor> recv, std::vector<at::Tensor> keep_alive,
    std::chrono::milliseconds timeout) {
  const int me = getRank();
  std::vector<relay::P2POp> ops;
  for (int peer = 0; peer < getSize(); ++peer) {
    const at::Tensor& s = send[peer];
    const at::Tensor& r = recv[peer];
    TORCH_CHECK(s.scalar_type() == r.scalar_type(),
                "relay backend: all_to_all's tensors must share a type");
    if (peer == me) {
      TORCH_CHECK(s.numel() == r.numel(), "relay backend: all_to_all sends ",
                  s.numel(), " elements to this rank but expects ", r.numel());
      r.view(-1).copy_(s.view(-1));
      continue;
    }
    // narrow() along dim 0 of a contiguous tensor stays contiguous.
    CheckTensor(s, "all_to_all's input block");
    CheckTensor(r, "all_to_all's output block");
    ops.push_back(relay::P2POp::Send(BufferOf(s), peer, kAllToAllTag));
    ops.push_back(relay::P2POp::Recv(BufferOf(r), peer, kAllToAllTag));
  }
  const relay::CollectiveOptions o = OptionsFor(timeout, &keep_alive[0]);
  relay::Communicator* const comm = CommFor(&keep_alive[0]);
  std::vector<at::Tensor> outputs = recv;
  return Start({type, [comm, ops, o] { return comm->BatchSendRecv(ops, o); },
                outputs, std::move(keep_alive), nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  const at::Tensor& t = Single(tensors, "send");
  const relay::Buffer b = BufferOf(t);
  const relay::CollectiveOptions o = OptionsFor(std::chrono::milliseconds(0), &t);
  relay::Communicator* const comm = CommFor(&t);
  return Start({c10d::OpType::SEND,
                [=] { return comm->Send(b, dst_rank, tag, o); }, tensors,
                tensors, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  const at::Tensor& t = Single(tensors, "recv");
  const relay::Buffer b = BufferOf(t);
  const relay::CollectiveOptions o = OptionsFor(std::chrono::milliseconds(0), &t);
  relay::Communicator* const comm = CommFor(&t);
  return Start({c10d::OpType::RECV,
                [=] { return comm->Recv(b, src_rank, tag, o); }, tensors,
                tensors, nullptr});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRelay::barrier(
    const c10d::BarrierOptions& opts) {
  const relay::CollectiveOptions o = OptionsFor(opts.timeout);
  relay::Communicator* const comm = CommFor(nullptr);
  return Start({c10d::OpType::BARRIER, [=] { return comm->Barrier(o); }, {},
                {}, nullptr});
}

c10::intrusive_ptr<BackendBase> CreateProcessGroupRelay(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupRelay>(store, rank, size, timeout);
}

}  // namespace relay_torch
