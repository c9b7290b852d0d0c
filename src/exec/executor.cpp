#include "exec/executor.h"

#include <chrono>
#include <iostream>

#include "ops/compute.h"
#include "ops/value_inputs.h"

namespace onyx {

static std::string signature_of(const std::vector<Tensor>& inputs) {
  std::string sig;
  for (const auto& t : inputs) sig += t.defined() ? t.type_str() + ";" : "default;";
  return sig;
}

const Tensor* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent) {
    int id = s->graph->find_value(name);
    if (id < 0) continue;
    if (s->overrides) {
      auto it = s->overrides->find(id);
      if (it != s->overrides->end()) return &it->second;
    }
    if ((*s->env)[id].defined()) return &(*s->env)[id];
  }
  return nullptr;
}

GraphExecutor::GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> alloc,
                             ExecutorOptions options)
    : graph_(graph), alloc_(std::move(alloc)), options_(options), guards_(graph), liveness_(compute_liveness(graph, guards_)) {
  // Subgraph bodies run once per call with shapes that change between calls, on
  // the CPU: they use the run-time release path rather than plans.
  ExecutorOptions sub = options_;
  sub.backend = nullptr;
  if (sub.memory == MemoryMode::kPlanned) sub.memory = MemoryMode::kRelease;
  for (auto& node : graph_.nodes) {
    resolve_op(node, registry);
    for (auto& attr : node.attributes) {
      auto add = [&](const std::shared_ptr<Graph>& g) {
        with_context(cat(node.describe(), ": subgraph '", attr.name, "'"), [&] {
          subgraphs_[g.get()] = std::make_unique<GraphExecutor>(*g, registry, alloc_, sub);
        });
      };
      if (attr.g) add(attr.g);
      for (const auto& g : attr.graphs) add(g);
    }
  }
  if (options_.backend) {
    Backend* b = options_.backend;
    options_.plan.accel_alignment = b->alignment();
    options_.plan.on_accel = [this](const Node& n, const std::vector<ValueType>& types) {
      return decide_place(n, types) == StepPlace::kAccel;
    };
    upload_weights();
  }
}

// Weights that a backend kernel may read go to the device once, here (not per run).
void GraphExecutor::upload_weights() {
  Backend& b = *options_.backend;
  for (const auto& node : graph_.nodes) {
    if (!b.has_kernel(node)) continue;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      int id = node.inputs[i];
      if (id < 0 || accel_weights_.count(id)) continue;
      auto it = graph_.initializers.find(id);
      if (it == graph_.initializers.end() || graph_.values[id].is_input || it->second.dtype() == DType::kString) continue;
      const Tensor& w = it->second;
      Tensor d(w.dtype(), w.shape(), b.weights_allocator());
      b.copy_from_host(d.raw(), w.raw(), w.bytes());
      accel_weights_[id] = std::move(d);
    }
  }
  b.synchronize();
}

StepPlace GraphExecutor::decide_place(const Node& node, const std::vector<ValueType>& types) const {
  bool is_view = !node.def->views.empty() && node.def->views.size() == node.outputs.size();
  if (is_view || reads_only_metadata(node)) return StepPlace::kNone;
  if (!options_.backend) return StepPlace::kHost;
  std::string why = options_.backend->unsupported_reason(node, types);
  if (why.empty()) return StepPlace::kAccel;
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  for (const auto& f : fallbacks_)
    if (f.node == node.describe()) return StepPlace::kHost;
  ONYX_CHECK(options_.allow_cpu_fallback, node.describe(), " cannot run on ", options_.backend->device().str(), ": ",
             why, " (CPU fallback is disabled)");
  fallbacks_.push_back({node.describe(), why});
  std::string msg = cat("onyx: ", node.describe(), " runs on the CPU, not ", options_.backend->device().str(), ": ", why);
  if (options_.log) options_.log(msg);
  else std::cerr << msg << "\n";
  return StepPlace::kHost;
}

std::vector<Fallback> GraphExecutor::fallbacks() const {
  std::lock_guard<std::mutex> lock(fallback_mutex_);
  return fallbacks_;
}

std::vector<Tensor> GraphExecutor::run(const std::vector<Tensor>& inputs, const Scope* outer) const {
  ONYX_ASSERT(inputs.size() <= graph_.inputs.size(), "graph '", graph_.name, "' takes ", graph_.inputs.size(),
              " inputs, got ", inputs.size());
  RunState st;
  std::vector<Tensor>& env = st.env;
  env.resize(graph_.values.size());
  for (const auto& [id, t] : graph_.initializers) env[id] = t;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) env[graph_.inputs[i]] = inputs[i];
  for (int id : graph_.outer_values) {
    const Tensor* t = outer ? outer->lookup(graph_.values[id].name) : nullptr;
    ONYX_CHECK(t, "subgraph reads '", graph_.values[id].name, "' from an enclosing graph, where it has no value");
    env[id] = *t;
  }
  for (int id : graph_.inputs)
    ONYX_CHECK(env[id].defined(), "input '", graph_.values[id].name, "' was not given");
  Scope scope{&graph_, &env, outer};

  if (options_.memory == MemoryMode::kPlanned) {
    std::shared_ptr<CachedPlan> entry = cached_plan(inputs);
    st.entry = entry.get();
    const ExecutionPlan& plan = *entry->plan;
    for (size_t id = 0; id < plan.constants.size(); ++id)
      if (plan.constants[id].defined()) env[id] = plan.constants[id];
    if (options_.backend && !outer && options_.capture != CaptureMode::kOff) {
      if (entry->not_capturable.empty()) return run_captured(*entry, inputs, st, scope);
      ONYX_CHECK(options_.capture != CaptureMode::kRequire, "capture=require: inputs ", entry->signature,
                 " cannot be captured: ", entry->not_capturable);
      if (!entry->reported) {
        entry->reported = true;
        std::string msg = cat("onyx: inputs ", entry->signature, " run eagerly, not from a CUDA graph: ",
                              entry->not_capturable);
        if (options_.log) options_.log(msg);
        else std::cerr << msg << "\n";
      }
    }
    ++capture_stats_.eager_runs;
    run_steps(*entry, st, scope);
    return finish(st, &plan);
  }
  for (int step = 0; step < static_cast<int>(graph_.nodes.size()); ++step) {
    run_node(step, st, scope, nullptr);
    if (options_.memory == MemoryMode::kRelease)
      for (int id : liveness_.release_after[step]) release(st, id);
  }
  return finish(st, nullptr);
}

void GraphExecutor::run_steps(const CachedPlan& entry, RunState& st, const Scope& scope) const {
  const ExecutionPlan& plan = *entry.plan;
  for (int step : plan.schedule) {
    if (plan.skip[step]) continue;
    run_node(step, st, scope, &entry);
    for (int id : plan.release_after[step]) release(st, id);
    if (st.capturing) {
      std::string v = options_.backend->take_capture_violation();
      ONYX_CHECK(v.empty(), graph_.nodes[step].describe(), ": ", v);
    }
  }
}

// Why a signature's plan cannot become a CUDA graph, or "".
std::string GraphExecutor::capturability(const CachedPlan& entry) const {
  const ExecutionPlan& plan = *entry.plan;
  if (!plan.dynamic_boundaries.empty())
    return cat(plan.dynamic_boundaries[0].node, " has shapes known only at run time (", plan.dynamic_boundaries[0].reason, ")");
  for (int step : plan.schedule) {
    if (plan.skip[step]) continue;
    if (plan.place[step] == StepPlace::kHost) return cat(graph_.nodes[step].describe(), " runs on the CPU");
    if (plan.place[step] == StepPlace::kRunTime) return cat(graph_.nodes[step].describe(), " is placed at run time");
  }
  for (int id : graph_.outputs) {
    const ValuePlan& v = plan.values[id];
    if (v.kind == ValueKind::kConstant) continue;
    if (v.kind != ValueKind::kOutput || !v.on_accel)
      return cat("output '", graph_.values[id].name, "' is not produced on ", options_.backend->device().str());
  }
  for (int id : graph_.inputs)
    if (plan.values[id].type.dtype == DType::kString) return cat("input '", graph_.values[id].name, "' holds strings");
  return "";
}

// Grows the shared device arena when a plan needs more; captured graphs made against
// the old one then fail their replay check and are captured again.
void GraphExecutor::ensure_accel_arena(size_t bytes) const {
  if (bytes == 0 || (accel_arena_.defined() && accel_arena_.bytes() >= bytes)) return;
  accel_arena_ = Tensor();
  accel_arena_ = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(bytes)}, options_.backend->allocator());
  ++arena_generation_;
}

void GraphExecutor::ensure_input_slots(CachedPlan& entry, const std::vector<Tensor>& inputs) const {
  if (!entry.input_slots.empty()) return;
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    ONYX_CHECK(i < inputs.size() && inputs[i].defined(), "a captured run needs every input fed; '",
               graph_.values[graph_.inputs[i]].name, "' was not");
    const Tensor& t = inputs[i];
    entry.input_slots.push_back(Tensor(t.dtype(), t.shape(), options_.backend->allocator()));
  }
}

std::vector<Tensor> GraphExecutor::input_slots(const std::vector<Tensor>& inputs) const {
  ONYX_CHECK(options_.backend && options_.memory == MemoryMode::kPlanned, "input slots need a GPU session in planned mode");
  std::shared_ptr<CachedPlan> entry = cached_plan(inputs);
  ensure_input_slots(*entry, inputs);
  return entry->input_slots;
}

// Run 1 of a signature warms up (library handles, lazy module loading); run 2 captures
// and replays; later runs check the replay contract and replay. Feeds are copied into
// the input slots on the stream (skipped when a feed is the slot itself).
std::vector<Tensor> GraphExecutor::run_captured(CachedPlan& entry, const std::vector<Tensor>& inputs, RunState& st,
                                                const Scope& scope) const {
  Backend& b = *options_.backend;
  const ExecutionPlan& plan = *entry.plan;
  if (entry.eager_runs == 0) {
    ++entry.eager_runs;
    ++capture_stats_.eager_runs;
    run_steps(entry, st, scope);
    return finish(st, &plan);
  }
  if (entry.capture) {
    // A larger signature moved the shared arena: expected, so the graph is captured again.
    if (entry.capture->arena_base != accel_arena_.raw() || entry.capture->arena_generation != arena_generation_) {
      entry.capture.reset();
      ++capture_stats_.recaptures;
    } else if (std::string broken = entry.capture->work->check_staging(); !broken.empty()) {
      // A host buffer the graph's copies read changed under it: a bug, never replayed.
      entry.capture.reset();
      ++capture_stats_.recaptures;
      throw Error(cat("replay contract broken for inputs ", entry.signature, ": ", broken,
                      "; the graph was dropped and the next run captures it again"));
    }
  }
  ensure_input_slots(entry, inputs);
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const Tensor& feed = inputs[i];
    const Tensor& slot = entry.input_slots[i];
    ONYX_ASSERT(feed.shape() == slot.shape() && feed.dtype() == slot.dtype(), "feed does not fit its slot");
    if (feed.raw() == slot.raw()) continue;
    if (feed.on_host()) b.copy_from_host(slot.raw(), feed.raw(), feed.bytes());
    else ONYX_CHECK(false, "device feeds other than the bound input slots are not supported in capture mode");
  }
  if (!entry.capture) {
    auto cap = std::make_unique<Capture>();
    for (size_t id = 0; id < plan.values.size(); ++id) {
      const ValuePlan& v = plan.values[id];
      if (v.kind == ValueKind::kOutput && v.on_accel && v.root == static_cast<int>(id) && v.bytes)
        cap->output_slots[static_cast<int>(id)] = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(v.bytes)}, b.allocator());
    }
    cap->arena_base = accel_arena_.raw();
    cap->arena_generation = arena_generation_;
    entry.capture = std::move(cap);
    RunState cst;
    cst.env = st.env;
    for (size_t i = 0; i < graph_.inputs.size(); ++i) cst.env[graph_.inputs[i]] = entry.input_slots[i];
    cst.entry = &entry;
    cst.capturing = true;
    auto t0 = std::chrono::steady_clock::now();
    try {
      entry.capture->work = b.capture([&] { run_steps(entry, cst, scope); });
    } catch (const Error& e) {
      entry.capture.reset();
      if (options_.capture == CaptureMode::kRequire) throw;
      // Under auto a signature whose capture fails runs eagerly from now on, said once.
      entry.not_capturable = cat("its capture failed: ", e.what());
      entry.reported = true;
      std::string msg = cat("onyx: inputs ", entry.signature, " run eagerly, not from a CUDA graph: ", entry.not_capturable);
      if (options_.log) options_.log(msg);
      else std::cerr << msg << "\n";
      ++capture_stats_.eager_runs;
      run_steps(entry, st, scope);
      return finish(st, &plan);
    }
    capture_stats_.capture_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++capture_stats_.captures;
  }
  if (options_.validate_replays) {
    // Validation mode: the staged bytes hash as at capture, and every intermediate
    // starts as NaN, so a kernel reading what no earlier step wrote shows up.
    if (std::string changed = entry.capture->work->verify_staging_checksums(); !changed.empty()) {
      entry.capture.reset();
      throw Error(cat("replay contract broken for inputs ", entry.signature, ": ", changed,
                      "; the graph was dropped and the next run captures it again"));
    }
    if (accel_arena_.defined()) b.poison(accel_arena_.raw(), accel_arena_.bytes());
  }
  entry.capture->work->replay();
  ++capture_stats_.replays;
  // The outputs, from their slots to the host.
  std::vector<Tensor> outputs;
  for (int id : graph_.outputs) {
    const ValuePlan& v = plan.values[id];
    if (v.kind == ValueKind::kConstant) {
      outputs.push_back(plan.constants[id].clone(*alloc_));
      continue;
    }
    Tensor host(v.type.dtype, v.type.shape.to_shape(), *alloc_);
    if (host.bytes() == 0) {
      outputs.push_back(std::move(host));
      continue;
    }
    const Tensor& slot = entry.capture->output_slots.at(v.root);
    b.copy_to_host(host.raw(), slot.raw(), host.bytes());
    outputs.push_back(std::move(host));
  }
  std::string errors = b.take_device_errors();
  ONYX_CHECK(errors.empty(), "the device reported: ", errors);
  return outputs;
}

CaptureReport GraphExecutor::capture_report() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  CaptureReport r = capture_stats_;
  r.graphs = 0;
  r.shared_arena_bytes = accel_arena_.defined() ? accel_arena_.bytes() : 0;
  r.sum_of_plan_arena_bytes = 0;
  r.retained_staging_bytes = 0;
  for (const auto& e : cache_) {
    r.sum_of_plan_arena_bytes += e->plan->accel_arena.bytes;
    if (e->capture && e->capture->work) {
      ++r.graphs;
      r.retained_staging_bytes += e->capture->work->retained_staging_bytes();
    }
  }
  return r;
}

bool GraphExecutor::release_captured_graph(const std::vector<Tensor>& inputs) {
  std::string sig = signature_of(inputs);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (auto& e : cache_)
    if (e->signature == sig && e->capture) {
      e->capture.reset();
      return true;
    }
  return false;
}

void GraphExecutor::release_captured_graphs() {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (auto& e : cache_) e->capture.reset();
}

void GraphExecutor::release(RunState& st, int id) const {
  st.env[id] = Tensor();
  st.on_accel.erase(id);
  st.on_host.erase(id);
}

// Outputs go to the caller on the host; a memoized one is copied, so the plan keeps its own.
std::vector<Tensor> GraphExecutor::finish(RunState& st, const ExecutionPlan* plan) const {
  std::vector<Tensor> outputs;
  for (int id : graph_.outputs) {
    const Tensor& t = st.env[id];
    ONYX_CHECK(t.defined(), "output '", graph_.values[id].name, "' was not produced");
    // The caller owns what it gets: a tensor this run allocated is handed over; anything
    // else (a weight, a feed, a memoized constant, arena bytes) is copied.
    const Tensor& host = t.on_host() ? t : input_on(st, id, false);
    bool ours = host.storage() && host.storage()->owning() && host.storage()->allocator() == alloc_.get() &&
                !(plan && plan->values[id].kind == ValueKind::kConstant);
    outputs.push_back(ours ? host : host.clone(*alloc_));
  }
  if (options_.backend) {
    options_.backend->synchronize();
    std::string errors = options_.backend->take_device_errors();
    ONYX_CHECK(errors.empty(), "the device reported: ", errors);
  }
  return outputs;
}

// Value `id` on the accelerator (accel = true) or the host, copied there once per run if needed.
const Tensor& GraphExecutor::input_on(RunState& st, int id, bool accel) const {
  const Tensor& t = st.env[id];
  if (t.on_host() != accel) return t;
  Backend& b = *options_.backend;
  if (accel) {
    auto w = accel_weights_.find(id);
    if (w != accel_weights_.end() && t.raw() == graph_.initializers.at(id).raw()) return w->second;
    if (st.entry) {
      auto c = st.entry->accel_constants.find(id);
      if (c != st.entry->accel_constants.end()) return c->second;
    }
    auto [it, fresh] = st.on_accel.try_emplace(id);
    if (fresh) {
      ONYX_CHECK(t.dtype() != DType::kString, "string tensors cannot move to ", b.device().str());
      it->second = Tensor(t.dtype(), t.shape(), b.allocator());
      b.copy_from_host(it->second.raw(), t.raw(), t.bytes());
    }
    return it->second;
  }
  auto [it, fresh] = st.on_host.try_emplace(id);
  if (fresh) {
    it->second = Tensor(t.dtype(), t.shape(), *alloc_);
    b.copy_to_host(it->second.raw(), t.raw(), t.bytes());
  }
  return it->second;
}

void GraphExecutor::run_node(int step, RunState& st, const Scope& scope, const CachedPlan* planned) const {
  const Node& node = graph_.nodes[step];
  std::vector<Tensor>& env = st.env;
  with_context(node.describe(), [&] {
    std::vector<const Tensor*> values(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      int id = node.inputs[i];
      if (id < 0) continue;
      ONYX_ASSERT(env[id].defined(), "input ", i, " ('", graph_.values[id].name, "') has no value at step ", step);
      values[i] = &env[id];
    }
    StepPlace place = StepPlace::kHost;
    if (options_.backend) {
      place = planned ? planned->plan->place[step] : StepPlace::kRunTime;
      if (place == StepPlace::kRunTime) {
        std::vector<ValueType> types(values.size());
        for (size_t i = 0; i < values.size(); ++i)
          if (values[i]) types[i] = ValueType{values[i]->dtype(), values[i]->shape()};
        place = decide_place(node, types);
      }
    }
    // Kernel inputs on the kernel's device (views and metadata reads move nothing);
    // inference reads by value only host tensors.
    std::vector<const Tensor*> infer_values = values;
    if (options_.backend) {
      std::vector<int> by_value = value_inputs(node);
      for (size_t i = 0; i < values.size(); ++i) {
        if (!values[i]) continue;
        int id = node.inputs[i];
        bool needs_value = std::count(by_value.begin(), by_value.end(), static_cast<int>(i)) > 0;
        if (place != StepPlace::kNone) values[i] = &input_on(st, id, place == StepPlace::kAccel);
        infer_values[i] = values[i]->on_host() ? values[i] : needs_value ? &input_on(st, id, false) : nullptr;
      }
    }
    // Subgraphs run on the CPU: the outer values they read must be host tensors.
    std::map<int, Tensor> host_outer;
    for (int id : node.implicit_inputs)
      if (env[id].defined() && !env[id].on_host()) host_outer[id] = input_on(st, id, false);
    Scope node_scope = scope;
    if (!host_outer.empty()) node_scope.overrides = &host_outer;
    SubgraphRunner runner = [&](const Graph& g, const std::vector<Tensor>& in) {
      auto it = subgraphs_.find(&g);
      ONYX_ASSERT(it != subgraphs_.end(), "unknown subgraph");
      return it->second->run(in, &node_scope);
    };
    // In planned mode, arena values take their planned place; the rest is allocated.
    OutputBinder bind = [&](size_t o, const ValueType& t) -> Tensor {
      const ValuePlan& vp = planned->plan->values[node.outputs[o]];
      if (st.capturing && vp.kind == ValueKind::kOutput) {
        auto slot = planned->capture->output_slots.find(vp.root);
        if (slot != planned->capture->output_slots.end())
          return Tensor::borrow(t.dtype, t.shape.to_shape(), slot->second.raw(), slot->second.storage(),
                                slot->second.device());
      }
      if (vp.kind != ValueKind::kArena) return Tensor();
      ONYX_ASSERT(t.dtype == vp.type.dtype && t.shape.dims == vp.type.shape.dims, "output ", o, " is ",
                  dtype_name(t.dtype), t.shape.str(), " but the plan has ", dtype_name(vp.type.dtype),
                  vp.type.shape.str());
      const Tensor& arena = vp.on_accel ? accel_arena_ : planned->host_arena;
      char* base = static_cast<char*>(arena.raw());
      return Tensor::borrow(t.dtype, t.shape.to_shape(), base + vp.offset, arena.storage(), arena.device());
    };
    Allocator& alloc = place == StepPlace::kAccel ? options_.backend->allocator() : *alloc_;
    KernelFn accel_kernel = [this](KernelContext& ctx) { options_.backend->run(ctx); };
    std::vector<Tensor> outputs = compute_node(node, values, alloc, &runner, planned ? &bind : nullptr, &infer_values,
                                               place == StepPlace::kAccel ? &accel_kernel : nullptr);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      // A subgraph may return a value of this graph as is; if that value's bytes are the
      // arena's, they are reused after its own last reader: the output gets its own copy.
      if (planned && outputs[o].on_host() && planned->host_arena.defined() &&
          outputs[o].shares_storage_with(planned->host_arena) &&
          planned->plan->values[node.outputs[o]].kind != ValueKind::kArena)
        outputs[o] = outputs[o].clone(*alloc_);
      env[node.outputs[o]] = std::move(outputs[o]);
    }
  });
}

std::vector<Tensor> GraphExecutor::evaluate_while_planning(const Node& node,
                                                           const std::vector<const Tensor*>& inputs) const {
  // Only nodes without outer-scope reads are folded, so subgraphs run with no enclosing scope.
  SubgraphRunner runner = [&](const Graph& g, const std::vector<Tensor>& in) {
    auto it = subgraphs_.find(&g);
    ONYX_ASSERT(it != subgraphs_.end(), "unknown subgraph");
    return it->second->run(in, nullptr);
  };
  return compute_node(node, inputs, cpu_allocator(), &runner);
}

ExecutionPlan GraphExecutor::make_plan(const Graph& graph, const std::vector<ValueType>& inputs,
                                       const PlanOptions& options, const GraphExecutor* executor) {
  if (!executor) return plan_graph(graph, inputs, options);
  NodeEvaluator eval = [executor](const Node& n, const std::vector<const Tensor*>& in) {
    return executor->evaluate_while_planning(n, in);
  };
  return plan_graph(graph, inputs, executor->options_.plan, eval);
}


std::shared_ptr<GraphExecutor::CachedPlan> GraphExecutor::cached_plan(const std::vector<Tensor>& inputs) const {
  std::string sig = signature_of(inputs);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if ((*it)->signature != sig) continue;
    ++cache_stats_.hits;
    cache_.splice(cache_.begin(), cache_, it);
    return cache_.front();
  }
  ++cache_stats_.misses;
  std::vector<ValueType> types(graph_.inputs.size());
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const Tensor* t = i < inputs.size() && inputs[i].defined() ? &inputs[i] : nullptr;
    if (!t) {
      auto init = graph_.initializers.find(graph_.inputs[i]);
      ONYX_ASSERT(init != graph_.initializers.end(), "input ", i, " has neither a feed nor a default");
      t = &init->second;
    }
    types[i] = ValueType{t->dtype(), t->shape()};
  }
  auto entry = std::make_shared<CachedPlan>();
  entry->signature = sig;
  entry->plan = std::make_shared<const ExecutionPlan>(make_plan(graph_, types, options_.plan, this));
  if (size_t n = entry->plan->host_arena.bytes) entry->host_arena = Tensor(DType::kUInt8, Shape{int64_t(n)}, *alloc_);
  if (options_.backend) {
    ensure_accel_arena(entry->plan->accel_arena.bytes);
    // Memoized values that device kernels read go to the device once per plan.
    const ExecutionPlan& p = *entry->plan;
    for (int step : p.schedule) {
      if (p.skip[step] || p.place[step] != StepPlace::kAccel) continue;
      const Node& n = graph_.nodes[step];
      // Inputs read by value for shapes are sent too: kernels read them on the device
      // (a Slice's starts, a Range's start and step).
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        int id = n.inputs[i];
        if (id < 0 || !p.constants[id].defined() || entry->accel_constants.count(id)) continue;
        const Tensor& c = p.constants[id];
        if (c.dtype() == DType::kString) continue;
        Tensor d(c.dtype(), c.shape(), options_.backend->allocator());
        options_.backend->copy_from_host(d.raw(), c.raw(), c.bytes());
        entry->accel_constants[id] = std::move(d);
      }
    }
    entry->not_capturable = capturability(*entry);
  }
  cache_.push_front(entry);
  while (cache_.size() > std::max<size_t>(options_.plan_cache_capacity, 1)) {
    cache_.pop_back();
    ++cache_stats_.evictions;
  }
  return entry;
}

std::shared_ptr<const ExecutionPlan> GraphExecutor::plan_for(const std::vector<Tensor>& inputs) const {
  return cached_plan(inputs)->plan;
}

PlanCacheStats GraphExecutor::plan_cache_stats() const {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  PlanCacheStats s = cache_stats_;
  s.entries = cache_.size();
  s.arena_bytes = 0;
  for (const auto& e : cache_) s.arena_bytes += e->plan->host_arena.bytes + e->plan->accel_arena.bytes;
  return s;
}

}  // namespace onyx
