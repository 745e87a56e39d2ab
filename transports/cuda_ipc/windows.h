// File: transports/cuda_ipc/windows.h
//
// Windows: the symmetric windows of one cuda_ipc transport
// (Communicator::RegisterWindow). Every rank publishes its region's
// allocation through the store (its IPC handle and the region's offset in
// it, or why it refuses the region) and reads every peer's, so all ranks
// succeed or fail alike; a peer's allocation is opened once however many
// windows lie in it (cudaIpcOpenMemHandle refuses a second open). A call
// into a window asks whether its allocation is still the one registered
// (Allocations::IdOf): a freed one must not take the peers' stores.
//
// Thread-safe. The collective parts around it are the transport's: the
// barrier before Remove, the refusal kernel for a freed window.
#ifndef RELAY_TRANSPORTS_CUDA_IPC_WINDOWS_H_
#define RELAY_TRANSPORTS_CUDA_IPC_WINDOWS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/buffer.h"
#include "runtime/store.h"
#include "transports/cuda_ipc/allocations.h"
#include "transports/cuda_ipc/ipc_kernels.h"

namespace relay {
namespace cuda_ipc {

class Windows {
 public:
  // `abort` is called when registering leaves the ranks out of step (a
  // peer's allocation could not be opened after every rank agreed).
  Windows(int rank, int size, std::shared_ptr<Store> store, Allocations allocations,
          std::function<void(absl::Status)> abort);
  ~Windows();  // Closes the peers' allocations it opened.
  Windows(const Windows&) = delete;
  Windows& operator=(const Windows&) = delete;

  // Registers `region` on every rank, each passing its own; `refusal` is
  // why this rank refuses it before looking ("": it does not). InvalidArgument
  // on every rank, naming each rank's reason, if any rank refuses or the
  // sizes differ.
  absl::Status Register(const Buffer& region, const std::string& refusal,
                        absl::Time deadline);
  bool Contains(const void* base) const;
  // Forgets the window starting at `base` on this rank, closing the peer
  // allocations no other window uses; InvalidArgument if none starts there.
  absl::Status Remove(const void* base);

  struct Placement {
    void* outputs[kMaxRanks] = {};  // Every rank's, at the same offset.
    const char* base = nullptr;     // The window's start on this rank.
    bool freed = false;  // Its allocation is not the registered one now.
  };
  // Where `bytes` at `data` lie in every rank's window, if one window of
  // this rank holds them all.
  std::optional<Placement> Find(const void* data, size_t bytes) const;

 private:
  struct Window {
    char* base = nullptr;
    size_t bytes = 0;
    uint64_t allocation_id = 0;  // Allocations::IdOf when registered.
    char* regions[kMaxRanks] = {};
    std::string mappings[kMaxRanks];  // Keys of mappings_ it uses.
  };
  struct Record;  // What a rank publishes for one window.
  // Why this rank refuses `region` ("" if it does not): empty, else
  // `refusal` if there is one, else what the allocation says; fills
  // `record` and `allocation_id`.
  std::string Prepare(const Buffer& region, const std::string& refusal, Record* record,
                      uint64_t* allocation_id) const;

  const int rank_;
  const int size_;
  const std::shared_ptr<Store> store_;
  const Allocations allocations_;
  const std::function<void(absl::Status)> abort_;
  mutable std::mutex mu_;
  std::vector<Window> windows_;  // Guarded by mu_.
  // Handle bytes -> (mapped base, windows using it). Guarded by mu_.
  std::map<std::string, std::pair<void*, int>> mappings_;
  uint64_t made_ = 0;  // Windows registered so far. Guarded by mu_.
};

}  // namespace cuda_ipc
}  // namespace relay

#endif  // RELAY_TRANSPORTS_CUDA_IPC_WINDOWS_H_
