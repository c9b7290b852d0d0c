#include "exec/step_loop.h"

#include <span>

#include "model/onnx_schema.h"
#include "ops/compute.h"

namespace onyx {

RunControl::RunControl(double timeout, const std::atomic<bool>* flag) : timeout_seconds(timeout), cancel(flag) {
  ONYX_CHECK(timeout >= 0, "the run's timeout must be >= 0 seconds, not ", timeout);
  if (timeout > 0)
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout));
}

void RunControl::stop(const Node* at, bool cancelled) const {
  const std::string where = at ? cat(" at ", at->describe()) : "";
  if (cancelled) throw Error(cat("run cancelled", where));
  throw Error(cat("run exceeded its deadline of ", timeout_seconds, " s", where));
}

const Tensor* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent) {
    int id = s->graph->find_value(name);
    if (id >= 0 && (*s->env)[id].defined()) return &(*s->env)[id];
  }
  return nullptr;
}

namespace {

// Whether two tensors are the same value: the same bytes of the same storage, seen the same way.
bool same_value(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.element_dtype() == b.element_dtype() && a.storage() == b.storage() &&
         a.raw() == b.raw() && a.shape() == b.shape();
}

// Makes `value` `start` again, copying only when it differs.
void reset_value(Tensor& value, const Tensor& start) {
  if (!start.defined()) {
    if (value.defined()) value = Tensor();
  } else if (!same_value(value, start)) {
    value = start;
  }
}

}  // namespace

void RunEnv::reset_to(const RunEnv& start) {
  for (int id : written_) {
    reset_value(host_[id], start.host_[id]);
    reset_value(accel_[id], start.accel_[id]);
    noted_[id] = 0;
  }
  written_.clear();
  for (Tensor& t : step_outputs) t = Tensor();
  run_outputs.clear();
}

std::unique_ptr<RunEnv> RunEnvPool::take(const RunEnv& start) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_.empty()) {
      std::unique_ptr<RunEnv> env = std::move(spare_.back());
      spare_.pop_back();
      return env;
    }
  }
  return std::make_unique<RunEnv>(start);
}

void RunEnvPool::give_back(std::unique_ptr<RunEnv> env, const RunEnv& start) noexcept {
  try {
    env->reset_to(start);
    std::lock_guard<std::mutex> lock(mutex_);
    spare_.push_back(std::move(env));
  } catch (...) {  // out of memory: the env goes, with what it holds
  }
}

void StepLoop::run(const ExecutionPlan& plan, RunEnv& env, const StepBindings& b, const Scope* outer) const {
  // Profiled: the top-level graph's steps that run a kernel (a subgraph's time is its node's).
  std::vector<std::pair<int, double>>* profile = b.control && !outer ? b.control->profile : nullptr;
  for (const Step& step : plan.steps) {
    const Node& node = graph_.nodes[step.node];
    if (b.control) b.control->check(&node);
    const bool timed = profile && step.place != StepPlace::kNone;
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    with_lazy_context([&] { return node.describe(); }, [&] {
      if (step.place == StepPlace::kRunTime) run_dynamic(step, env, b, outer);
      else run_planned(plan, step, env, b, outer);
      if (timed && backend_) {  // the device's work for this step, not only its launch
        const std::string errors = backend_->finish();
        ONYX_CHECK(errors.empty(), "the device reported: ", errors);
      }
    });
    if (timed) profile->emplace_back(step.node, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (int id : step.release_after) env.release(id);
    if (b.after_step) b.after_step(node);
  }
}

const Tensor& StepLoop::fetch(RunEnv& env, int id, bool accel) const {
  if (const Tensor& there = env.side(accel)[id]; there.defined()) return there;
  Tensor& want = env.slot(accel, id);
  const Tensor& have = env.side(!accel)[id];
  ONYX_ASSERT(have.defined(), "value '", graph_.values[id].name, "' has no value on either device");
  ONYX_ASSERT(backend_, "value '", graph_.values[id].name, "' is on a device, but there is no backend");
  if (accel) {
    ONYX_CHECK(!dtype_is_object(have.dtype()), dtype_name(have.dtype()), " values cannot move to ", backend_->device().str());
    want = Tensor(have.dtype(), have.shape(), backend_->allocator());
    backend_->copy_from_host(want.raw(), have.raw(), have.bytes());
  } else {
    want = Tensor(have.dtype(), have.shape(), host_);
    backend_->copy_to_host(want.raw(), have.raw(), have.bytes());
  }
  return want;
}

Shape StepLoop::planned_shape(int id, const ValuePlan& v, const StepBindings& b) {
  if (b.shapes && (*b.shapes)[id]) return *(*b.shapes)[id];
  return v.type.shape.to_shape();  // asserts that the shape is known
}

// A planned output's storage: its arena bytes, its group's slot, or a fresh allocation.
Tensor StepLoop::bind_output(int id, const ValuePlan& v, bool accel, const StepBindings& b) const {
  if (v.kind == ValueKind::kArena && !v.on_accel && b.host_arena_values && (*b.host_arena_values)[id].defined())
    return (*b.host_arena_values)[id];
  const Shape shape = planned_shape(id, v, b);
  switch (v.kind) {
    case ValueKind::kArena: {
      if (v.bytes == 0)  // no bytes to place (an empty tensor)
        return Tensor::borrow(v.type.dtype, shape, nullptr, nullptr, v.on_accel ? backend_->device() : Device::cpu());
      const Tensor* arena = v.on_accel ? b.accel_arena : b.host_arena;
      ONYX_ASSERT(arena && arena->defined(), "the plan places a value in an arena that this run has not");
      char* base = static_cast<char*>(arena->raw());
      return Tensor::borrow(v.type.dtype, shape, base + v.offset, arena->storage(), arena->device());
    }
    case ValueKind::kOutput:
      if (b.output_slots) {
        auto slot = b.output_slots->find(v.root);
        if (slot != b.output_slots->end())
          return Tensor::borrow(v.type.dtype, shape, slot->second.raw(), slot->second.storage(), slot->second.device());
      }
      [[fallthrough]];
    case ValueKind::kAllocated:
      return allocating([&] { return cat("output '", graph_.values[id].name, "'"); },
                        [&] { return Tensor(v.type.dtype, shape, accel ? backend_->allocator() : host_); });
    default:
      ONYX_ASSERT(false, "a planned step produces a value of kind ", value_kind_name(v.kind));
  }
  return Tensor();
}

SubgraphRunner StepLoop::subgraph_runner(RunEnv& env, const Scope* outer, const RunControl* control,
                                         const Node& node) const {
  return [this, &env, outer, control, &node](const Graph& g, const std::vector<Tensor>& in) {
    if (control) control->check(&node);  // between a Loop's (or Scan's) iterations
    Scope scope{&graph_, &env.host(), outer, control};
    return subgraphs_(g, in, scope);
  };
}

void StepLoop::run_planned(const ExecutionPlan& plan, const Step& step, RunEnv& env, const StepBindings& b,
                           const Scope* outer) const {
  const Node& node = graph_.nodes[step.node];
  for (int id : step.to_host) fetch(env, id, false);
  for (int id : step.to_accel) fetch(env, id, true);
  if (step.place == StepPlace::kNone) {  // views: the output shares its input's storage, on each device holding it
    for (auto [o, i] : step.views) {
      int in = node.inputs[i], out = node.outputs[o];
      if (in < 0 || out < 0) continue;
      const Shape shape = planned_shape(out, plan.values[out], b);
      ONYX_ASSERT(env.find(in), "input ", i, " ('", graph_.values[in].name, "') has no value");
      for (bool accel : {false, true})
        if (const Tensor& src = env.side(accel)[in]; src.defined()) env.slot(accel, out) = src.view(shape);
    }
    return;
  }
  const bool accel = step.place == StepPlace::kAccel;
  const std::vector<Tensor>& side = env.side(accel);
  // The step's inputs and outputs in the run's scratch lists (grown once, never shrunk).
  const size_t n_in = node.inputs.size(), n_out = node.outputs.size();
  if (env.step_inputs.size() < n_in) env.step_inputs.resize(n_in);
  if (env.step_outputs.size() < n_out) env.step_outputs.resize(n_out);
  const std::span<const Tensor*> inputs(env.step_inputs.data(), n_in);
  const std::span<Tensor> outputs(env.step_outputs.data(), n_out);
  for (size_t i = 0; i < n_in; ++i) {
    int id = node.inputs[i];
    inputs[i] = nullptr;
    if (id < 0) continue;
    ONYX_ASSERT(side[id].defined(), "input ", i, " ('", graph_.values[id].name, "') is not on the step's device");
    inputs[i] = &side[id];
  }
  for (size_t o = 0; o < n_out; ++o)
    if (node.outputs[o] >= 0) outputs[o] = bind_output(node.outputs[o], plan.values[node.outputs[o]], accel, b);
  Allocator& alloc = accel ? backend_->allocator() : host_;
  SubgraphRunner runner;
  if (step.has_subgraphs) runner = subgraph_runner(env, outer, b.control, node);
  KernelContext ctx(node, std::span<const Tensor* const>(inputs), outputs, alloc,
                    step.has_subgraphs ? &runner : nullptr);
  step.kernel(ctx);
  check_outputs_produced(node, outputs);
  for (size_t o = 0; o < n_out; ++o) {
    int out = node.outputs[o];
    if (out >= 0) {
      // A subgraph may return a value of this graph as is; if that value's bytes are the
      // arena's, they are reused after its own last reader: the output gets its own copy.
      if (step.has_subgraphs && outputs[o].on_host() && b.host_arena && b.host_arena->defined() &&
          outputs[o].shares_storage_with(*b.host_arena) && plan.values[out].kind != ValueKind::kArena)
        outputs[o] = outputs[o].clone(host_);
      env.slot(accel, out) = std::move(outputs[o]);
    }
    outputs[o] = Tensor();  // a moved-from tensor keeps its dtype: the next step finds the slot empty
  }
}

// A step of a dynamic region: its shapes, and so its device and kernel, are known
// only now. Inference reads by value only host tensors.
void StepLoop::run_dynamic(const Step& step, RunEnv& env, const StepBindings& b, const Scope* outer) const {
  const Node& node = graph_.nodes[step.node];
  const OpDef& def = *node.def;
  std::vector<const Tensor*> found(node.inputs.size(), nullptr);
  std::vector<ValueType> types(node.inputs.size());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    int id = node.inputs[i];
    if (id < 0) continue;
    found[i] = env.find(id);
    ONYX_ASSERT(found[i], "input ", i, " ('", graph_.values[id].name, "') has no value");
    types[i] = ValueType{found[i]->dtype(), found[i]->shape()};
  }
  const bool no_kernel = def.metadata_only || (def.is_view() && def.views.size() == node.outputs.size());
  KernelFn kernel;
  bool accel = false;
  if (!no_kernel && backend_) {
    std::string why;
    kernel = backend_->find_kernel(node, types, &why);
    accel = static_cast<bool>(kernel);
    if (!accel) fallback_(node, why);
  }
  std::vector<const Tensor*> inputs = found, infer_values = found;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (!found[i]) continue;
    int id = node.inputs[i];
    if (!no_kernel) inputs[i] = &fetch(env, id, accel);
    infer_values[i] = inputs[i]->on_host() ? inputs[i] : nullptr;
  }
  for (int i : def.value_inputs)
    if (i < static_cast<int>(node.inputs.size()) && found[i] && !infer_values[i])
      infer_values[i] = &fetch(env, node.inputs[i], false);
  for (int id : node.implicit_inputs) fetch(env, id, false);  // subgraphs read the host side
  SubgraphRunner runner = subgraph_runner(env, outer, b.control, node);
  Allocator& alloc = accel ? backend_->allocator() : host_;
  const OutputBinder bind = [&](size_t o, const ValueType& t) {  // named in a budget refusal
    return allocating([&] { return cat("output '", graph_.values[node.outputs[o]].name, "'"); },
                      [&] { return Tensor(t.dtype, t.shape.to_shape(), alloc); });
  };
  std::vector<Tensor> outputs =
      compute_node(node, inputs, alloc, &runner, &bind, &infer_values, accel ? &kernel : nullptr);
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    if (node.outputs[o] < 0) continue;
    check_declared_dtype(graph_, node.outputs[o], outputs[o].dtype());
    env.slot(!outputs[o].on_host(), node.outputs[o]) = std::move(outputs[o]);
  }
}

}  // namespace onyx
