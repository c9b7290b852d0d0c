#include "exec/executor.h"

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
  for (auto& node : graph_.nodes) {
    resolve_op(node, registry);
    for (auto& attr : node.attributes) {
      auto add = [&](const std::shared_ptr<Graph>& g) {
        with_context(cat(node.describe(), ": subgraph '", attr.name, "'"), [&] {
          subgraphs_[g.get()] = std::make_unique<GraphExecutor>(*g, registry, alloc_, options_);
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
  for (int step = 0; step < static_cast<int>(graph_.nodes.size()); ++step) {
    run_node(step, env, scope);
    if (options_.release_dead_values)
      for (int id : liveness_.release_after[step]) env[id] = Tensor();
  }
  std::vector<Tensor> outputs;
  outputs.reserve(graph_.outputs.size());
  for (int id : graph_.outputs) {
    ONYX_CHECK(env[id].defined(), "output '", graph_.values[id].name, "' was not produced");
    outputs.push_back(env[id]);
  }
  return outputs;
}

void GraphExecutor::run_node(int step, std::vector<Tensor>& env, const Scope& scope) const {
  const Node& node = graph_.nodes[step];
  const OpDef& def = *node.def;
  with_context(node.describe(), [&] {
    std::vector<ValueType> types(node.inputs.size());
    std::vector<const Tensor*> values(node.inputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      int id = node.inputs[i];
      if (id < 0) continue;
      const Tensor& t = env[id];
      ONYX_ASSERT(t.defined(), "input ", i, " ('", graph_.values[id].name, "') has no value at step ", step);
      types[i] = ValueType{t.dtype(), t.shape()};
      values[i] = &t;
    }
    InferContext ictx(node, types, values);
    def.infer(ictx);

    std::vector<Tensor> outputs(node.outputs.size());
    bool needs_kernel = false;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      const ValueType& vt = ictx.outputs()[o];
      int view_of = -1;
      for (auto [out, in] : def.views) if (out == static_cast<int>(o)) view_of = in;
      if (view_of >= 0 && vt.shape.fully_known()) {
        outputs[o] = values[view_of]->view(vt.shape.to_shape());
        continue;
      }
      needs_kernel = true;
      if (vt.shape.fully_known()) outputs[o] = Tensor(vt.dtype, vt.shape.to_shape(), *alloc_);
    }
    if (needs_kernel) {
      ONYX_ASSERT(def.kernel, "op has no CPU kernel");
      SubgraphRunner runner = [&](const Graph& g, const std::vector<Tensor>& in) {
        auto it = subgraphs_.find(&g);
        ONYX_ASSERT(it != subgraphs_.end(), "unknown subgraph");
        return it->second->run(in, &scope);
      };
      KernelContext kctx(node, values, outputs, *alloc_, &runner);
      def.kernel(kctx);
    }
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] < 0) continue;
      ONYX_ASSERT(outputs[o].defined(), "output ", o, " was not produced");
      env[node.outputs[o]] = std::move(outputs[o]);
    }
  });
}

}  // namespace onyx
