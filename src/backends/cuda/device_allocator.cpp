#include "backends/cuda/device_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/cuda_kernels.h"
#include "onyx/error.h"

namespace onyx::cuda {

DeviceAllocator::DeviceAllocator(int device, std::string holder, std::shared_ptr<MemoryGovernor> governor,
                                 size_t block_bytes)
    : device_(device), holder_(std::move(holder)), governor_(std::move(governor)), block_bytes_(block_bytes) {
  lease_ = governor_->lease(holder_, 0);
}

DeviceAllocator::~DeviceAllocator() {
  cudaSetDevice(device_);
  for (auto& b : blocks_) cudaFree(b->base);
}

void* DeviceAllocator::carve(Block& b, size_t bytes) {
  auto best = b.free.end();
  for (auto it = b.free.begin(); it != b.free.end(); ++it)
    if (it->second >= bytes && (best == b.free.end() || it->second < best->second)) best = it;
  if (best == b.free.end()) return nullptr;
  size_t offset = best->first, size = best->second;
  b.free.erase(best);
  if (size > bytes) b.free[offset + bytes] = size - bytes;
  b.used += bytes;
  return b.base + offset;
}

void* DeviceAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  ONYX_CHECK(!capturing_, "allocating ", format_bytes(bytes), " from '", holder_,
             "' during CUDA graph capture: a captured kernel would keep an address the pool may hand out again");
  void* p = nullptr;
  for (auto& b : blocks_)
    if ((p = carve(*b, need))) {
      owner_[static_cast<char*>(p)] = b.get();
      break;
    }
  if (!p) {
    size_t block = std::max(block_bytes_, need);
    lease_->resize(lease_->bytes() + block);  // throws with the holder table when over budget
    auto b = std::make_unique<Block>();
    ONYX_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t st = cudaMalloc(reinterpret_cast<void**>(&b->base), block);
    if (st != cudaSuccess) {
      lease_->resize(lease_->bytes() - block);
      throw Error(cat(holder_, " on cuda:", device_, ": cudaMalloc of ", format_bytes(block), " failed: ",
                      cudaGetErrorString(st), "; governor:\n", governor_->report()));
    }
    b->bytes = block;
    b->free[0] = block;
    p = carve(*b, need);
    owner_[static_cast<char*>(p)] = b.get();
    blocks_.push_back(std::move(b));
  }
  stats_.allocated(need);
  return p;
}

void DeviceAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t need = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_) {
    if (violation_.empty())
      violation_ = cat("freeing ", format_bytes(bytes), " to '", holder_,
                       "' during CUDA graph capture (the graph may still read it)");
    held_frees_.emplace_back(ptr, bytes);
    return;
  }
  auto it = owner_.find(static_cast<char*>(ptr));
  ONYX_ASSERT(it != owner_.end(), "device pointer returned to an allocator that did not give it");
  Block& b = *it->second;
  owner_.erase(it);
  size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - b.base);
  auto next = b.free.emplace(offset, need).first;
  // Coalesce with the neighbours.
  auto after = std::next(next);
  if (after != b.free.end() && next->first + next->second == after->first) {
    next->second += after->second;
    b.free.erase(after);
  }
  if (next != b.free.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second == next->first) {
      before->second += next->second;
      b.free.erase(next);
    }
  }
  b.used -= need;
  stats_.freed(need);
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceAllocator::reset_high_water() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.high_water_bytes = stats_.in_use_bytes;
}

size_t DeviceAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& b : blocks_) total += b->bytes;
  return total;
}

void DeviceAllocator::release_unused_blocks() {
  std::lock_guard<std::mutex> lock(mutex_);
  cudaSetDevice(device_);
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if ((*it)->used == 0) {
      cudaFree((*it)->base);
      lease_->resize(lease_->bytes() - (*it)->bytes);
      it = blocks_.erase(it);
    } else {
      ++it;
    }
  }
}

void DeviceAllocator::set_capturing(bool capturing) {
  std::vector<std::pair<void*, size_t>> frees;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    capturing_ = capturing;
    if (!capturing) frees.swap(held_frees_);
  }
  for (auto [p, n] : frees) deallocate(p, n);
}

std::string DeviceAllocator::take_violation() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string v;
  v.swap(violation_);
  return v;
}

PinnedAllocator::PinnedAllocator(std::string holder, std::shared_ptr<MemoryGovernor> governor)
    : holder_(std::move(holder)), governor_(std::move(governor)) {
  lease_ = governor_->lease(holder_, 0);
}

PinnedAllocator::~PinnedAllocator() = default;

void* PinnedAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  lease_->resize(lease_->bytes() + bytes);
  void* p = nullptr;
  cudaError_t st = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (st != cudaSuccess) {
    lease_->resize(lease_->bytes() - bytes);
    throw Error(cat(holder_, ": cudaHostAlloc of ", format_bytes(bytes), " failed: ", cudaGetErrorString(st)));
  }
  stats_.allocated(bytes);
  return p;
}

void PinnedAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  cudaFreeHost(ptr);
  lease_->resize(lease_->bytes() - bytes);
  stats_.freed(bytes);
}

AllocatorStats PinnedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void PinnedAllocator::reset_high_water() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.high_water_bytes = stats_.in_use_bytes;
}

}  // namespace onyx::cuda
