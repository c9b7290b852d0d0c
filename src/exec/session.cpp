#include "onyx/session.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <string_view>

#include "exec/executor.h"
#include "model/loader.h"
#include "passes/optimize.h"

namespace onyx {

std::string ValueDesc::type_str() const {
  if (dtype == DType::kSequence || dtype == DType::kOptional || dtype == DType::kMap)
    return element_dtype == DType::kUndefined ? std::string(dtype_name(dtype))
                                              : cat(dtype_name(dtype), "<", dtype_name(element_dtype), ">");
  if (!is_tensor) return "non-tensor";
  TypeInfo t;
  t.category = TypeInfo::Category::kTensor;
  t.dtype = dtype;
  t.rank_known = rank_known;
  t.dims = dims;
  t.dim_params = dim_params;
  return t.str();
}

struct Session::Impl {
  SessionOptions options;
  Device device;
  std::unique_ptr<Backend> backend;  // destroyed after the executor (declared before it)
  Model model;
  std::shared_ptr<CpuAllocator> alloc = make_cpu_allocator();
  std::unique_ptr<GraphExecutor> executor;
  std::vector<ValueDesc> inputs, outputs;
  mutable std::mutex run_mutex;
  // The last run's statistics, under their own lock: a reader copies them whole while
  // another thread's run goes on, and sees one run's numbers, never a mix of two.
  mutable std::mutex stats_mutex;
  RunStats stats;

  // The sizes that the feeds checked so far gave the symbolic dimensions, by name.
  using Symbols = std::vector<std::pair<std::string_view, int64_t>>;
  void check_feed(const ValueDesc& d, const Tensor& t, Symbols& symbols) const;
  // Feeds by name -> graph input order; unknown or repeated names are errors.
  std::vector<Tensor> order_feeds(const NamedTensors& feeds, bool check) const;
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
  d.element_dtype = v.declared.elem_dtype;
  return d;
}

Session::Session() : impl_(std::make_unique<Impl>()) {}
Session::~Session() = default;

static void fill_summary(const Model& m, ModelSummary& s);
static void histogram(const Graph& g, ModelSummary& s, std::set<std::string>& unsupported);

std::unique_ptr<Session> Session::prepare(const SessionOptions& options, const std::function<Model()>& load) {
  std::unique_ptr<Session> s(new Session());
  Session::Impl& m = *s->impl_;
  m.options = options;
  m.device = resolve_device(options.device);
  ONYX_CHECK(!m.device.is_cpu() || options.capture != CaptureMode::kRequire,
             "capture=require needs a CUDA device; this session runs on ", m.device.str());
  m.alloc->set_budget(options.host_memory_budget_bytes ? options.host_memory_budget_bytes
                                                      : default_host_memory_budget());
  m.model = load();
  Graph& g = *m.model.graph;
  with_context(cat("optimizing '", m.model.path, "'"),
               [&] { optimize_graph(g, options, m.device, OptimizeDefaults{.fuse_attention_on_cpu = true}); });
  with_context(cat("preparing '", m.model.path, "'"), [&] {
    m.backend = make_backend(m.device, options);
    m.executor = std::make_unique<GraphExecutor>(g, OpRegistry::global(), m.alloc, options, m.backend.get());
  });
  for (int id : g.inputs) m.inputs.push_back(describe(g.values[id], g.values[id].is_initializer));
  for (int id : g.outputs) m.outputs.push_back(describe(g.values[id], false));
  return s;
}

std::unique_ptr<Session> Session::load(const std::string& path, const SessionOptions& options) {
  return prepare(options, [&] { return load_model(path); });
}

std::unique_ptr<Session> Session::load_from_bytes(const void* data, size_t size, const SessionOptions& options,
                                                  const std::string& base_dir) {
  return prepare(options, [&] { return load_model_from_bytes(data, size, "<model bytes>", base_dir); });
}

ModelSummary Session::summary() const {
  ModelSummary s;
  fill_summary(impl_->model, s);
  std::set<std::string> unsupported;
  histogram(*impl_->model.graph, s, unsupported);  // the graph as prepared: folded and fused
  return s;
}

const std::vector<ValueDesc>& Session::inputs() const { return impl_->inputs; }
const std::vector<ValueDesc>& Session::outputs() const { return impl_->outputs; }
RunStats Session::last_run_stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

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

static void fill_summary(const Model& m, ModelSummary& s) {
  s.path = m.path;
  s.producer = m.producer;
  s.producer_version = m.producer_version;
  s.domain = m.domain;
  s.doc_string = m.doc_string;
  s.graph_name = m.graph_name;
  s.graph_doc_string = m.graph_doc_string;
  s.model_version = m.model_version;
  s.metadata = m.metadata;
  s.ir_version = m.ir_version;
  s.opsets = m.opsets;
  s.initializer_count = static_cast<int64_t>(m.graph->initializers.size());
  s.initializer_bytes = m.initializer_bytes();
}

ModelInfo inspect_model(const std::string& path) {
  Model m = load_model(path);
  ModelInfo info;
  ModelSummary& s = info.summary;
  fill_summary(m, s);
  std::set<std::string> unsupported;
  histogram(*m.graph, s, unsupported);
  info.unsupported_ops.assign(unsupported.begin(), unsupported.end());
  const Graph& g = *m.graph;
  for (int id : g.inputs) info.inputs.push_back(describe(g.values[id], g.values[id].is_initializer));
  for (int id : g.outputs) info.outputs.push_back(describe(g.values[id], false));
  return info;
}

void Session::Impl::check_feed(const ValueDesc& d, const Tensor& t, Symbols& symbols) const {
  ONYX_CHECK(t.defined(), "the tensor is empty (undefined)");
  const bool object = d.dtype == DType::kSequence || d.dtype == DType::kOptional || d.dtype == DType::kMap;
  ONYX_CHECK(d.is_tensor || object, "the model declares a sparse tensor, which onyx does not support as an input");
  ONYX_CHECK(t.on_host() || t.device() == device, "the tensor is on ", t.device().str(), ", but the session runs on ",
             device.str(), " (feeds may lie on the host or on the session's device)");
  if (d.dtype != DType::kUndefined)
    ONYX_CHECK(t.dtype() == d.dtype, "dtype ", dtype_name(t.dtype()), " does not match the model's ",
               dtype_name(d.dtype), " (model declares ", d.type_str(), ")");
  if (!d.rank_known || object) return;
  ONYX_CHECK(t.rank() == d.dims.size(), "shape ", t.shape().str(), " has rank ", t.rank(), ", but the model declares ",
             d.type_str(), " (rank ", d.dims.size(), ")");
  for (size_t i = 0; i < d.dims.size(); ++i) {
    if (d.dims[i] >= 0) {
      ONYX_CHECK(t.shape()[i] == d.dims[i], "shape ", t.shape().str(), " contradicts the model's ", d.type_str(),
                 " at axis ", i, " (", t.shape()[i], " vs ", d.dims[i], ")");
    } else if (i < d.dim_params.size() && !d.dim_params[i].empty()) {
      auto it = std::find_if(symbols.begin(), symbols.end(), [&](const auto& s) { return s.first == d.dim_params[i]; });
      if (it == symbols.end()) {
        symbols.emplace_back(d.dim_params[i], t.shape()[i]);
        continue;
      }
      ONYX_CHECK(it->second == t.shape()[i], "shape ", t.shape().str(), " gives dimension '", d.dim_params[i],
                 "' the size ", t.shape()[i], " at axis ", i, ", but an earlier input gave it ", it->second);
    }
  }
}

std::vector<Tensor> Session::Impl::order_feeds(const NamedTensors& feeds, bool check) const {
  std::vector<Tensor> ordered(inputs.size());
  Symbols symbols;
  for (const auto& [name, tensor] : feeds) {
    size_t k = 0;
    while (k < inputs.size() && inputs[k].name != name) ++k;
    if (k == inputs.size()) {
      std::string names;
      for (const auto& d : inputs) names += (names.empty() ? "" : ", ") + d.name;
      throw Error(cat("'", name, "' is not an input of the model (its inputs are: ", names, ")"));
    }
    ONYX_CHECK(!ordered[k].defined(), "input '", name, "' is fed twice");
    // An optional input fed a plain value (a tensor, a sequence) holds that value, as onnxruntime takes it.
    const Tensor fed = inputs[k].dtype == DType::kOptional && tensor.defined() && tensor.dtype() != DType::kOptional &&
                               tensor.on_host()
                           ? Tensor::optional(tensor)
                           : tensor;
    if (check) with_lazy_context([&name = name] { return cat("input '", name, "'"); }, [&] { check_feed(inputs[k], fed, symbols); });
    ordered[k] = fed;
  }
  return ordered;
}

NamedTensors Session::run(const NamedTensors& feeds, const RunOptions& options) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
  return with_lazy_context([&] { return cat("running '", m.model.path, "'"); }, [&] {
    if (m.backend) m.backend->make_current();
    std::vector<Tensor> ordered = m.order_feeds(feeds, true);
    std::string missing;
    size_t n_missing = 0;
    for (size_t k = 0; k < m.inputs.size(); ++k)
      if (!ordered[k].defined() && !m.inputs[k].has_default) {
        missing += cat(n_missing++ ? ", '" : "'", m.inputs[k].name, "' (", m.inputs[k].type_str(), ")");
      }
    ONYX_CHECK(n_missing == 0, n_missing == 1 ? "required input " : "required inputs ", missing,
               n_missing == 1 ? " was" : " were", " not given");
    auto output_index = [&](const std::string& name) {
      size_t k = 0;
      while (k < m.outputs.size() && m.outputs[k].name != name) ++k;
      ONYX_CHECK(k < m.outputs.size(), "run options name '", name, "', which is not an output of the model");
      return k;
    };
    // Lists of places and bound tensors only when the options name any (most runs: none).
    const bool placed = options.outputs != OutputPlace::kHost || !options.output_places.empty();
    std::vector<OutputPlace> places(placed ? m.outputs.size() : 0, options.outputs);
    for (const auto& [name, place] : options.output_places) places[output_index(name)] = place;
    std::vector<Tensor> bound(options.bound_outputs.empty() ? 0 : m.outputs.size());
    for (const auto& [name, t] : options.bound_outputs) {
      ONYX_CHECK(t.defined(), "the tensor bound to output '", name, "' is empty");
      ONYX_CHECK(t.on_host() || t.device() == m.device, "output '", name, "' is bound to a tensor on ",
                 t.device().str(), ", but the session runs on ", m.device.str());
      bound[output_index(name)] = t;
    }

    AllocatorStats before = m.alloc->stats();
    m.alloc->reset_high_water();
    RunControl control(options.timeout_seconds, options.cancel.get());
    std::vector<std::pair<int, double>> node_times;
    if (options.profile) control.profile = &node_times;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Tensor> outs =
        m.executor->run(ordered, nullptr, placed ? &places : nullptr, bound.empty() ? nullptr : &bound, &control);
    auto t1 = std::chrono::steady_clock::now();
    AllocatorStats after = m.alloc->stats();
    RunStats stats;
    stats.peak_bytes = after.high_water_bytes > before.in_use_bytes ? after.high_water_bytes - before.in_use_bytes : 0;
    stats.allocations = after.allocations - before.allocations;
    stats.seconds = std::chrono::duration<double>(t1 - t0).count();
    stats.nodes.reserve(node_times.size());
    for (const auto& [index, seconds] : node_times) {
      const Node& n = m.executor->graph().nodes[index];
      stats.nodes.push_back({n.describe(), n.domain.empty() || n.domain == "ai.onnx" ? n.op_type : cat(n.domain, "::", n.op_type), seconds});
    }
    {
      std::lock_guard<std::mutex> stats_lock(m.stats_mutex);
      m.stats = stats;
    }

    NamedTensors result;
    for (size_t i = 0; i < outs.size(); ++i) result.emplace_back(m.outputs[i].name, std::move(outs[i]));
    return result;
  });
}

static PlanSummary summarize(const ExecutionPlan& p, const Graph& g, const Device& device) {
  const ArenaPlan& a = p.main_arena();
  PlanSummary s;
  s.device = p.uses_accel ? device.str() : "cpu";
  s.host_arena_bytes = p.uses_accel ? p.host_arena.bytes : 0;
  s.steps = static_cast<int>(g.nodes.size());
  s.folded_steps = p.folded_nodes;
  s.in_place = p.in_place_count;
  s.arena_bytes = a.bytes;
  s.lower_bound_bytes = a.lower_bound_bytes;
  s.no_reuse_bytes = a.no_reuse_bytes;
  s.peak_step = a.peak_step;
  if (a.peak_step >= 0 && a.peak_step < s.steps) s.peak_node = g.nodes[a.peak_step].describe();
  s.algorithm = a.algorithm;
  s.alignment = a.alignment;
  s.capture_blocker = device.is_cpu() ? "" : p.capture_blocker;
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
    v.device = vp.on_accel ? device.str() : "cpu";
    s.values.push_back(std::move(v));
  }
  auto names = [&](const std::vector<int>& ids) {
    std::vector<std::string> out;
    for (int id : ids) out.push_back(g.values[id].name);
    return out;
  };
  for (const Step& st : p.steps)
    s.schedule.push_back({g.nodes[st.node].describe(), std::string(step_place_name(st.place)), st.fallback,
                          names(st.to_host), names(st.to_accel)});
  return s;
}

PlanSummary Session::plan(const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
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
    return summarize(*m.executor->plan_for(types), g, m.device);
  });
}

std::string Session::device() const { return impl_->device.str(); }

Tensor Session::to_device(const Tensor& host) {
  Impl& m = *impl_;
  if (!m.backend || !host.on_host()) {
    ONYX_CHECK(host.on_host() || host.device() == m.device, "to_device: the tensor is on ", host.device().str(),
               ", not on the session's ", m.device.str());
    return host;
  }
  ONYX_CHECK(host.dtype() != DType::kString, "to_device: string tensors stay on the host");
  std::lock_guard<std::mutex> lock(m.run_mutex);  // the stream is the session's
  Tensor d(host.dtype(), host.shape(), m.backend->allocator());
  m.backend->copy_from_host(d.raw(), host.raw(), host.bytes());
  std::string errors = m.backend->finish();
  ONYX_CHECK(errors.empty(), "the device reported: ", errors);
  return d;
}

Tensor Session::to_host(const Tensor& t) {
  Impl& m = *impl_;
  if (t.on_host()) return t;
  ONYX_CHECK(m.backend && t.device() == m.device, "to_host: the tensor is on ", t.device().str(),
             ", not on the session's ", m.device.str());
  std::lock_guard<std::mutex> lock(m.run_mutex);
  Tensor h(t.dtype(), t.shape());
  m.backend->copy_to_host(h.raw(), t.raw(), t.bytes());
  return h;
}

std::vector<std::pair<std::string, std::string>> Session::cpu_fallbacks() const {
  std::lock_guard<std::mutex> lock(impl_->run_mutex);
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
  return m.executor->release_captured_graph(m.order_feeds(example_feeds, false));
}

Session::InputBinding Session::bind_inputs(const NamedTensors& example_feeds) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.run_mutex);
  return with_context(cat("binding inputs of '", m.model.path, "'"), [&] {
    ONYX_CHECK(m.backend && m.options.capture != CaptureMode::kOff,
               "input binding needs a GPU session with capture on");
    std::vector<Tensor> slots = m.executor->input_slots(m.order_feeds(example_feeds, true));
    InputBinding b;
    for (size_t k = 0; k < slots.size(); ++k) b.slots.emplace_back(m.inputs[k].name, slots[k]);
    b.stream = m.backend->stream_handle();
    return b;
  });
}

PlanCacheReport Session::plan_cache() const {
  std::lock_guard<std::mutex> lock(impl_->run_mutex);
  PlanCacheStats c = impl_->executor->plan_cache_stats();
  return {c.hits, c.misses, c.evictions, c.entries, c.arena_bytes};
}

}  // namespace onyx

