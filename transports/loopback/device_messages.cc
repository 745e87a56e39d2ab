#include "transports/loopback/device_messages.h"

#include <chrono>
#include <condition_variable>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/device_runtime.h"
#include "runtime/status_macros.h"
#include "runtime/thread_name.h"

namespace relay {
namespace loopback_device {
namespace rt = device_runtime;

namespace {

absl::Status CudaError(int error, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("loopback: ", what, ": ", rt::ErrorString(error)));
}

// Completes batches whose copies finished while nobody waited on them, so
// their OnDone callbacks run (the stream executor finishes a collective
// from the last batch's). One thread for the process, started with the
// first batch that needs it; it queries the pending batches' events every
// kSweep while there are any, and sleeps otherwise.
class Watcher {
 public:
  static Watcher& Get() {
    static Watcher* watcher = new Watcher();  // Its thread outlives main.
    return *watcher;
  }

  void Add(std::shared_ptr<DeviceBatch> batch) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(batch));
    if (!started_) {
      started_ = true;
      std::thread([this] {
        NameThisThread("relay-devmsg");
        Run();
      }).detach();
    }
    wake_.notify_one();
  }

 private:
  static constexpr std::chrono::microseconds kSweep{20};

  void Run() {
    std::vector<std::shared_ptr<DeviceBatch>> sweep;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (sweep.empty()) {
          wake_.wait(lock, [&] { return !pending_.empty(); });
        }
        for (auto& b : pending_) sweep.push_back(std::move(b));
        pending_.clear();
      }
      // Completing runs callbacks: outside the lock.
      std::vector<std::shared_ptr<DeviceBatch>> left;
      for (auto& b : sweep) {
        if (!b->Check()) left.push_back(std::move(b));
      }
      sweep.swap(left);
      if (!sweep.empty()) std::this_thread::sleep_for(kSweep);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<DeviceBatch>> pending_;  // Guarded by mu_.
  bool started_ = false;                               // Guarded by mu_.
};

}  // namespace

bool Available() {
  static const bool available = [] {
    int count = 0;
    return rt::DeviceCount(&count) == 0 && count > 0;
  }();
  return available;
}

absl::Status CheckDeviceMemory(const ConstBuffer& data, absl::string_view what) {
  if (data.device.is_host() || data.count == 0) return absl::OkStatus();
  int device = -1;
  if (int e = rt::DeviceOfPointer(data.data, &device); e != 0) {
    return CudaError(e, absl::StrCat(what, ": where its memory lives"));
  }
  if (device < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is declared as memory of GPU ", data.device.index,
        ", but it is host memory (or not CUDA's)"));
  }
  if (device != data.device.index) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is declared as memory of GPU ", data.device.index,
                     ", but it lives on GPU ", device));
  }
  return absl::OkStatus();
}

CopyLane::~CopyLane() {
  if (stream_ != nullptr) rt::DestroyStream(stream_);
}

absl::Status CopyLane::Ensure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream_ != nullptr) return absl::OkStatus();
  if (int e = rt::CurrentDevice(&device_); e != 0) {
    return CudaError(e, "the receiver's device");
  }
  if (int e = rt::CreateNonBlockingStream(&stream_); e != 0) {
    stream_ = nullptr;
    return CudaError(e, "the receiver's copy stream");
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedEvent> CopyLane::Queue(void* send_ready,
                                            void* recv_ready,
                                            const ConstBuffer& src,
                                            const Buffer& dst) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream_ == nullptr) {
    return absl::InternalError("loopback: a device receive without a lane");
  }
  // The matching thread may be the sender's, with another GPU current.
  rt::ScopedDevice on_lane_device(device_);
  if (int e = on_lane_device.error(); e != 0) {
    return CudaError(e, "making the receiver's GPU current");
  }
  if (int e = rt::StreamWaitEvent(stream_, send_ready); e != 0) {
    return CudaError(e, "waiting for the sender's stream");
  }
  if (int e = rt::StreamWaitEvent(stream_, recv_ready); e != 0) {
    return CudaError(e, "waiting for the receiver's stream");
  }
  if (const size_t bytes = dst.bytes(); bytes > 0) {
    if (int e = rt::CopyPeerAsync(dst.data, dst.device.index, src.data,
                                  src.device.index, bytes, stream_);
        e != 0) {
      return CudaError(e, absl::StrCat("copying ", bytes, " bytes from GPU ",
                                       src.device.index, " to GPU ",
                                       dst.device.index));
    }
  }
  void* event = nullptr;
  if (int e = rt::CreateEvent(&event); e != 0) {
    return CudaError(e, "creating a copy's event");
  }
  SharedEvent done(event, [](void* ev) { rt::DestroyEvent(ev); });
  if (int e = rt::RecordEvent(event, stream_); e != 0) {
    return CudaError(e, "recording a copy's event");
  }
  return done;
}

DeviceBatch::DeviceBatch(absl::Time deadline, size_t ops)
    : RequestState(deadline), unmatched_(ops), done_(ops) {}

DeviceBatch::~DeviceBatch() {
  if (ready_ != nullptr) rt::DestroyEvent(ready_);
}

absl::StatusOr<std::shared_ptr<DeviceBatch>> DeviceBatch::Post(
    size_t ops, void* stream, absl::Time deadline) {
  std::shared_ptr<DeviceBatch> b(new DeviceBatch(deadline, ops));
  // A failed batch wakes a poster waiting for its matches.
  b->OnCompleting([raw = b.get()](const absl::Status&) {
    std::lock_guard<std::mutex> lock(raw->mu_);
    raw->matched_.notify_all();
  });
  if (int e = rt::CreateEvent(&b->ready_); e != 0) {
    b->ready_ = nullptr;
    return CudaError(e, "creating a batch's event");
  }
  if (int e = rt::RecordEvent(b->ready_, stream); e != 0) {
    return CudaError(e, "recording a batch's event on its stream (is the "
                        "stream of this thread's current GPU?)");
  }
  return b;
}

void DeviceBatch::Matched(const std::shared_ptr<DeviceBatch>& self, size_t op,
                          SharedEvent done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_[op] = std::move(done);
    if (unmatched_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    matched_.notify_all();
  }
  if (!Check()) Watcher::Get().Add(self);
}

absl::Status DeviceBatch::AwaitMatched(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto over = [&] {
    return unmatched_.load(std::memory_order_acquire) == 0 || done();
  };
  if (deadline == absl::InfiniteFuture()) {
    matched_.wait(lock, over);
  } else {
    matched_.wait_until(lock, absl::ToChronoTime(deadline), over);
  }
  if (unmatched_.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  if (done()) return status();
  lock.unlock();
  absl::Status late = absl::DeadlineExceededError(absl::StrCat(
      "loopback: ", unmatched_.load(), " device operation(s) of a batch were "
      "not matched by their peers before the deadline"));
  Complete(late);
  return done() ? status() : late;
}

bool DeviceBatch::Check() {
  if (done()) return true;
  // Once every operation is matched, done_ no longer changes (Matched
  // wrote it before its count down): read without the lock, which
  // completing takes.
  if (unmatched_.load(std::memory_order_acquire) != 0) return false;
  for (const SharedEvent& e : done_) {
    if (e == nullptr) continue;  // Nothing was copied.
    const int q = rt::QueryEvent(e.get());
    if (q == rt::kNotReady) return false;
    if (q != 0) {
      Complete(CudaError(q, "a copy of the batch"));
      return true;
    }
  }
  Complete(absl::OkStatus());
  return true;
}

bool DeviceBatch::Progress() { return !done() && Check(); }

absl::Status DeviceBatch::StreamWait(void* cuda_stream) {
  if (done()) return status();  // Done: every copy has finished.
  RELAY_RETURN_IF_ERROR(AwaitMatched(deadline()));
  std::vector<SharedEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = done_;
  }
  for (const SharedEvent& e : events) {
    if (e == nullptr) continue;  // An empty message with a host peer.
    if (int r = rt::StreamWaitEvent(cuda_stream, e.get()); r != 0) {
      return CudaError(r, "StreamWait");
    }
  }
  return absl::OkStatus();
}

}  // namespace loopback_device
}  // namespace relay
