// The stepping loop: runs a plan's steps in order over one run's values, the same way
// whether the backend's stream runs them now or records them into a CUDA graph. It
// reads the plan's decisions (kernel, device, copies, output binding, releases) and
// decides only the steps of a dynamic region, whose shapes come at run time.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <vector>

#include "backends/backend.h"
#include "model/ir.h"
#include "plan/planner.h"

namespace onyx {

// One run's values by value id, on each device: a value, and its copy on the other
// device once a step there needed it. Releasing a value drops both.
struct RunEnv {
  std::vector<Tensor> host, accel;
  std::vector<Tensor>& side(bool on_accel) { return on_accel ? accel : host; }
  const std::vector<Tensor>& side(bool on_accel) const { return on_accel ? accel : host; }
  // The value on whichever device holds it (the host first), or null.
  const Tensor* find(int id) const {
    if (host[id].defined()) return &host[id];
    return accel[id].defined() ? &accel[id] : nullptr;
  }
  void release(int id) {
    host[id] = Tensor();
    accel[id] = Tensor();
  }
};

// A run's deadline and cancellation flag, checked between nodes (and, through the
// subgraph runner, between a Loop's iterations), in subgraphs too.
struct RunControl {
  double timeout_seconds = 0;  // 0: no deadline
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* cancel = nullptr;

  RunControl() = default;
  RunControl(double timeout, const std::atomic<bool>* flag);
  bool active() const { return timeout_seconds > 0 || cancel; }
  // Throws onyx::Error when the run is cancelled or past its deadline; `at` (if any)
  // is the node about to run.
  void check(const Node* at) const {
    if (cancel && cancel->load(std::memory_order_relaxed)) stop(at, true);
    if (timeout_seconds > 0 && std::chrono::steady_clock::now() > deadline) stop(at, false);
  }

 private:
  [[noreturn]] void stop(const Node* at, bool cancelled) const;
};

// The values of the enclosing graphs that a subgraph may read, looked up by name
// (always on the host: subgraphs run on the CPU), and the control of the run.
struct Scope {
  const Graph* graph = nullptr;
  const std::vector<Tensor>* env = nullptr;
  const Scope* parent = nullptr;
  const RunControl* control = nullptr;
  const Tensor* lookup(const std::string& name) const;
};

// What a run binds that the plan leaves open.
struct StepBindings {
  const Tensor* host_arena = nullptr;   // the plan's host arena
  const Tensor* accel_arena = nullptr;  // the device arena
  // Storage for the groups that hold graph outputs, by root value id (a capture's
  // slots); null: allocated on every run.
  const std::map<int, Tensor>* output_slots = nullptr;
  // Called after each step (a capture checks there what went wrong under it).
  std::function<void(const Node&)> after_step;
  // The run's deadline and cancellation (null: none).
  const RunControl* control = nullptr;
};

class StepLoop {
 public:
  // Runs a subgraph of a step's node with the enclosing values in `scope`.
  using SubgraphRun = std::function<std::vector<Tensor>(const Graph&, const std::vector<Tensor>&, const Scope&)>;
  // Told of a node of a dynamic region that runs on the CPU although there is a backend.
  using FallbackSink = std::function<void(const Node&, const std::string& why)>;

  StepLoop(const Graph& graph, Allocator& host, Backend* backend, SubgraphRun subgraphs, FallbackSink fallback)
      : graph_(graph), host_(host), backend_(backend), subgraphs_(std::move(subgraphs)), fallback_(std::move(fallback)) {}

  void run(const ExecutionPlan& plan, RunEnv& env, const StepBindings& bindings, const Scope* outer) const;

 private:
  void run_planned(const ExecutionPlan& plan, const Step& step, RunEnv& env, const StepBindings& b,
                   const Scope* outer) const;
  void run_dynamic(const Step& step, RunEnv& env, const StepBindings& b, const Scope* outer) const;
  // Value `id` on the accelerator (or the host), copied there from the other device if needed.
  const Tensor& fetch(RunEnv& env, int id, bool accel) const;
  Tensor bind_output(int id, const ValuePlan& v, bool accel, const StepBindings& b) const;
  // Runs the subgraphs of `node`; each call first checks the run's control.
  SubgraphRunner subgraph_runner(RunEnv& env, const Scope* outer, const RunControl* control, const Node& node) const;

  const Graph& graph_;
  Allocator& host_;
  Backend* backend_;
  SubgraphRun subgraphs_;
  FallbackSink fallback_;
};

}  // namespace onyx
