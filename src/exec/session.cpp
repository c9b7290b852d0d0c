#include "onyx/session.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <unordered_map>

#include "exec/executor.h"
#include "model/loader.h"

namespace onyx {

std::string ValueDesc::type_str() const {
  if (!is_tensor) return "non-tensor";
  std::string s(dtype_name(dtype));
  if (!rank_known) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    if (dims[i] >= 0) s += std::to_string(dims[i]);
    else s += (i < dim_params.size() && !dim_params[i].empty()) ? dim_params[i] : "?";
  }
  return s + "]";
}

struct Session::Impl {
  SessionOptions options;
  Device device;
  std::unique_ptr<Backend> backend;  // destroyed after the executor (declared before it)
  Model model;
  std::shared_ptr<CpuAllocator> alloc = make_cpu_allocator();
  std::unique_ptr<GraphExecutor> executor;
  std::vector<ValueDesc> inputs, outputs;
  std::vector<int> input_ids;  // graph.inputs position for each entry of `inputs`
  RunStats stats;
  mutable std::mutex run_mutex;

  void check_feed(const ValueDesc& d, const Tensor& t, std::unordered_map<std::string, int64_t>& symbols) const;
};

static ValueDesc describe(const Value& v, bool has_default) {
  ValueDesc d;
  d.name = v.name;
  d.dtype = v.declared.dtype;
  d.rank_known = v.declared.rank_known;
  d.dims = v.declared.dims;
  d.dim_params = v.declared.dim_params;
  d.has_default = has_default;
  d.is_tensor = v.declared.category == TypeInfo::Category::kTensor || v.declared.category == TypeInfo::Category::kUnknown;
  return d;
}

Session::Session() : impl_(std::make_unique<Impl>()) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::load(const std::string& path, const SessionOptions& options) {
  std::unique_ptr<Session> s(new Session());
  Impl& m = *s->impl_;
  m.options = options;
  m.device = resolve_device(options.device);
  m.model = load_model(path);
  Graph& g = *m.model.graph;
  with_context(cat("preparing '", path, "'"), [&] {
    ExecutorOptions eo;
    eo.memory = options.memory;
    eo.plan_cache_capacity = options.plan_cache_capacity;
    eo.log = options.log;
    if (!m.device.is_cpu()) {
      CudaOptions co;
      co.memory_budget_bytes = options.memory_budget_bytes;
      co.memory_fraction = options.memory_fraction;
      m.backend = make_cuda_backend(m.device.index, co);
      eo.backend = m.backend.get();
      eo.allow_cpu_fallback = options.allow_cpu_fallback;
      eo.capture = options.capture;
      eo.validate_replays = options.validate_replays;
    } else {
      ONYX_CHECK(options.capture == CaptureMode::kOff || options.capture == CaptureMode::kAuto,
                 "capture=require needs a CUDA device; this session runs on ", m.device.str());
    }
    m.executor = std::make_unique<GraphExecutor>(g, OpRegistry::global(), m.alloc, eo);
  });
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Value& v = g.values[g.inputs[i]];
    m.inputs.push_back(describe(v, v.is_initializer));
    m.input_ids.push_back(static_cast<int>(i));
  }
  for (int id : g.outputs) m.outputs.push_back(describe(g.values[id], false));
  return s;
}

const std::vector<ValueDesc>& Session::inputs() const { return impl_->inputs; }
const std::vector<ValueDesc>& Session::outputs() const { return impl_->outputs; }
const RunStats& Session::last_run_stats() const { return impl_->stats; }

static void histogram(const Graph& g, ModelSummary& s, std::set<std::string>& unsupported) {
  for (const auto& n : g.nodes) {
    std::string op = n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type;
    ++s.op_histogram[op];
    ++s.node_count;
    if (!OpRegistry::global().find(n.domain, n.op_type, n.opset))
      unsupported.insert(cat(op, " (opset ", n.opset, ")"));
    for (const auto& a : n.attributes) {
      if (a.g) histogram(*a.g, s, unsupported);
      for (const auto& sg : a.graphs) histogram(*sg, s, unsupported);
    }
  }
}

ModelInfo inspect_model(const std::string& path) {
  Model m = load_model(path);
  ModelInfo info;
  ModelSummary& s = info.summary;
  s.path = m.path;
  s.producer = m.producer;
  s.ir_version = m.ir_version;
  s.opsets = m.opsets;
  s.initializer_count = static_cast<int64_t>(m.graph->initializers.size());
  s.initializer_bytes = m.initializer_bytes();
  std::set<std::string> unsupported;
  histogram(*m.graph, s, unsupported);
  info.unsupported_ops.assign(unsupported.begin(), unsupported.end());
  const Graph& g = *m.graph;
  for (int id : g.inputs) info.inputs.push_back(describe(g.values[id], g.values[id].is_initializer));
  for (int id : g.outputs) info.outputs.push_back(describe(g.values[id], false));
  return info;
}

void Session::Impl::check_feed(const ValueDesc& d, const Tensor& t,
                               std::unordered_map<std::string, int64_t>& symbols) const {
  ONYX_CHECK(t.defined(), "the tensor is empty (undefined)");
  ONYX_CHECK(d.is_tensor, "the model declares a non-tensor type, which onyx does not support as an input");
  if (d.dtype != DType::kUndefined)
    ONYX_CHECK(t.dtype() == d.dtype, "dtype ", dtype_name(t.dtype()), " does not match the model's ",
               dtype_name(d.dtype), " (model declares ", d.type_str(), ")");
  if (!d.rank_known) return;
  ONYX_CHECK(t.rank() == d.dims.size(), "shape ", t.shape().str(), " has rank ", t.rank(), ", but the model declares ",
             d.type_str(), " (rank ", d.dims.size(), ")");
  for (size_t i = 0; i < d.dims.size(); ++i) {
    if (d.dims[i] >= 0) {
      ONYX_CHECK(t.shape()[i] == d.dims[i], "shape ", t.shape().str(), " contradicts the model's ", d.type_str(),
                 " at axis ", i, " (", t.shape()[i], " vs ", d.dims[i], ")");
    } else if (i < d.dim_params.size() && !d.dim_params[i].empty()) {
      auto [it, fresh] = symbols.emplace(d.dim_params[i], t.shape()[i]);
      ONYX_CHECK(fresh || it->second == t.shape()[i], "shape ", t.shape().str(), " gives dimension '", d.dim_params[i],
                 "' the size ", t.shape()[i], " at axis ", i, ", but an earlier input gave it ", it->second);
    }
  }
}

NamedTensors Session::run(const NamedTensors& feeds) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
  return with_context(cat("running '", m.model.path, "'"), [&] {
    const Graph& g = *m.model.graph;
    std::vector<Tensor> ordered(g.inputs.size());
    std::unordered_map<std::string, int64_t> symbols;
    for (const auto& [name, tensor] : feeds) {
      size_t k = 0;
      while (k < m.inputs.size() && m.inputs[k].name != name) ++k;
      if (k == m.inputs.size()) {
        std::string names;
        for (const auto& d : m.inputs) names += (names.empty() ? "" : ", ") + d.name;
        throw Error(cat("'", name, "' is not an input of the model (its inputs are: ", names, ")"));
      }
      ONYX_CHECK(!ordered[k].defined(), "input '", name, "' is fed twice");
      with_context(cat("input '", name, "'"), [&] { m.check_feed(m.inputs[k], tensor, symbols); });
      ordered[k] = tensor;
    }
    for (size_t k = 0; k < m.inputs.size(); ++k)
      ONYX_CHECK(ordered[k].defined() || m.inputs[k].has_default, "required input '", m.inputs[k].name,
                 "' (", m.inputs[k].type_str(), ") was not given");

    AllocatorStats before = m.alloc->stats();
    m.alloc->reset_high_water();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> outs = m.executor->run(ordered);
    auto t1 = std::chrono::steady_clock::now();
    AllocatorStats after = m.alloc->stats();
    m.stats.peak_bytes = after.high_water_bytes - before.in_use_bytes;
    m.stats.allocations = after.allocations - before.allocations;
    m.stats.seconds = std::chrono::duration<double>(t1 - t0).count();

    NamedTensors result;
    for (size_t i = 0; i < outs.size(); ++i) result.emplace_back(m.outputs[i].name, std::move(outs[i]));
    return result;
  });
}

PlanSummary Session::plan(const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  Impl& m = *impl_;
  return with_context(cat("planning '", m.model.path, "'"), [&] {
    const Graph& g = *m.model.graph;
    std::vector<ValueType> types(g.inputs.size());
    for (const auto& [name, dims] : input_shapes) {
      int id = g.find_value(name);
      auto pos = std::find(g.inputs.begin(), g.inputs.end(), id);
      ONYX_CHECK(id >= 0 && pos != g.inputs.end(), "'", name, "' is not an input of the model");
      for (int64_t d : dims) ONYX_CHECK(d >= 0, "input '", name, "': dimension ", d, " is not a size");
      types[pos - g.inputs.begin()] = ValueType{g.values[id].declared.dtype, Shape(dims)};
    }
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Value& v = g.values[g.inputs[i]];
      if (types[i].dtype != DType::kUndefined || types[i].shape.rank_known) continue;
      auto init = g.initializers.find(g.inputs[i]);
      if (init != g.initializers.end()) {
        types[i] = ValueType{init->second.dtype(), init->second.shape()};
        continue;
      }
      bool fixed = v.declared.rank_known;
      for (int64_t d : v.declared.dims) fixed &= d >= 0;
      ONYX_CHECK(fixed, "input '", v.name, "' has shape ", v.declared.str(), ": give its shape");
      types[i] = ValueType{v.declared.dtype, Shape(v.declared.dims)};
    }
    ExecutorOptions eo;
    ExecutionPlan p = GraphExecutor::make_plan(g, types, eo.plan, m.executor.get());
    const ArenaPlan& a = p.main_arena();
    PlanSummary s;
    s.device = p.uses_accel ? m.device.str() : "cpu";
    s.host_arena_bytes = p.uses_accel ? p.host_arena.bytes : 0;
    s.steps = static_cast<int>(p.schedule.size());
    s.folded_steps = p.folded_nodes;
    s.in_place = p.in_place_count;
    s.arena_bytes = a.bytes;
    s.lower_bound_bytes = a.lower_bound_bytes;
    s.no_reuse_bytes = a.no_reuse_bytes;
    s.peak_step = a.peak_step;
    if (a.peak_step >= 0 && a.peak_step < s.steps) s.peak_node = g.nodes[a.peak_step].describe();
    s.algorithm = a.algorithm;
    s.alignment = a.alignment;
    for (const auto& b : p.dynamic_boundaries) s.dynamic_boundaries.push_back({b.step, b.node, b.reason});
    for (size_t id = 0; id < p.values.size(); ++id) {
      const ValuePlan& vp = p.values[id];
      if (vp.kind == ValueKind::kAbsent || vp.kind == ValueKind::kExternal) continue;
      PlanSummary::Value v;
      v.name = g.values[id].name;
      v.type = cat(dtype_name(vp.type.dtype), vp.type.shape.str());
      v.kind = std::string(value_kind_name(vp.kind));
      v.bytes = vp.bytes;
      v.offset = vp.offset;
      v.first = vp.first;
      v.last = vp.last;
      v.in_place = vp.in_place;
      if (vp.root != static_cast<int>(id)) v.alias_of = g.values[vp.root].name;
      v.device = vp.on_accel ? m.device.str() : "cpu";
      s.values.push_back(std::move(v));
    }
    return s;
  });
}

std::string Session::device() const { return impl_->device.str(); }

std::vector<std::pair<std::string, std::string>> Session::cpu_fallbacks() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : impl_->executor->fallbacks()) out.emplace_back(f.node, f.reason);
  return out;
}

std::string Session::memory_report() const { return impl_->backend ? impl_->backend->memory_report() : ""; }

void Session::set_memory_budget(size_t bytes) {
  ONYX_CHECK(impl_->backend, "set_memory_budget: the session runs on the CPU, which has no governed budget");
  impl_->backend->governor().set_budget(bytes);
}

CaptureReport Session::capture_report() const {
  std::lock_guard<std::mutex> lock(impl_->run_mutex);  // a run may be replacing graphs
  return impl_->executor->capture_report();
}

void Session::release_captured_graphs() {
  std::lock_guard<std::mutex> lock(impl_->run_mutex);
  impl_->executor->release_captured_graphs();
}

bool Session::release_captured_graph(const NamedTensors& example_feeds) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
  std::vector<Tensor> ordered(m.inputs.size());
  for (const auto& [name, t] : example_feeds) {
    size_t k = 0;
    while (k < m.inputs.size() && m.inputs[k].name != name) ++k;
    ONYX_CHECK(k < m.inputs.size(), "'", name, "' is not an input of the model");
    ordered[k] = t;
  }
  return m.executor->release_captured_graph(ordered);
}

Session::InputBinding Session::bind_inputs(const NamedTensors& example_feeds) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
  return with_context(cat("binding inputs of '", m.model.path, "'"), [&] {
    ONYX_CHECK(m.backend && m.options.capture != CaptureMode::kOff, "input binding needs a GPU session with capture on");
    const Graph& g = *m.model.graph;
    std::vector<Tensor> ordered(g.inputs.size());
    for (const auto& [name, t] : example_feeds) {
      size_t k = 0;
      while (k < m.inputs.size() && m.inputs[k].name != name) ++k;
      ONYX_CHECK(k < m.inputs.size(), "'", name, "' is not an input of the model");
      ordered[k] = t;
    }
    std::vector<Tensor> slots = m.executor->input_slots(ordered);
    InputBinding b;
    for (size_t k = 0; k < slots.size(); ++k) b.slots.emplace_back(m.inputs[k].name, slots[k]);
    b.stream = m.backend->stream_handle();
    return b;
  });
}

void Session::set_release_staging_under_capture_for_testing(bool release) {
  ONYX_CHECK(impl_->backend, "the session runs on the CPU");
  impl_->backend->set_release_staging_under_capture(release);
}

PlanCacheReport Session::plan_cache() const {
  PlanCacheStats c = impl_->executor->plan_cache_stats();
  return {c.hits, c.misses, c.evictions, c.entries, c.arena_bytes};
}

}  // namespace onyx
