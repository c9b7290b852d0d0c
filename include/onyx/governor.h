// The memory governor: one budget per device, and a named lease for every
// standing pool drawn from it (DESIGN L9).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "onyx/allocator.h"

namespace onyx {

class MemoryGovernor : public std::enable_shared_from_this<MemoryGovernor> {
 public:
  // A claim on part of the budget by one holder. It ends (and its bytes return
  // to the budget) when the Lease is destroyed.
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const std::string& holder() const { return holder_; }
    size_t bytes() const { return bytes_; }
    // Grows or shrinks the claim; growing past the budget throws and leaves it unchanged.
    void resize(size_t bytes);

   private:
    friend class MemoryGovernor;
    Lease(std::shared_ptr<MemoryGovernor> g, std::string holder, size_t bytes)
        : governor_(std::move(g)), holder_(std::move(holder)), bytes_(bytes) {}
    std::shared_ptr<MemoryGovernor> governor_;
    std::string holder_;
    size_t bytes_;
  };

  static std::shared_ptr<MemoryGovernor> create(std::string device, size_t budget_bytes);

  // Leases `bytes` for `holder`; each holder holds at most one lease at a time.
  // Throws onyx::Error listing every holder and its bytes when it does not fit.
  std::unique_ptr<Lease> lease(const std::string& holder, size_t bytes);

  size_t budget() const;
  void set_budget(size_t bytes);
  size_t leased() const;
  // The most ever leased at once.
  size_t peak_leased() const;
  size_t lease_count() const;
  // One line per holder: name and bytes; then the total and the budget.
  std::string report() const;

 private:
  MemoryGovernor(std::string device, size_t budget) : device_(std::move(device)), budget_(budget) {}
  void change(const std::string& holder, size_t old_bytes, size_t new_bytes);  // lock held by caller
  std::string refusal(const std::string& holder, size_t want) const;
  std::string report_locked() const;

  mutable std::mutex mutex_;
  std::string device_;
  size_t budget_;
  size_t leased_ = 0;
  size_t peak_ = 0;
  std::map<std::string, size_t> holders_;
};

// format_bytes() ("1.50 GiB") is declared in onyx/allocator.h.

}  // namespace onyx
