#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include "onyx/allocator.h"
#include "onyx/error.h"

namespace onyx {

static constexpr size_t kCpuAlignment = 64;

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  // The bytes are counted before they are asked for, so two threads cannot both pass the budget.
  const size_t before = in_use_.fetch_add(bytes);
  const size_t budget = budget_.load();
  if (bytes > budget || before > budget - bytes) {
    in_use_.fetch_sub(bytes);
    throw HostBudgetExceeded("an allocation", bytes, budget, before);
  }
  void* p = bytes > SIZE_MAX - kCpuAlignment
                ? nullptr
                : std::aligned_alloc(kCpuAlignment, (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
  if (!p) {
    in_use_.fetch_sub(bytes);
    throw Error(cat("cpu allocator: out of memory allocating ", format_bytes(bytes), " (", format_bytes(before),
                    " in use)"));
  }
  const size_t now = before + bytes;
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

size_t default_host_memory_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return SIZE_MAX;  // unknown: no default limit
  const double physical = static_cast<double>(pages) * static_cast<double>(page);
  return static_cast<size_t>(physical * 0.8);
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double b = static_cast<double>(bytes);
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

}  // namespace onyx
