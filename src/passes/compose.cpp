#include "passes/compose.h"

#include <algorithm>

#include "onyx/error.h"

namespace onyx {

void prepend_graph(Graph& g, const Graph& front, const std::vector<std::pair<std::string, std::string>>& links,
                   const std::string& prefix) {
  for (const Node& n : front.nodes)
    for (const Attribute& a : n.attributes)
      ONYX_CHECK(a.kind != Attribute::Kind::kGraph && a.kind != Attribute::Kind::kGraphs, "graph '", front.name,
                 "': ", n.describe(), " has a subgraph; onyx joins graphs without control flow only");
  // Each link's two ends first, before anything changes.
  std::vector<std::pair<int, int>> joined;  // (front value, g input)
  for (const auto& [out, in] : links) {
    const int o = front.find_value(out);
    ONYX_CHECK(o >= 0 && std::find(front.outputs.begin(), front.outputs.end(), o) != front.outputs.end(), "graph '",
               front.name, "' has no output '", out, "'");
    const int i = g.find_value(in);
    ONYX_CHECK(i >= 0 && g.values[i].is_input && !g.values[i].is_initializer, "graph '", g.name, "' has no input '",
               in, "'");
    joined.emplace_back(o, i);
  }
  std::vector<int> id(front.values.size(), -1);
  for (size_t v = 0; v < front.values.size(); ++v) {
    const Value& fv = front.values[v];
    if (fv.is_input && !fv.is_initializer) {
      int gi = g.find_value(fv.name);
      if (gi >= 0) {
        const Value& existing = g.values[gi];
        ONYX_CHECK(existing.is_input && !existing.is_initializer, "graph '", g.name, "' has a value '", fv.name,
                   "' that is not an input; graph '", front.name, "' reads an input of that name");
        ONYX_CHECK(existing.declared.dtype == fv.declared.dtype || existing.declared.dtype == DType::kUndefined ||
                       fv.declared.dtype == DType::kUndefined,
                   "input '", fv.name, "' is ", existing.declared.str(), " in graph '", g.name, "' and ",
                   fv.declared.str(), " in graph '", front.name, "'");
      } else {
        gi = g.value_id(fv.name);
        g.values[gi].declared = fv.declared;
        g.values[gi].is_input = true;
        g.inputs.push_back(gi);
      }
      id[v] = gi;
      continue;
    }
    const std::string name = prefix + fv.name;
    ONYX_CHECK(g.find_value(name) < 0, "graph '", g.name, "' already has a value named '", name, "'");
    const int gi = g.value_id(name);
    Value& nv = g.values[gi];
    nv.declared = fv.declared;
    nv.is_initializer = fv.is_initializer;
    if (fv.is_initializer) {
      auto it = front.initializers.find(static_cast<int>(v));
      if (it != front.initializers.end()) g.initializers[gi] = it->second;
    }
    id[v] = gi;
  }
  // front's nodes, then an Identity per link, then g's nodes: producers of g's values move up.
  std::vector<Node> nodes;
  nodes.reserve(front.nodes.size() + links.size() + g.nodes.size());
  for (const Node& n : front.nodes) {
    Node c = n;
    c.name = prefix + n.name;
    for (int& v : c.inputs)
      if (v >= 0) v = id[v];
    for (int& v : c.outputs)
      if (v >= 0) v = id[v];
    for (int& v : c.implicit_inputs)
      if (v >= 0) v = id[v];
    c.def = nullptr;
    nodes.push_back(std::move(c));
  }
  for (const auto& [o, i] : joined) {
    Node n;
    n.name = prefix + "link_" + g.values[i].name;
    n.op_type = "Identity";
    n.opset = 13;
    n.inputs = {id[o]};
    n.outputs = {i};
    nodes.push_back(std::move(n));
    Value& gv = g.values[i];
    gv.is_input = false;
    g.inputs.erase(std::find(g.inputs.begin(), g.inputs.end(), i));
  }
  const int shift = static_cast<int>(nodes.size());
  for (Value& v : g.values)
    if (v.producer >= 0) v.producer += shift;
  for (Node& n : g.nodes) nodes.push_back(std::move(n));
  g.nodes = std::move(nodes);
  for (int k = 0; k < shift; ++k)
    for (int v : g.nodes[k].outputs)
      if (v >= 0) g.values[v].producer = k;
}

}  // namespace onyx
