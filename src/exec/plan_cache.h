// The plans of recent input-shape signatures, each with what it holds while cached:
// its host arena, the constants its device steps read (uploaded once), the values
// every run starts from, and its capture state. Least recently used first out.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "exec/capture.h"
#include "exec/step_loop.h"
#include "plan/planner.h"

namespace onyx {

struct PreparedPlan {
  std::string signature;
  // What the signature's key spells: the inputs' types and devices (as the plan takes them),
  // and, for a subgraph's plan, the enclosing values' types. A run compares its inputs with
  // these, building no key.
  std::vector<ValueType> input_types;
  std::vector<bool> inputs_on_accel;
  bool has_outer = false;
  std::vector<ValueType> outer_types;
  std::shared_ptr<const ExecutionPlan> plan;
  Tensor host_arena;                          // owned while the plan is cached
  RunEnv start;                               // initializers, constants and their device copies, by value id
  // Per value id, what a run binds without building it: each value's shape (values of a
  // known shape), and the tensor of each value in the host arena.
  std::vector<std::optional<Shape>> shapes;
  std::vector<Tensor> host_arena_values;
  RunEnvPool envs;                            // the values of runs, reused run after run
  std::unique_ptr<SignatureCapture> capture;  // capture sessions only
};

struct PlanCacheStats {
  size_t hits = 0, misses = 0, evictions = 0, entries = 0;
  size_t arena_bytes = 0;  // held by the cached plans
};

class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}
  // The entry for `signature`, made by `make` on a miss (the least recently used entry
  // beyond the capacity is dropped, with everything it holds).
  std::shared_ptr<PreparedPlan> get(const std::string& signature,
                                    const std::function<std::unique_ptr<PreparedPlan>()>& make);
  // The first entry (most recently used first) that `matches` accepts, counted as a hit, or
  // null: the way a run finds its plan without spelling its signature.
  template <class Matches>
  std::shared_ptr<PreparedPlan> find_matching(Matches&& matches) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (!matches(**it)) continue;
      ++stats_.hits;
      if (it != entries_.begin()) entries_.splice(entries_.begin(), entries_, it);
      return entries_.front();
    }
    return nullptr;
  }
  // The entry for `signature` if cached (no statistics, no reordering).
  PreparedPlan* find(const std::string& signature);
  PlanCacheStats stats() const;
  // Drops every entry, with everything it holds.
  void clear() { entries_.clear(); }
  const std::list<std::shared_ptr<PreparedPlan>>& entries() const { return entries_; }

 private:
  size_t capacity_;
  std::list<std::shared_ptr<PreparedPlan>> entries_;  // most recently used first
  PlanCacheStats stats_;
};

}  // namespace onyx
