#include <cstdlib>
#include <new>

#include "onyx/allocator.h"
#include "onyx/error.h"

namespace onyx {

static constexpr size_t kCpuAlignment = 64;

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  if (!p) throw Error(cat("cpu allocator: out of memory allocating ", bytes, " bytes (", in_use_.load(),
                          " bytes in use)"));
  size_t now = in_use_.fetch_add(bytes) + bytes;
  size_t hw = high_water_.load();
  while (now > hw && !high_water_.compare_exchange_weak(hw, now)) {
  }
  allocations_.fetch_add(1);
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  std::free(ptr);
  in_use_.fetch_sub(bytes);
  frees_.fetch_add(1);
}

AllocatorStats CpuAllocator::stats() const {
  return {in_use_.load(), high_water_.load(), allocations_.load(), frees_.load()};
}

void CpuAllocator::reset_high_water() { high_water_.store(in_use_.load()); }

CpuAllocator& cpu_allocator() {
  static auto* instance = new std::shared_ptr<CpuAllocator>(make_cpu_allocator());  // never destroyed
  return **instance;
}

std::shared_ptr<CpuAllocator> make_cpu_allocator() { return std::make_shared<CpuAllocator>(); }

}  // namespace onyx
