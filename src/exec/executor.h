// Runs a graph: finds (or makes) the plan of the inputs' signature in the plan cache,
// runs its steps through the stepping loop (eagerly, or through the signature's
// capture state, which replays a CUDA graph), and hands the outputs over where the
// caller wants them, with one synchronization per run.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "cpu/thread_pool.h"
#include "exec/capture.h"
#include "exec/notices.h"
#include "exec/plan_cache.h"
#include "exec/step_loop.h"
#include "model/ir.h"
#include "onyx/session.h"
#include "ops/registry.h"
#include "plan/planner.h"

namespace onyx {

struct Fallback {
  std::string node;
  std::string reason;
};

// Device copies of initializers, by the host bytes they copy: executors of graphs that
// share weights (a decoder and its rewritten twin) upload each weight once.
using DeviceWeights = std::map<const void*, Tensor>;

class GraphExecutor {
 public:
  // Resolves every node (subgraphs too) against `registry`. With a backend, every node
  // it can run runs there, and the initializers its kernels read are uploaded now.
  GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> host,
                const SessionOptions& options = {}, Backend* backend = nullptr,
                std::shared_ptr<DeviceWeights> shared_weights = nullptr);
  GraphExecutor(const GraphExecutor&) = delete;
  GraphExecutor& operator=(const GraphExecutor&) = delete;

  // `inputs` are in graph.inputs order, on the host or on the backend's device; an
  // undefined tensor means "use the initializer of the same name" (inputs with
  // defaults). `places` says per graph output where it goes (null: the host); `bound`
  // per graph output a tensor of the caller's to write it into (undefined: none; see
  // RunOptions::bound_outputs). The outputs never lie in an arena or a capture slot: the
  // caller owns them.
  // `control` is the run's deadline and cancellation (a subgraph's comes with `outer`).
  // `finish` false (a backend's run whose outputs all stay on the device): the run returns
  // with its work enqueued, unsynchronized; the caller reads the device's error word later
  // (Backend::finish, or a DeviceReadback's).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Scope* outer = nullptr,
                          const std::vector<OutputPlace>* places = nullptr, const std::vector<Tensor>* bound = nullptr,
                          const RunControl* control = nullptr, bool finish = true);

  // The plan a run with these inputs uses (made and cached if needed).
  std::shared_ptr<const ExecutionPlan> plan_for(const std::vector<Tensor>& inputs);
  // The same for inputs of these types, fed where a run feeds them by default (the
  // host; the input slots in a capture session).
  std::shared_ptr<const ExecutionPlan> plan_for(const std::vector<ValueType>& inputs);
  PlanCacheStats plan_cache_stats() const { return cache_.stats(); }
  // The plan of the latest run (null before any).
  std::shared_ptr<const ExecutionPlan> latest_plan() const {
    return cache_.entries().empty() ? nullptr : cache_.entries().front()->plan;
  }
  // Nodes that ran on the CPU although a backend was given, with the reason (each once).
  const std::vector<Fallback>& fallbacks() const { return fallbacks_; }
  CaptureReport capture_report() const;
  // Drops every cached plan with what it holds (host arenas, capture state) and the device
  // arena: a graph that runs once per request (an encoder) gives its memory back between runs.
  void release_plans();
  void release_captured_graphs();
  bool release_captured_graph(const std::vector<Tensor>& inputs);
  // The device input slots of the signature of `inputs` (capture sessions).
  std::vector<Tensor> input_slots(const std::vector<Tensor>& inputs);
  const Graph& graph() const { return graph_; }

 private:
  struct Signature {
    std::string key;
    std::vector<ValueType> types;
    std::vector<bool> on_accel;
    bool has_outer = false;
    std::vector<ValueType> outer;
  };
  Signature signature(std::vector<ValueType> types, std::vector<bool> on_accel, const Scope* outer) const;
  Signature signature_of(const std::vector<Tensor>& inputs, const Scope* outer) const;
  // `control`: the deadline and cancellation of the run that needs the plan (planning may
  // run subgraphs: a Loop whose inputs are all known is computed then).
  std::shared_ptr<PreparedPlan> prepared(const Signature& sig, const RunControl* control = nullptr);
  std::unique_ptr<PreparedPlan> prepare(const Signature& sig, const RunControl* control);
  RunEnv start_env(const ExecutionPlan& plan);
  void bind_inputs(RunEnv& env, const std::vector<Tensor>& inputs, const Scope* outer) const;
  bool matches(const PreparedPlan& e, const std::vector<Tensor>& inputs, const Scope* outer) const;
  // The graph outputs as the run left them, into `outputs`.
  void collect(const PreparedPlan& e, const RunEnv* env, const std::map<int, Tensor>* slots,
               std::vector<Tensor>& outputs) const;
  std::vector<Tensor> deliver(const PreparedPlan& e, const std::vector<Tensor>& outputs, bool replayed, bool finish,
                              const std::vector<OutputPlace>* places, const std::vector<Tensor>* bound,
                              const std::map<int, Tensor>& direct);
  // The bound outputs that the steps can write in place (by output group root).
  std::map<int, Tensor> direct_bindings(const ExecutionPlan& plan, const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& bound) const;
  void report_fallback(const Node& node, const std::string& why);
  void upload_weights();
  void ensure_device_arena(size_t bytes);
  SignatureCapture::Arena arena() const;
  GraphExecutor& subgraph(const Graph& g) const;

  Graph& graph_;
  std::shared_ptr<Allocator> host_;
  SessionOptions options_;
  Backend* backend_;
  bool capture_;                          // CUDA Graph capture of this (top-level) graph's signatures
  std::shared_ptr<DeviceWeights> device_weights_;
  std::vector<Tensor> weights_on_accel_;  // per value id: initializers uploaded once at load
  std::vector<bool> resident_on_accel_;
  std::map<const Graph*, std::unique_ptr<GraphExecutor>> subgraphs_;
  // The CPU kernels' threads (top-level graphs; a subgraph runs on its parent's).
  std::unique_ptr<cpu::ThreadPool> pool_;
  Notices notices_;
  std::vector<Fallback> fallbacks_;
  // One device arena for every signature: they run one at a time on one stream (L2).
  Tensor device_arena_;
  uint64_t arena_generation_ = 0;
  CaptureReport capture_stats_;
  PlanCache cache_;
  StepLoop loop_;
};

}  // namespace onyx
