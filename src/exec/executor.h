// Runs a graph node by node on the CPU. In planned mode (the default for a
// top-level graph) each input-shape signature gets an ExecutionPlan and one arena
// where every intermediate sits at a fixed offset; values whose shapes are known
// only at run time, and every value in release mode, are allocated when produced
// and returned to the allocator right after their last reader (DESIGN L3, L4).
#pragma once

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "model/ir.h"
#include "onyx/session.h"
#include "ops/registry.h"
#include "plan/liveness.h"
#include "plan/planner.h"

namespace onyx {

// The values of the enclosing graphs that a subgraph may read, looked up by name.
struct Scope {
  const Graph* graph = nullptr;
  const std::vector<Tensor>* env = nullptr;
  const Scope* parent = nullptr;
  const Tensor* lookup(const std::string& name) const;
};

struct ExecutorOptions {
  MemoryMode memory = MemoryMode::kPlanned;
  size_t plan_cache_capacity = 8;  // plans (and their arenas) kept, least recently used evicted
  PlanOptions plan;
};

struct PlanCacheStats {
  size_t hits = 0, misses = 0, evictions = 0, entries = 0;
  size_t arena_bytes = 0;  // held by the cached plans
};

class GraphExecutor {
 public:
  // Resolves every node (recursively into subgraphs) against `registry`.
  GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> alloc,
                ExecutorOptions options = {});

  // `inputs` are in graph.inputs order; an undefined tensor means "use the
  // initializer of the same name" (inputs with defaults). Returns the outputs in
  // graph.outputs order; none of them lies in an arena.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Scope* outer = nullptr) const;

  // The plan that a run with these inputs uses (made and cached if needed).
  std::shared_ptr<const ExecutionPlan> plan_for(const std::vector<Tensor>& inputs) const;
  static ExecutionPlan make_plan(const Graph& graph, const std::vector<ValueType>& inputs, const PlanOptions& options,
                                 const GraphExecutor* executor);
  PlanCacheStats plan_cache_stats() const;

  const Graph& graph() const { return graph_; }
  const GuardList& guards() const { return guards_; }
  const Liveness& liveness() const { return liveness_; }

 private:
  struct CachedPlan {
    std::string signature;
    std::shared_ptr<const ExecutionPlan> plan;
    Tensor arena;  // arena_bytes of the allocator's memory, owned while the plan is cached
  };
  std::shared_ptr<CachedPlan> cached_plan(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> run_planned(const CachedPlan& entry, std::vector<Tensor>& env, const Scope& scope) const;
  void run_node(int step, std::vector<Tensor>& env, const Scope& scope, const CachedPlan* planned) const;
  std::vector<Tensor> evaluate_while_planning(const Node& node, const std::vector<const Tensor*>& inputs) const;

  Graph& graph_;
  std::shared_ptr<Allocator> alloc_;
  ExecutorOptions options_;
  GuardList guards_;
  Liveness liveness_;
  std::map<const Graph*, std::unique_ptr<GraphExecutor>> subgraphs_;
  mutable std::mutex cache_mutex_;
  mutable std::list<std::shared_ptr<CachedPlan>> cache_;  // most recently used first
  mutable PlanCacheStats cache_stats_;
};

}  // namespace onyx
