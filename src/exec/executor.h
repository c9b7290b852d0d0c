// Runs a graph node by node on the CPU, releasing each intermediate right after
// its last reader (the run-time release mode; DESIGN L4).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "model/ir.h"
#include "ops/registry.h"
#include "plan/liveness.h"

namespace onyx {

// The values of the enclosing graphs that a subgraph may read, looked up by name.
struct Scope {
  const Graph* graph = nullptr;
  const std::vector<Tensor>* env = nullptr;
  const Scope* parent = nullptr;
  const Tensor* lookup(const std::string& name) const;
};

struct ExecutorOptions {
  // Release intermediates after their last reader (default) or keep every value
  // until the run ends (for debugging: all intermediates stay inspectable).
  bool release_dead_values = true;
};

class GraphExecutor {
 public:
  // Resolves every node (recursively into subgraphs) against `registry`.
  GraphExecutor(Graph& graph, const OpRegistry& registry, std::shared_ptr<Allocator> alloc,
                ExecutorOptions options = {});

  // `inputs` are in graph.inputs order; an undefined tensor means "use the
  // initializer of the same name" (inputs with defaults). Returns the outputs in
  // graph.outputs order.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Scope* outer = nullptr) const;

  const Graph& graph() const { return graph_; }
  const GuardList& guards() const { return guards_; }
  const Liveness& liveness() const { return liveness_; }

 private:
  void run_node(int step, std::vector<Tensor>& env, const Scope& scope) const;

  Graph& graph_;
  std::shared_ptr<Allocator> alloc_;
  ExecutorOptions options_;
  GuardList guards_;
  Liveness liveness_;
  std::map<const Graph*, std::unique_ptr<GraphExecutor>> subgraphs_;
};

}  // namespace onyx
