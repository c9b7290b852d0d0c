#include "onyx/governor.h"

#include <algorithm>

#include <cstdio>

#include "onyx/error.h"

namespace onyx {

std::shared_ptr<MemoryGovernor> MemoryGovernor::create(std::string device, size_t budget_bytes) {
  return std::shared_ptr<MemoryGovernor>(new MemoryGovernor(std::move(device), budget_bytes));
}

std::string MemoryGovernor::report_locked() const {
  std::string s;
  for (const auto& [holder, bytes] : holders_) s += cat("  ", holder, ": ", format_bytes(bytes), " (", bytes, " B)\n");
  s += cat("  total leased: ", format_bytes(leased_), " of a ", format_bytes(budget_), " budget on ", device_);
  return s;
}

std::string MemoryGovernor::refusal(const std::string& holder, size_t want) const {
  return cat("memory governor of ", device_, ": ", holder, " asked for ", format_bytes(want), " more, but only ",
             format_bytes(budget_ > leased_ ? budget_ - leased_ : 0), " of the budget is left; holders:\n",
             report_locked());
}

void MemoryGovernor::change(const std::string& holder, size_t old_bytes, size_t new_bytes) {
  if (new_bytes > old_bytes && leased_ + (new_bytes - old_bytes) > budget_)
    throw Error(refusal(holder, new_bytes - old_bytes));
  leased_ = leased_ - old_bytes + new_bytes;
  peak_ = std::max(peak_, leased_);
  holders_[holder] = holders_[holder] - old_bytes + new_bytes;
}

std::unique_ptr<MemoryGovernor::Lease> MemoryGovernor::lease(const std::string& holder, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ONYX_ASSERT(!holders_.count(holder), "holder '", holder, "' leased twice from ", device_);
  change(holder, 0, bytes);
  return std::unique_ptr<Lease>(new Lease(shared_from_this(), holder, bytes));
}

MemoryGovernor::Lease::~Lease() {
  std::lock_guard<std::mutex> lock(governor_->mutex_);
  governor_->leased_ -= bytes_;
  governor_->holders_.erase(holder_);
}

void MemoryGovernor::Lease::resize(size_t bytes) {
  std::lock_guard<std::mutex> lock(governor_->mutex_);
  governor_->change(holder_, bytes_, bytes);
  bytes_ = bytes;
}

size_t MemoryGovernor::budget() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return budget_;
}

void MemoryGovernor::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = bytes;
}

size_t MemoryGovernor::leased() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return leased_;
}

size_t MemoryGovernor::peak_leased() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

size_t MemoryGovernor::lease_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return holders_.size();
}

std::string MemoryGovernor::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_locked();
}

}  // namespace onyx
