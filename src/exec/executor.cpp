#include "exec/executor.h"

#include <cstring>

namespace onyx {

namespace {

// Subgraph bodies run once per call of their node, with shapes that may change between
// calls, on the CPU: they allocate as they go (release mode) rather than hold an arena
// per signature.
SessionOptions subgraph_options(const SessionOptions& options) {
  SessionOptions sub = options;
  if (sub.memory == MemoryMode::kPlanned) sub.memory = MemoryMode::kRelease;
  sub.capture = CaptureMode::kOff;
  sub.intra_op_threads = 1;  // runs inside its parent's run, on the parent's pool
  return sub;
}

}  // namespace

GraphExecutor::GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> host,
                             const SessionOptions& options, Backend* backend, std::shared_ptr<DeviceWeights> shared_weights)
    : graph_(graph),
      host_(std::move(host)),
      options_(options),
      backend_(backend),
      capture_(backend && options.capture != CaptureMode::kOff),
      device_weights_(shared_weights ? std::move(shared_weights) : std::make_shared<DeviceWeights>()),
      notices_(options.log),
      cache_(options.plan_cache_capacity),
      loop_(graph, *host_, backend,
            [this](const Graph& g, const std::vector<Tensor>& in, const Scope& scope) { return subgraph(g).run(in, &scope); },
            [this](const Node& node, const std::string& why) { report_fallback(node, why); }) {
  const SessionOptions sub = subgraph_options(options_);
  for (auto& node : graph_.nodes) {
    resolve_op(node, registry);
    for (auto& attr : node.attributes) {
      auto add = [&](const std::shared_ptr<Graph>& g) {
        with_context(cat(node.describe(), ": subgraph '", attr.name, "'"), [&] {
          subgraphs_[g.get()] = std::make_unique<GraphExecutor>(*g, registry, host_, sub);
        });
      };
      if (attr.g) add(attr.g);
      for (const auto& g : attr.graphs) add(g);
    }
  }
  if (backend_) upload_weights();
  ONYX_CHECK(options_.intra_op_threads >= 0, "intra_op_threads must be >= 0 (0: every available CPU), not ",
             options_.intra_op_threads);
  const int threads = options_.intra_op_threads ? options_.intra_op_threads : cpu::available_cpus();
  if (threads > 1) pool_ = std::make_unique<cpu::ThreadPool>(threads);
}

GraphExecutor& GraphExecutor::subgraph(const Graph& g) const {
  auto it = subgraphs_.find(&g);
  ONYX_ASSERT(it != subgraphs_.end(), "unknown subgraph '", g.name, "'");
  return *it->second;
}

// Weights that a backend kernel may read go to the device once, here (not per run).
void GraphExecutor::upload_weights() {
  weights_on_accel_.assign(graph_.values.size(), Tensor());
  resident_on_accel_.assign(graph_.values.size(), false);
  for (const auto& node : graph_.nodes) {
    if (!backend_->has_kernel(node)) continue;
    for (int id : node.inputs) {
      if (id < 0 || resident_on_accel_[id] || graph_.values[id].is_input) continue;
      auto it = graph_.initializers.find(id);
      if (it == graph_.initializers.end() || dtype_is_object(it->second.dtype())) continue;
      const Tensor& w = it->second;
      if (w.bytes() == 0) {
        weights_on_accel_[id] = Tensor(w.dtype(), w.shape(), backend_->weights_allocator());
        resident_on_accel_[id] = true;
        continue;
      }
      Tensor& d = (*device_weights_)[w.raw()];
      if (!d.defined() || d.bytes() != w.bytes() || d.dtype() != w.dtype()) {
        ONYX_ASSERT(!d.defined(), "two weights at the same host address differ in type");
        d = Tensor(w.dtype(), w.shape(), backend_->weights_allocator());
        backend_->copy_from_host(d.raw(), w.raw(), w.bytes());
      }
      weights_on_accel_[id] = d.view(w.shape());
      resident_on_accel_[id] = true;
    }
  }
  std::string errors = backend_->finish();
  ONYX_CHECK(errors.empty(), "the device reported: ", errors);
}

void GraphExecutor::report_fallback(const Node& node, const std::string& why) {
  ONYX_CHECK(options_.allow_cpu_fallback, node.describe(), " cannot run on ", backend_->device().str(), ": ", why,
             " (CPU fallback is disabled)");
  const std::string who = node.describe();
  for (const auto& f : fallbacks_)
    if (f.node == who) return;
  fallbacks_.push_back({who, why});
  notices_.say(cat("onyx: ", who, " runs on the CPU, not ", backend_->device().str(), ": ", why));
}

// A capture session feeds every input through its slot on the device, so its
// signatures do not depend on where the feeds are.
GraphExecutor::Signature GraphExecutor::signature(std::vector<ValueType> types, std::vector<bool> on_accel,
                                                  const Scope* outer) const {
  Signature s;
  for (size_t i = 0; i < types.size(); ++i) {
    if (capture_) on_accel[i] = !dtype_is_object(types[i].dtype);
    // Appended piece by piece: this runs on every run, and cat's stream costs more than the rest.
    s.key += dtype_name(types[i].dtype);
    s.key += types[i].shape.str();
    s.key += on_accel[i] && !capture_ ? "@device;" : ";";
  }
  s.has_outer = outer != nullptr;
  if (outer) {
    s.key += "|outer";
    for (int id : graph_.outer_values) {
      const Tensor* t = outer->lookup(graph_.values[id].name);
      ONYX_CHECK(t, "subgraph reads '", graph_.values[id].name, "' from an enclosing graph, where it has no value");
      s.outer.push_back(ValueType{t->dtype(), t->shape()});
      s.key += cat(";", t->type_str());
    }
  }
  s.types = std::move(types);
  s.on_accel = std::move(on_accel);
  return s;
}

GraphExecutor::Signature GraphExecutor::signature_of(const std::vector<Tensor>& inputs, const Scope* outer) const {
  ONYX_CHECK(inputs.size() <= graph_.inputs.size(), "graph '", graph_.name, "' takes ", graph_.inputs.size(),
              " inputs, got ", inputs.size());
  std::vector<ValueType> types(graph_.inputs.size());
  std::vector<bool> on_accel(graph_.inputs.size(), false);
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const Tensor* t = i < inputs.size() && inputs[i].defined() ? &inputs[i] : nullptr;
    if (!t) {
      auto init = graph_.initializers.find(graph_.inputs[i]);
      ONYX_CHECK(init != graph_.initializers.end(), "input '", graph_.values[graph_.inputs[i]].name, "' was not given");
      t = &init->second;
    }
    types[i] = ValueType{t->dtype(), t->shape()};
    on_accel[i] = !t->on_host();
    ONYX_CHECK(on_accel[i] ? backend_ && t->device() == backend_->device() : true, "input '",
               graph_.values[graph_.inputs[i]].name, "' is on ", t->device().str(), ", but the session runs on ",
               backend_ ? backend_->device().str() : "cpu");
  }
  return signature(std::move(types), std::move(on_accel), outer);
}

std::shared_ptr<PreparedPlan> GraphExecutor::prepared(const Signature& sig, const RunControl* control) {
  return cache_.get(sig.key, [&] { return prepare(sig, control); });
}

// Whether a run on `inputs` (and `outer`) has the signature that `e` was planned for:
// what signature_of would spell, compared without spelling it. Inputs that signature_of
// would refuse never match (it then says why).
bool GraphExecutor::matches(const PreparedPlan& e, const std::vector<Tensor>& inputs, const Scope* outer) const {
  if (inputs.size() > graph_.inputs.size() || e.input_types.size() != graph_.inputs.size()) return false;
  if (e.has_outer != (outer != nullptr)) return false;
  auto same_type = [](const ValueType& want, const Tensor& t) {
    if (want.dtype != t.dtype() || !want.shape.rank_known || want.shape.dims.size() != t.rank()) return false;
    for (size_t d = 0; d < t.rank(); ++d)
      if (want.shape.dims[d] != t.shape()[d]) return false;
    return true;
  };
  for (size_t i = 0; i < graph_.inputs.size(); ++i) {
    const Tensor* t = i < inputs.size() && inputs[i].defined() ? &inputs[i] : nullptr;
    if (!t) {
      auto init = graph_.initializers.find(graph_.inputs[i]);
      if (init == graph_.initializers.end()) return false;
      t = &init->second;
    }
    if (!t->on_host() && !(backend_ && t->device() == backend_->device())) return false;
    const bool on_accel = capture_ ? !dtype_is_object(t->dtype()) : !t->on_host();
    if (on_accel != e.inputs_on_accel[i] || !same_type(e.input_types[i], *t)) return false;
  }
  if (outer) {
    if (e.outer_types.size() != graph_.outer_values.size()) return false;
    for (size_t k = 0; k < graph_.outer_values.size(); ++k) {
      const Tensor* t = outer->lookup(graph_.values[graph_.outer_values[k]].name);
      if (!t || !same_type(e.outer_types[k], *t)) return false;
    }
  }
  return true;
}

// Plans a signature and gathers what its runs hold: the host arena, the device copies
// of the constants its device steps read, its start values and its capture state.
std::unique_ptr<PreparedPlan> GraphExecutor::prepare(const Signature& sig, const RunControl* control) {
  PlanRequest request{sig.types, sig.on_accel, sig.outer, resident_on_accel_};
  PlanOptions po;
  po.arena = options_.memory == MemoryMode::kPlanned;
  po.release = options_.memory != MemoryMode::kKeepAll;
  po.backend = backend_;
  if (backend_) po.accel_alignment = backend_->alignment();
  po.evaluate_subgraph = [this, control](const Graph& g, const std::vector<Tensor>& in) {
    if (control) control->check(nullptr);  // between the iterations of a Loop computed now
    return subgraph(g).run(in, nullptr, nullptr, nullptr, control);
  };
  auto e = std::make_unique<PreparedPlan>();
  e->input_types = sig.types;
  e->inputs_on_accel = sig.on_accel;
  e->has_outer = sig.has_outer;
  e->outer_types = sig.outer;
  e->plan = std::make_shared<const ExecutionPlan>(plan_graph(graph_, request, po));
  const ExecutionPlan& plan = *e->plan;
  for (const Step* s : plan.fallbacks()) report_fallback(graph_.nodes[s->node], s->fallback);
  if (size_t n = plan.host_arena.bytes) {
    // A refusal names the arena's largest value, the likeliest culprit.
    int largest = -1;
    for (size_t id = 0; id < plan.values.size(); ++id) {
      const ValuePlan& v = plan.values[id];
      if (v.kind == ValueKind::kArena && !v.on_accel && (largest < 0 || v.bytes > plan.values[largest].bytes))
        largest = static_cast<int>(id);
    }
    std::string what = "the plan's host arena";
    if (largest >= 0) {
      const int producer = graph_.values[largest].producer;
      what += cat(" (its largest value: ",
                  producer >= 0 ? cat(graph_.nodes[producer].describe(), ": output '") : std::string("'"),
                  graph_.values[largest].name, "', ", format_bytes(plan.values[largest].bytes), ")");
    }
    e->host_arena = allocating(what, [&] { return Tensor(DType::kUInt8, Shape{int64_t(n)}, *host_); });
  }
  if (backend_) ensure_device_arena(plan.accel_arena.bytes);
  e->start = start_env(plan);
  e->shapes.resize(plan.values.size());
  e->host_arena_values.resize(plan.values.size());
  for (size_t id = 0; id < plan.values.size(); ++id) {
    const ValuePlan& v = plan.values[id];
    if (!v.type.shape.fully_known()) continue;
    const Shape& shape = e->shapes[id].emplace(v.type.shape.to_shape());
    if (v.kind != ValueKind::kArena || v.on_accel) continue;
    if (v.bytes == 0) {  // no bytes to place (an empty tensor)
      e->host_arena_values[id] = Tensor::borrow(v.type.dtype, shape, nullptr);
    } else {
      ONYX_ASSERT(e->host_arena.defined(), "the plan places a value in a host arena that it has not");
      char* base = static_cast<char*>(e->host_arena.raw());
      e->host_arena_values[id] =
          Tensor::borrow(v.type.dtype, shape, base + v.offset, e->host_arena.storage(), e->host_arena.device());
    }
  }
  if (capture_) {
    std::vector<SignatureCapture::Slot> roots;
    for (size_t id = 0; id < plan.values.size(); ++id) {
      const ValuePlan& v = plan.values[id];
      if (v.kind == ValueKind::kOutput && v.on_accel && v.root == static_cast<int>(id) && v.bytes)
        roots.push_back({static_cast<int>(id), v.bytes});
    }
    e->capture = std::make_unique<SignatureCapture>(*backend_, options_.capture, options_.validate_replays, notices_,
                                                    capture_stats_, sig.key, plan.capture_blocker, sig.types,
                                                    std::move(roots));
  }
  return e;
}

// What every run of a plan starts from: initializers (and their device copies),
// constants (and the device copies of those device steps read, uploaded here once).
RunEnv GraphExecutor::start_env(const ExecutionPlan& plan) {
  RunEnv env(graph_.values.size());
  for (const auto& [id, t] : graph_.initializers) env.slot(false, id) = t;
  if (backend_)
    for (size_t id = 0; id < weights_on_accel_.size(); ++id)
      if (weights_on_accel_[id].defined()) env.slot(true, static_cast<int>(id)) = weights_on_accel_[id];
  for (size_t id = 0; id < plan.constants.size(); ++id)
    if (plan.constants[id].defined()) env.slot(false, static_cast<int>(id)) = plan.constants[id];
  for (int id : plan.accel_constants) {
    const Tensor& c = plan.constants[id];
    Tensor d(c.dtype(), c.shape(), backend_->allocator());
    backend_->copy_from_host(d.raw(), c.raw(), c.bytes());
    env.slot(true, id) = std::move(d);
  }
  return env;
}

void GraphExecutor::ensure_device_arena(size_t bytes) {
  if (bytes == 0 || (device_arena_.defined() && device_arena_.bytes() >= bytes)) return;
  device_arena_ = Tensor();  // the old one goes back before the larger one is taken
  device_arena_ = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(bytes)}, backend_->allocator());
  ++arena_generation_;
}

SignatureCapture::Arena GraphExecutor::arena() const {
  return {device_arena_.raw(), device_arena_.defined() ? device_arena_.bytes() : 0, arena_generation_};
}

void GraphExecutor::bind_inputs(RunEnv& env, const std::vector<Tensor>& inputs, const Scope* outer) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    int id = graph_.inputs[i];
    bool accel = !inputs[i].on_host();
    env.slot(accel, id) = inputs[i];
    env.slot(!accel, id) = Tensor();  // a fed input replaces its default on both devices
  }
  for (int id : graph_.inputs)
    ONYX_CHECK(env.find(id), "input '", graph_.values[id].name, "' was not given");
  for (int id : graph_.outer_values) {
    const Tensor* t = outer ? outer->lookup(graph_.values[id].name) : nullptr;
    ONYX_CHECK(t, "subgraph reads '", graph_.values[id].name, "' from an enclosing graph, where it has no value");
    env.slot(false, id) = *t;
  }
}

std::vector<Tensor> GraphExecutor::run(const std::vector<Tensor>& inputs, const Scope* outer,
                                       const std::vector<OutputPlace>* places, const std::vector<Tensor>* bound,
                                       const RunControl* control, bool finish) {
  ONYX_CHECK(finish || (backend_ && !outer),
             "a run that returns before its work is done needs a backend and a top-level graph");
  const cpu::PoolScope pool_scope(pool_ ? pool_.get() : cpu::current_pool());
  if (!control && outer) control = outer->control;
  if (control && !control->active()) control = nullptr;
  // The plan of the last signature like this run's, found without spelling the signature.
  std::shared_ptr<PreparedPlan> e =
      cache_.find_matching([&](const PreparedPlan& p) { return matches(p, inputs, outer); });
  if (!e) e = prepared(signature_of(inputs, outer), control);
  const ExecutionPlan& plan = *e->plan;
  const std::map<int, Tensor> direct = bound ? direct_bindings(plan, inputs, *bound) : std::map<int, Tensor>{};
  const RunEnvLease lease(e->envs, e->start);
  RunEnv& env = *lease;
  // The one way a run's steps are run: eagerly, for a warm-up, or into a graph.
  auto run_steps = [&](const std::vector<Tensor>& in, const std::map<int, Tensor>* slots,
                       const SignatureCapture::AfterStep& after_step) {
    env.reset_to(e->start);  // a second call (a capture after its warm-up) starts afresh too
    bind_inputs(env, in, outer);
    StepBindings b{&e->host_arena, &device_arena_, &e->shapes, &e->host_arena_values, slots, after_step, control};
    loop_.run(plan, env, b, outer);
  };
  bool replayed = false;
  if (e->capture) {
    replayed = e->capture->run(inputs, arena(), SignatureCapture::Record(run_steps), direct);
  } else {
    if (backend_) ++capture_stats_.eager_runs;
    run_steps(inputs, direct.empty() ? nullptr : &direct, nullptr);
  }
  collect(*e, replayed ? nullptr : &env, replayed ? &e->capture->output_slots() : nullptr, env.run_outputs);
  return deliver(*e, env.run_outputs, replayed, finish, places, bound, direct);
}

// A bound output is written where the caller wants it by its producing step when it is
// its group's root, on the device of its tensor, with its dtype and shape. If that tensor
// is also fed as an input, the producing op must update that input in place (OpDef's
// `updates`) and be its last reader; otherwise the output is copied there after the run.
std::map<int, Tensor> GraphExecutor::direct_bindings(const ExecutionPlan& plan, const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& bound) const {
  std::map<int, Tensor> direct;
  for (size_t k = 0; k < bound.size() && k < graph_.outputs.size(); ++k) {
    const Tensor& t = bound[k];
    if (!t.defined()) continue;
    const int id = graph_.outputs[k];
    const ValuePlan& v = plan.values[id];
    ONYX_CHECK(t.dtype() == v.type.dtype && v.type.shape.fully_known() && t.shape() == v.type.shape.to_shape(),
               "output '", graph_.values[id].name, "' is bound to a tensor ", t.type_str(), ", but the run makes ",
               dtype_name(v.type.dtype), v.type.shape.str());
    if (v.kind != ValueKind::kOutput || v.root != id || v.on_accel == t.on_host() || direct.count(id)) continue;
    bool ok = true;
    for (size_t i = 0; i < inputs.size() && ok; ++i) {
      if (!inputs[i].defined() || !inputs[i].storage() || inputs[i].storage() != t.storage()) continue;
      const int in = graph_.inputs[i];
      const int producer = graph_.values[id].producer;
      const Node* node = producer >= 0 ? &graph_.nodes[producer] : nullptr;
      bool declared = false;
      if (node)
        for (auto [o, j] : node->def->updates)
          declared |= o < static_cast<int>(node->outputs.size()) && node->outputs[o] == id &&
                      j < static_cast<int>(node->inputs.size()) && node->inputs[j] == in;
      ok = declared && plan.values[in].last <= producer;
    }
    if (ok) direct[id] = t;
  }
  return direct;
}

// The graph outputs as the run left them: in the run's values, or in the capture's slots.
void GraphExecutor::collect(const PreparedPlan& e, const RunEnv* env, const std::map<int, Tensor>* slots,
                            std::vector<Tensor>& outputs) const {
  const ExecutionPlan& plan = *e.plan;
  outputs.clear();
  for (int id : graph_.outputs) {
    const ValuePlan& v = plan.values[id];
    if (v.kind == ValueKind::kConstant) {
      outputs.push_back(plan.constants[id]);
    } else if (slots) {
      auto s = slots->find(v.root);
      Shape shape = v.type.shape.to_shape();
      outputs.push_back(s == slots->end() ? Tensor(v.type.dtype, shape)  // no bytes, no slot
                                          : Tensor::borrow(v.type.dtype, shape, s->second.raw(), s->second.storage(),
                                                           s->second.device()));
    } else {
      const Tensor& home = env->side(v.on_accel)[id];
      const Tensor* t = home.defined() ? &home : env->find(id);
      ONYX_CHECK(t, "output '", graph_.values[id].name, "' was not produced");
      outputs.push_back(*t);
    }
  }
}

// Each output where the caller wants it. A tensor this run allocated is handed over;
// anything else (a weight, a feed, a memoized constant, a capture slot) is copied.
// Copies to the host are enqueued and completed by one synchronization.
std::vector<Tensor> GraphExecutor::deliver(const PreparedPlan& e, const std::vector<Tensor>& outputs, bool replayed,
                                           bool finish, const std::vector<OutputPlace>* places,
                                           const std::vector<Tensor>* bound,
                                           const std::map<int, Tensor>& direct) {
  auto on_device = [&](const Tensor& t) {
    Tensor d(t.dtype(), t.shape(), backend_->allocator());
    if (t.on_host()) backend_->copy_from_host(d.raw(), t.raw(), t.bytes());
    else backend_->copy_on_device(d.raw(), t.raw(), t.bytes());
    return d;
  };
  auto on_host = [&](const Tensor& t) {
    if (t.on_host()) return t.clone(*host_);
    Tensor h(t.dtype(), t.shape(), *host_);
    backend_->download(h.raw(), t.raw(), t.bytes());
    return h;
  };
  auto into = [&](const Tensor& t, const Tensor& dst) {  // copies an output into the caller's tensor
    if (t.bytes() == 0 || t.raw() == dst.raw()) return;
    if (t.dtype() == DType::kString) {
      for (int64_t i = 0; i < t.numel(); ++i) dst.data<std::string>()[i] = t.data<std::string>()[i];
      return;
    }
    ONYX_CHECK(!dtype_is_object(t.dtype()), dtype_name(t.dtype()), " outputs cannot be bound to a tensor");
    if (t.on_host() && dst.on_host()) std::memcpy(dst.raw(), t.raw(), t.bytes());
    else if (!t.on_host() && !dst.on_host()) backend_->copy_on_device(dst.raw(), t.raw(), t.bytes());
    else if (t.on_host()) backend_->copy_from_host(dst.raw(), t.raw(), t.bytes());
    else {
      ONYX_CHECK(finish,
                 "a bound host tensor cannot take a device output in a run that returns before its work is done");
      backend_->download(dst.raw(), t.raw(), t.bytes());
    }
  };
  std::vector<Tensor> result;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k];
    const ValuePlan& v = e.plan->values[graph_.outputs[k]];
    if (bound && k < bound->size() && (*bound)[k].defined()) {
      const Tensor& dst = (*bound)[k];
      ONYX_CHECK(dst.dtype() != DType::kString || dst.on_host(), "string outputs can be bound to host tensors only");
      if (!direct.count(graph_.outputs[k])) into(t, dst);
      result.push_back(dst);
      continue;
    }
    const Allocator* from = t.storage() && t.storage()->owning() ? t.storage()->allocator() : nullptr;
    const bool produced = !replayed && (v.kind == ValueKind::kOutput || v.kind == ValueKind::kAllocated ||
                                        v.kind == ValueKind::kDynamic);
    const bool ours = produced && from && (from == host_.get() || (backend_ && from == &backend_->allocator()));
    const bool to_device = backend_ && places && (*places)[k] == OutputPlace::kDevice;
    if (ours && t.on_host() != to_device) {
      result.push_back(t);
    } else if (to_device) {
      ONYX_CHECK(!dtype_is_object(t.dtype()), "output '", graph_.values[graph_.outputs[k]].name, "' holds ",
                 dtype_name(t.dtype()), " values, which cannot stay on ", backend_->device().str());
      result.push_back(on_device(t));
    } else {
      ONYX_CHECK(finish || t.on_host(), "output '", graph_.values[graph_.outputs[k]].name,
                 "' goes to the host, which a run that returns before its work is done cannot give it");
      result.push_back(on_host(t));
    }
  }
  if (backend_ && finish) {
    std::string errors = backend_->finish();
    ONYX_CHECK(errors.empty(), "the device reported: ", errors);
  }
  return result;
}

std::shared_ptr<const ExecutionPlan> GraphExecutor::plan_for(const std::vector<Tensor>& inputs) {
  return prepared(signature_of(inputs, nullptr))->plan;
}

std::shared_ptr<const ExecutionPlan> GraphExecutor::plan_for(const std::vector<ValueType>& inputs) {
  return prepared(signature(inputs, std::vector<bool>(inputs.size(), false), nullptr))->plan;
}

CaptureReport GraphExecutor::capture_report() const {
  CaptureReport r = capture_stats_;
  r.graphs = 0;
  r.shared_arena_bytes = device_arena_.defined() ? device_arena_.bytes() : 0;
  r.sum_of_plan_arena_bytes = 0;
  r.retained_staging_bytes = 0;
  for (const auto& e : cache_.entries()) {
    r.sum_of_plan_arena_bytes += e->plan->accel_arena.bytes;
    if (e->capture && e->capture->has_graph()) {
      ++r.graphs;
      r.retained_staging_bytes += e->capture->retained_staging_bytes();
    }
  }
  return r;
}

void GraphExecutor::release_plans() {
  cache_.clear();
  device_arena_ = Tensor();
  ++arena_generation_;
}

void GraphExecutor::release_captured_graphs() {
  for (const auto& e : cache_.entries())
    if (e->capture) e->capture->release_graph();
}

bool GraphExecutor::release_captured_graph(const std::vector<Tensor>& inputs) {
  PreparedPlan* e = cache_.find(signature_of(inputs, nullptr).key);
  if (!e || !e->capture || !e->capture->has_graph()) return false;
  e->capture->release_graph();
  return true;
}

std::vector<Tensor> GraphExecutor::input_slots(const std::vector<Tensor>& inputs) {
  ONYX_CHECK(capture_, "input slots need a GPU session with capture on");
  return prepared(signature_of(inputs, nullptr))->capture->input_slots();
}

}  // namespace onyx
