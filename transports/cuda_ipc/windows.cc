#include "transports/cuda_ipc/windows.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace relay {
namespace cuda_ipc {

struct Windows::Record {
  uint32_t version = 1;
  int32_t pid = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;   // The region's start within its allocation.
  uint64_t address = 0;  // For a peer thread of the same process.
  char error[192] = {};  // Why this rank refuses the region ("": it does not).
  cudaIpcMemHandle_t handle = {};  // Of the region's allocation.
};

namespace {

std::string Key(uint64_t window, int rank) {
  return absl::StrCat("cuda_ipc/window/", window, "/", rank);
}

}  // namespace

Windows::Windows(int rank, int size, std::shared_ptr<Store> store, Allocations allocations,
                 std::function<void(absl::Status)> abort)
    : rank_(rank),
      size_(size),
      store_(std::move(store)),
      allocations_(allocations),
      abort_(std::move(abort)) {}

Windows::~Windows() {
  for (auto& [key, mapped] : mappings_) cudaIpcCloseMemHandle(mapped.first);
}

std::string Windows::Prepare(const Buffer& region, const std::string& refusal,
                             Record* record, uint64_t* allocation_id) const {
  char* base = static_cast<char*>(region.data);
  const size_t bytes = region.bytes();
  record->pid = static_cast<int32_t>(getpid());
  record->bytes = bytes;
  record->address = reinterpret_cast<uint64_t>(base);
  if (bytes == 0 || base == nullptr) return "its region is empty";
  if (!refusal.empty()) return refusal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Window& w : windows_) {
      if (base < w.base + w.bytes && w.base < base + bytes) {
        return "its region overlaps a window it registered before";
      }
    }
  }
  const absl::StatusOr<Allocations::Range> allocation = allocations_.RangeOf(base);
  const absl::StatusOr<uint64_t> id = allocations_.IdOf(base);
  if (!allocation.ok() || !id.ok()) {
    return "CUDA could not find its region's allocation (cuMemGetAddressRange)";
  }
  if (base + bytes > allocation->base + allocation->bytes) {
    return "its region runs past the end of its allocation";
  }
  *allocation_id = *id;
  record->offset = static_cast<uint64_t>(base - allocation->base);
  const cudaError_t e = cudaIpcGetMemHandle(&record->handle, allocation->base);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return absl::StrCat("cudaIpcGetMemHandle refused its region's allocation (",
                        cudaGetErrorString(e), "; memory from cudaMalloc works)");
  }
  return "";
}

absl::Status Windows::Register(const Buffer& region, const std::string& refusal,
                               absl::Time deadline) {
  Record mine;
  uint64_t allocation_id = 0;
  const std::string refused = Prepare(region, refusal, &mine, &allocation_id);
  std::snprintf(mine.error, sizeof(mine.error), "%s", refused.c_str());
  uint64_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    index = made_++;
  }
  // Every rank publishes, a refusing one too, so that all fail alike.
  if (absl::Status s = store_->Set(Key(index, rank_),
                                   absl::string_view(reinterpret_cast<const char*>(&mine),
                                                     sizeof(mine)));
      !s.ok()) {
    return s;
  }
  std::vector<Record> all(size_);
  for (int r = 0; r < size_; ++r) {
    const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
    absl::StatusOr<std::string> raw = store_->Get(Key(index, r), left);
    if (!raw.ok()) return raw.status();
    if (raw->size() != sizeof(Record)) {
      return absl::InternalError(absl::StrCat("cuda_ipc: rank ", r, "'s window record has ",
                                              raw->size(), " bytes, expected ",
                                              sizeof(Record)));
    }
    std::memcpy(&all[r], raw->data(), sizeof(Record));
  }
  std::vector<std::string> problems;
  for (int r = 0; r < size_; ++r) {
    if (all[r].error[0] != '\0') problems.push_back(absl::StrCat("rank ", r, ": ", all[r].error));
  }
  for (int r = 1; r < size_; ++r) {
    if (all[r].bytes != all[0].bytes) {
      std::vector<std::string> sizes;
      for (int q = 0; q < size_; ++q) sizes.push_back(absl::StrCat(all[q].bytes));
      problems.push_back(absl::StrCat("every rank's region must have the same size; "
                                      "bytes by rank: ",
                                      absl::StrJoin(sizes, ", ")));
      break;
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc: RegisterWindow: ", absl::StrJoin(problems, "; ")));
  }
  Window w;
  w.base = static_cast<char*>(region.data);
  w.bytes = region.bytes();
  w.allocation_id = allocation_id;
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      w.regions[r] = w.base;
    } else if (all[r].pid == mine.pid) {
      w.regions[r] = reinterpret_cast<char*>(all[r].address);  // Peer access is on.
    } else {
      std::string key(reinterpret_cast<const char*>(&all[r].handle), sizeof(all[r].handle));
      auto it = mappings_.find(key);
      if (it == mappings_.end()) {
        void* mapped = nullptr;
        const cudaError_t e =
            cudaIpcOpenMemHandle(&mapped, all[r].handle, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
          cudaGetLastError();
          const absl::Status opened = absl::InternalError(absl::StrCat(
              "cuda_ipc: cudaIpcOpenMemHandle (rank ", r, "'s window): ",
              cudaGetErrorString(e)));
          abort_(opened);  // The other ranks registered it.
          return opened;
        }
        it = mappings_.emplace(key, std::make_pair(mapped, 0)).first;
      }
      ++it->second.second;
      w.mappings[r] = key;
      w.regions[r] = static_cast<char*>(it->second.first) + all[r].offset;
    }
  }
  windows_.push_back(std::move(w));
  return absl::OkStatus();
}

bool Windows::Contains(const void* base) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::any_of(windows_.begin(), windows_.end(),
                     [&](const Window& w) { return w.base == base; });
}

absl::Status Windows::Remove(const void* base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto w = std::find_if(windows_.begin(), windows_.end(),
                        [&](const Window& x) { return x.base == base; });
  if (w == windows_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda_ipc: DeregisterWindow: no window starts at ", absl::StrFormat("%p", base)));
  }
  for (const std::string& key : w->mappings) {
    auto it = mappings_.find(key);
    if (key.empty() || it == mappings_.end()) continue;
    if (--it->second.second == 0) {
      cudaIpcCloseMemHandle(it->second.first);
      mappings_.erase(it);
    }
  }
  windows_.erase(w);
  return absl::OkStatus();
}

std::optional<Windows::Placement> Windows::Find(const void* data, size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mu_);
  const Window* in = nullptr;
  for (const Window& w : windows_) {
    if (p >= w.base && p + bytes <= w.base + w.bytes) in = &w;
  }
  if (in == nullptr) return std::nullopt;
  Placement placed;
  const size_t offset = static_cast<size_t>(p - in->base);
  for (int r = 0; r < size_; ++r) placed.outputs[r] = in->regions[r] + offset;
  placed.base = in->base;
  const absl::StatusOr<uint64_t> id = allocations_.IdOf(in->base);
  placed.freed = !id.ok() || *id != in->allocation_id;
  return placed;
}

}  // namespace cuda_ipc
}  // namespace relay
