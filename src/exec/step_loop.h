// The stepping loop: runs a plan's steps in order over one run's values, the same way
// whether the backend's stream runs them now or records them into a CUDA graph. It
// reads the plan's decisions (kernel, device, copies, output binding, releases) and
// decides only the steps of a dynamic region, whose shapes come at run time.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backends/backend.h"
#include "model/ir.h"
#include "plan/planner.h"

namespace onyx {

// One run's values by value id, on each device: a value, and its copy on the other
// device once a step there needed it. Releasing a value drops both. Writes go through
// slot() and release(), which note the value: resetting the env for the next run visits
// only the values a run wrote.
class RunEnv {
 public:
  RunEnv() = default;
  // Every value absent, for a graph of `values` values.
  explicit RunEnv(size_t values) : host_(values), accel_(values), noted_(values, 0) {}

  const std::vector<Tensor>& side(bool on_accel) const { return on_accel ? accel_ : host_; }
  const std::vector<Tensor>& host() const { return host_; }
  // The value on whichever device holds it (the host first), or null.
  const Tensor* find(int id) const {
    if (host_[id].defined()) return &host_[id];
    return accel_[id].defined() ? &accel_[id] : nullptr;
  }
  // Value `id`'s slot on a device, to write.
  Tensor& slot(bool on_accel, int id) {
    note(id);
    return on_accel ? accel_[id] : host_[id];
  }
  void release(int id) {
    note(id);
    host_[id] = Tensor();
    accel_[id] = Tensor();
  }
  // Makes the values written since the last reset those of `start` again (an env made as
  // a copy of `start`), dropping what the run held: its inputs, outputs and scratch.
  void reset_to(const RunEnv& start);

  // The step loop's scratch: one step's inputs and outputs, and the run's outputs as
  // collected; sized by the first run that an env serves, reused by the next.
  std::vector<const Tensor*> step_inputs;
  std::vector<Tensor> step_outputs;
  std::vector<Tensor> run_outputs;

 private:
  void note(int id) {
    if (noted_[id]) return;
    noted_[id] = 1;
    written_.push_back(id);
  }

  std::vector<Tensor> host_, accel_;
  std::vector<uint8_t> noted_;  // per value id: in written_
  std::vector<int> written_;
};

// The envs of a plan's finished runs, each reset to the plan's start values, for its next
// runs: a run takes one (or a fresh copy of the start values) and gives it back when it
// ends, so two runs at once never share one, and a run in the steady state allocates none.
class RunEnvPool {
 public:
  std::unique_ptr<RunEnv> take(const RunEnv& start);
  // Resets `env` to `start` first; an env that cannot be reset is dropped.
  void give_back(std::unique_ptr<RunEnv> env, const RunEnv& start) noexcept;

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<RunEnv>> spare_;
};

// A run's env, given back to its pool when the run ends (however it ends).
class RunEnvLease {
 public:
  RunEnvLease(RunEnvPool& pool, const RunEnv& start) : pool_(pool), start_(start), env_(pool.take(start)) {}
  ~RunEnvLease() { pool_.give_back(std::move(env_), start_); }
  RunEnvLease(const RunEnvLease&) = delete;
  RunEnvLease& operator=(const RunEnvLease&) = delete;
  RunEnv& operator*() const { return *env_; }

 private:
  RunEnvPool& pool_;
  const RunEnv& start_;
  std::unique_ptr<RunEnv> env_;
};

// A run's deadline and cancellation flag, checked between nodes (and, through the
// subgraph runner, between a Loop's iterations), in subgraphs too.
struct RunControl {
  double timeout_seconds = 0;  // 0: no deadline
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* cancel = nullptr;
  // Profiling (RunOptions::profile): each top-level step's node index and seconds, appended.
  std::vector<std::pair<int, double>>* profile = nullptr;

  RunControl() = default;
  RunControl(double timeout, const std::atomic<bool>* flag);
  bool active() const { return timeout_seconds > 0 || cancel || profile; }
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
  // Per value id, each value's shape and the tensors of the host arena's values, made
  // once per plan (null: made by each step).
  const std::vector<std::optional<Shape>>* shapes = nullptr;
  const std::vector<Tensor>* host_arena_values = nullptr;
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
  // Value `id`'s shape: the run's precomputed one where the bindings have it, else its plan's `v`.
  static Shape planned_shape(int id, const ValuePlan& v, const StepBindings& b);
  // Runs the subgraphs of `node`; each call first checks the run's control.
  SubgraphRunner subgraph_runner(RunEnv& env, const Scope* outer, const RunControl* control, const Node& node) const;

  const Graph& graph_;
  Allocator& host_;
  Backend* backend_;
  SubgraphRun subgraphs_;
  FallbackSink fallback_;
};

}  // namespace onyx
