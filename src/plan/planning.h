// What the phases of plan_graph share while one plan is made (internal to src/plan).
#pragma once

#include <vector>

#include "plan/planner.h"

namespace onyx::planning {

struct Planning {
  const Graph& g;
  const PlanRequest& request;
  const PlanOptions& options;
  ExecutionPlan p;
  std::vector<std::vector<ValueType>> node_inputs;  // per node: its inputs' types
  std::vector<bool> dynamic;                        // per node: shapes known only at run time
  std::vector<int> step_of_node;                    // per node: index into p.steps, -1 when folded
  std::vector<int> group_first, group_last;         // per root: the group's lifetime
  std::vector<bool> group_has_output;               // per root: the group holds a graph output

  Planning(const Graph& graph, const PlanRequest& r, const PlanOptions& o) : g(graph), request(r), options(o), p(graph) {}
  size_t nv() const { return g.values.size(); }
  int nn() const { return static_cast<int>(g.nodes.size()); }
  // A value known while planning: a folded result, or an initializer no feed can replace.
  const Tensor* known_value(int id) const {
    if (p.constants[id].defined()) return &p.constants[id];
    auto it = g.initializers.find(id);
    return it != g.initializers.end() && !g.values[id].is_input ? &it->second : nullptr;
  }
};

size_t value_bytes(const ValueType& t);
bool has_subgraphs(const Node& n);

// shapes.cpp: the values present before the first node, then shape propagation with folding.
void start_values(Planning& P);
void propagate_shapes(Planning& P);

}  // namespace onyx::planning
