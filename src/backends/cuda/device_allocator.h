// Device memory for one holder: large blocks reserved from the driver (each growing
// the holder's governor lease), carved into 256-byte-aligned pieces with best fit
// and coalescing. Freed pieces return to their block, not to the driver.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "onyx/allocator.h"
#include "onyx/governor.h"

namespace onyx::cuda {

class DeviceAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 256;
  DeviceAllocator(int device, std::string holder, std::shared_ptr<MemoryGovernor> governor,
                  size_t block_bytes = 64ull << 20);
  ~DeviceAllocator() override;

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  std::string name() const override { return holder_; }
  Device device() const override { return Device::cuda(device_); }
  AllocatorStats stats() const override;
  void reset_high_water() override;
  size_t reserved_bytes() const;
  // Returns blocks with nothing allocated in them to the driver (and the governor).
  void release_unused_blocks();
  // While a CUDA graph is being captured nothing may come from or go back to the pool:
  // an allocation throws; a free (from a destructor, which cannot throw) is held back
  // and reported by take_violation().
  void set_capturing(bool capturing);
  std::string take_violation();

 private:
  struct Block {
    char* base = nullptr;
    size_t bytes = 0;
    std::map<size_t, size_t> free;  // offset -> size, coalesced
    size_t used = 0;
  };
  void* carve(Block& b, size_t bytes);

  int device_;
  std::string holder_;
  std::shared_ptr<MemoryGovernor> governor_;
  std::unique_ptr<MemoryGovernor::Lease> lease_;
  size_t block_bytes_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::map<char*, Block*> owner_;  // allocation -> its block
  AllocatorStats stats_;
  bool capturing_ = false;
  std::vector<std::pair<void*, size_t>> held_frees_;
  std::string violation_;
};

// Page-locked host memory for staging copies, under a governor lease of its own.
class PinnedAllocator final : public Allocator {
 public:
  PinnedAllocator(std::string holder, std::shared_ptr<MemoryGovernor> governor);
  ~PinnedAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  std::string name() const override { return holder_; }
  AllocatorStats stats() const override;
  void reset_high_water() override;

 private:
  std::string holder_;
  std::shared_ptr<MemoryGovernor> governor_;
  std::unique_ptr<MemoryGovernor::Lease> lease_;
  mutable std::mutex mutex_;
  AllocatorStats stats_;
};

}  // namespace onyx::cuda
