#include "plan/liveness.h"

namespace onyx {

std::string_view guard_reason_name(GuardReason r) {
  switch (r) {
    case GuardReason::kInitializer: return "initializer";
    case GuardReason::kGraphInput: return "graph input";
    case GuardReason::kGraphOutput: return "graph output";
    case GuardReason::kOuterScope: return "outer scope";
    case GuardReason::kMemoized: return "memoized";
  }
  return "?";
}

GuardList::GuardList(const Graph& g) : reasons_(g.values.size()) {
  for (int id = 0; id < static_cast<int>(g.values.size()); ++id) {
    const Value& v = g.values[id];
    if (v.is_initializer) reasons_[id] = GuardReason::kInitializer;
    else if (v.is_input) reasons_[id] = GuardReason::kGraphInput;
    else if (v.is_outer) reasons_[id] = GuardReason::kOuterScope;
  }
  for (int id : g.outputs) reasons_[id] = GuardReason::kGraphOutput;
}

Liveness compute_liveness(const Graph& g, const GuardList& guards) {
  Liveness l;
  l.last_use.assign(g.values.size(), -1);
  for (int step = 0; step < static_cast<int>(g.nodes.size()); ++step) {
    const Node& n = g.nodes[step];
    for (int v : n.inputs) if (v >= 0) l.last_use[v] = step;
    for (int v : n.implicit_inputs) l.last_use[v] = step;
  }
  l.release_after.assign(g.nodes.size(), {});
  for (int id = 0; id < static_cast<int>(g.values.size()); ++id) {
    if (guards.guarded(id)) continue;
    int step = l.last_use[id] >= 0 ? l.last_use[id] : g.values[id].producer;
    if (step >= 0) l.release_after[step].push_back(id);
  }
  return l;
}

}  // namespace onyx
