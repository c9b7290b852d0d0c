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

#include "backends/backend.h"
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
  // Values of this graph to read instead of env's (host copies of device values).
  const std::map<int, Tensor>* overrides = nullptr;
  const Tensor* lookup(const std::string& name) const;
};

struct ExecutorOptions {
  MemoryMode memory = MemoryMode::kPlanned;
  size_t plan_cache_capacity = 8;  // plans (and their arenas) kept, least recently used evicted
  PlanOptions plan;
  // The accelerator that runs every node it supports; null runs everything on the CPU.
  Backend* backend = nullptr;
  // With a backend: whether a node it cannot run may run on the CPU instead.
  bool allow_cpu_fallback = true;
  // Where the one-time fallback notices go (stderr when null).
  std::function<void(const std::string&)> log;
  // With a backend: CUDA Graph capture of planned signatures.
  CaptureMode capture = CaptureMode::kOff;
  // Checks retained staging bytes against their capture-time hash and poisons the
  // device arena before every replay.
  bool validate_replays = false;
};

struct Fallback {
  std::string node;
  std::string reason;
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
  // Nodes that ran on the CPU although a backend was given, with the reason (each once).
  std::vector<Fallback> fallbacks() const;
  CaptureReport capture_report() const;
  void release_captured_graphs();
  bool release_captured_graph(const std::vector<Tensor>& inputs);
  // The device input slots of the signature of `inputs` (capture sessions).
  std::vector<Tensor> input_slots(const std::vector<Tensor>& inputs) const;

  const Graph& graph() const { return graph_; }
  const GuardList& guards() const { return guards_; }
  const Liveness& liveness() const { return liveness_; }

 private:
  // A captured signature owns its world: the graph (with the host staging its copies
  // read), the input and output slots it reads and writes, and the arena it was
  // captured against (checked before every replay).
  struct Capture {
    std::unique_ptr<CapturedWork> work;
    std::vector<Tensor> input_slots;       // per graph input
    std::map<int, Tensor> output_slots;    // per output storage root
    const void* arena_base = nullptr;
    uint64_t arena_generation = 0;
  };
  struct CachedPlan {
    std::string signature;
    std::shared_ptr<const ExecutionPlan> plan;
    Tensor host_arena;                     // the plan's host arena, owned while the plan is cached
    std::map<int, Tensor> accel_constants;  // memoized values that device kernels read, uploaded once
    size_t eager_runs = 0;
    std::string not_capturable;            // why this signature cannot be captured ("" if it can)
    bool reported = false;
    std::unique_ptr<Capture> capture;
    std::vector<Tensor> input_slots;       // allocated on first need, kept for the binding API
  };
  // Per run: copies of values on the other device, made when a node there first needs them.
  struct RunState {
    std::vector<Tensor> env;
    std::map<int, Tensor> on_accel, on_host;
    const CachedPlan* entry = nullptr;
    bool capturing = false;  // outputs go to the capture's slots
  };
  std::vector<Tensor> run_captured(CachedPlan& entry, const std::vector<Tensor>& inputs, RunState& st,
                                   const Scope& scope) const;
  void run_steps(const CachedPlan& entry, RunState& st, const Scope& scope) const;
  std::string capturability(const CachedPlan& entry) const;
  void ensure_accel_arena(size_t bytes) const;
  void ensure_input_slots(CachedPlan& entry, const std::vector<Tensor>& inputs) const;
  std::shared_ptr<CachedPlan> cached_plan(const std::vector<Tensor>& inputs) const;
  std::vector<Tensor> finish(RunState& st, const ExecutionPlan* plan) const;
  void run_node(int step, RunState& st, const Scope& scope, const CachedPlan* planned) const;
  StepPlace decide_place(const Node& node, const std::vector<ValueType>& types) const;
  const Tensor& input_on(RunState& st, int id, bool accel) const;
  void release(RunState& st, int id) const;
  void upload_weights();
  std::vector<Tensor> evaluate_while_planning(const Node& node, const std::vector<const Tensor*>& inputs) const;

  Graph& graph_;
  std::shared_ptr<Allocator> alloc_;
  ExecutorOptions options_;
  GuardList guards_;
  Liveness liveness_;
  std::map<const Graph*, std::unique_ptr<GraphExecutor>> subgraphs_;
  std::map<int, Tensor> accel_weights_;  // initializers uploaded once at load
  mutable std::mutex fallback_mutex_;
  mutable std::vector<Fallback> fallbacks_;
  // One device arena for every signature: they run one at a time on one stream (L2).
  mutable Tensor accel_arena_;
  mutable uint64_t arena_generation_ = 0;
  mutable CaptureReport capture_stats_;
  mutable std::mutex cache_mutex_;
  mutable std::list<std::shared_ptr<CachedPlan>> cache_;  // most recently used first
  mutable PlanCacheStats cache_stats_;
};

}  // namespace onyx
