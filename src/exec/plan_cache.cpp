#include "exec/plan_cache.h"

namespace onyx {

std::shared_ptr<PreparedPlan> PlanCache::get(const std::string& signature,
                                             const std::function<std::unique_ptr<PreparedPlan>()>& make) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->signature != signature) continue;
    ++stats_.hits;
    entries_.splice(entries_.begin(), entries_, it);
    return entries_.front();
  }
  ++stats_.misses;
  std::shared_ptr<PreparedPlan> entry = make();
  entry->signature = signature;
  entries_.push_front(entry);
  while (entries_.size() > capacity_) {
    entries_.pop_back();
    ++stats_.evictions;
  }
  return entry;
}

PreparedPlan* PlanCache::find(const std::string& signature) {
  for (auto& e : entries_)
    if (e->signature == signature) return e.get();
  return nullptr;
}

PlanCacheStats PlanCache::stats() const {
  PlanCacheStats s = stats_;
  s.entries = entries_.size();
  s.arena_bytes = 0;
  for (const auto& e : entries_) s.arena_bytes += e->plan->host_arena.bytes + e->plan->accel_arena.bytes;
  return s;
}

}  // namespace onyx
