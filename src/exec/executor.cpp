#include "exec/executor.h"

#include "ops/compute.h"

namespace onyx {

const Tensor* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent) {
    int id = s->graph->find_value(name);
    if (id >= 0 && (*s->env)[id].defined()) return &(*s->env)[id];
  }
  return nullptr;
}

GraphExecutor::GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> alloc,
                             ExecutorOptions options)
    : graph_(graph), alloc_(std::move(alloc)), options_(options), guards_(graph), liveness_(compute_liveness(graph, guards_)) {
  // Subgraph bodies run once per call with shapes that change between calls: they
  // use the run-time release path rather than plans.
  ExecutorOptions sub = options_;
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
}

std::vector<Tensor> GraphExecutor::run(const std::vector<Tensor>& inputs, const Scope* outer) const {
  ONYX_ASSERT(inputs.size() <= graph_.inputs.size(), "graph '", graph_.name, "' takes ", graph_.inputs.size(),
              " inputs, got ", inputs.size());
  std::vector<Tensor> env(graph_.values.size());
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
    return run_planned(*entry, env, scope);
  }
  for (int step = 0; step < static_cast<int>(graph_.nodes.size()); ++step) {
    run_node(step, env, scope, nullptr);
    if (options_.memory == MemoryMode::kRelease)
      for (int id : liveness_.release_after[step]) env[id] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (int id : graph_.outputs) {
    ONYX_CHECK(env[id].defined(), "output '", graph_.values[id].name, "' was not produced");
    outputs.push_back(env[id]);
  }
  return outputs;
}

std::vector<Tensor> GraphExecutor::run_planned(const CachedPlan& entry, std::vector<Tensor>& env,
                                               const Scope& scope) const {
  const ExecutionPlan& plan = *entry.plan;
  for (size_t id = 0; id < plan.constants.size(); ++id)
    if (plan.constants[id].defined()) env[id] = plan.constants[id];
  for (int step : plan.schedule) {
    if (plan.skip[step]) continue;
    run_node(step, env, scope, &entry);
    for (int id : plan.release_after[step]) env[id] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (int id : graph_.outputs) {
    ONYX_CHECK(env[id].defined(), "output '", graph_.values[id].name, "' was not produced");
    // A memoized output is the plan's own tensor: the caller gets a copy to keep.
    outputs.push_back(plan.values[id].kind == ValueKind::kConstant ? env[id].clone(*alloc_) : env[id]);
  }
  return outputs;
}

void GraphExecutor::run_node(int step, std::vector<Tensor>& env, const Scope& scope, const CachedPlan* planned) const {
  const Node& node = graph_.nodes[step];
  with_context(node.describe(), [&] {
    std::vector<const Tensor*> values(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      int id = node.inputs[i];
      if (id < 0) continue;
      ONYX_ASSERT(env[id].defined(), "input ", i, " ('", graph_.values[id].name, "') has no value at step ", step);
      values[i] = &env[id];
    }
    SubgraphRunner runner = [&](const Graph& g, const std::vector<Tensor>& in) {
      auto it = subgraphs_.find(&g);
      ONYX_ASSERT(it != subgraphs_.end(), "unknown subgraph");
      return it->second->run(in, &scope);
    };
    // In planned mode, arena values take their planned place; the rest is allocated.
    OutputBinder bind = [&](size_t o, const ValueType& t) -> Tensor {
      const ValuePlan& vp = planned->plan->values[node.outputs[o]];
      if (vp.kind != ValueKind::kArena) return Tensor();
      ONYX_ASSERT(t.dtype == vp.type.dtype && t.shape.dims == vp.type.shape.dims, "output ", o, " is ",
                  dtype_name(t.dtype), t.shape.str(), " but the plan has ", dtype_name(vp.type.dtype),
                  vp.type.shape.str());
      char* base = static_cast<char*>(planned->arena.raw());
      return Tensor::borrow(t.dtype, t.shape.to_shape(), base + vp.offset, planned->arena.storage());
    };
    std::vector<Tensor> outputs = compute_node(node, values, *alloc_, &runner, planned ? &bind : nullptr);
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (node.outputs[o] >= 0) env[node.outputs[o]] = std::move(outputs[o]);
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
  return plan_graph(graph, inputs, options, eval);
}

static std::string signature_of(const std::vector<Tensor>& inputs) {
  std::string sig;
  for (const auto& t : inputs) sig += t.defined() ? t.type_str() + ";" : "default;";
  return sig;
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
  if (entry->plan->arena_bytes)
    entry->arena = Tensor(DType::kUInt8, Shape{static_cast<int64_t>(entry->plan->arena_bytes)}, *alloc_);
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
  for (const auto& e : cache_) s.arena_bytes += e->plan->arena_bytes;
  return s;
}

}  // namespace onyx
