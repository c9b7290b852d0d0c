// Memory comes from an allocator and goes back to the same one (DESIGN L4).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "onyx/device.h"
#include "onyx/error.h"

namespace onyx {

struct AllocatorStats {
  size_t in_use_bytes = 0;      // bytes currently allocated
  size_t high_water_bytes = 0;  // the most ever allocated at once (since the last reset)
  size_t allocations = 0;
  size_t frees = 0;
  // The bookkeeping of an allocator that counts under its own lock.
  void allocated(size_t bytes) {
    in_use_bytes += bytes;
    if (in_use_bytes > high_water_bytes) high_water_bytes = in_use_bytes;
    ++allocations;
  }
  void freed(size_t bytes) {
    in_use_bytes -= bytes;
    ++frees;
  }
};

// Allocators owned by a shared_ptr are kept alive by the storages they
// handed out, so a tensor may outlive the session that made it.
class Allocator : public std::enable_shared_from_this<Allocator> {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` bytes (nullptr for 0 bytes); throws onyx::Error when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  // Returns memory obtained from allocate() with the same byte count.
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual std::string name() const = 0;
  // Where the memory lives; kernels of other devices must not touch it.
  virtual Device device() const { return Device::cpu(); }
  virtual AllocatorStats stats() const = 0;
  // Starts a new high-water measurement at the current in-use level.
  virtual void reset_high_water() = 0;
};

// "1.50 GiB"
std::string format_bytes(size_t bytes);

// An allocation that a host memory budget refused: `subject` (an allocation, a tensor,
// a node's output) needs `bytes`, with `in_use` already held against `budget`.
class HostBudgetExceeded : public Error {
 public:
  HostBudgetExceeded(const std::string& subject, size_t bytes, size_t budget, size_t in_use)
      : Error(cat(subject, " needs ", format_bytes(bytes), ", more than the session's host memory budget of ",
                  format_bytes(budget), " (", format_bytes(in_use), " in use)")),
        bytes_(bytes), budget_(budget), in_use_(in_use) {}
  // The same refusal, said of another subject.
  HostBudgetExceeded about(const std::string& subject) const { return {subject, bytes_, budget_, in_use_}; }
  size_t bytes() const { return bytes_; }
  size_t budget() const { return budget_; }

 private:
  size_t bytes_, budget_, in_use_;
};

// Runs fn() (which allocates); a budget refusal escaping it is said of `subject`.
template <class Fn>
decltype(auto) allocating(const std::string& subject, Fn&& fn) {
  try {
    return fn();
  } catch (const HostBudgetExceeded& e) {
    throw e.about(subject);
  }
}

// The same with the subject made by subject() only when a refusal happens, for allocations on
// a run's hot path (no string built per run).
template <class SubjectFn, class Fn>
  requires std::is_invocable_r_v<std::string, SubjectFn>
decltype(auto) allocating(SubjectFn&& subject, Fn&& fn) {
  try {
    return fn();
  } catch (const HostBudgetExceeded& e) {
    throw e.about(subject());
  }
}

// Host memory, 64-byte aligned, with thread-safe accounting. An allocation that would
// take the bytes in use past the budget (unlimited unless set) is refused with
// HostBudgetExceeded, before any memory is asked of the system.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  std::string name() const override { return "cpu"; }
  AllocatorStats stats() const override;
  void reset_high_water() override;
  void set_budget(size_t bytes) { budget_.store(bytes); }
  size_t budget() const { return budget_.load(); }

 private:
  std::atomic<size_t> budget_{SIZE_MAX};
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> high_water_{0};
  std::atomic<size_t> allocations_{0};
  std::atomic<size_t> frees_{0};
};

// The process-wide host allocator that tensors use unless told otherwise.
CpuAllocator& cpu_allocator();
std::shared_ptr<CpuAllocator> make_cpu_allocator();
// The host memory a session may hold by default: 80% of the physical memory.
size_t default_host_memory_budget();

}  // namespace onyx
