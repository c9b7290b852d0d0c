#include "passes/pattern_match.h"

#include <algorithm>

namespace onyx::rewrite {

int other_input(const Node& n, int known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return n.inputs[1];
  if (n.inputs[1] == known) return n.inputs[0];
  return -1;
}

Attribute make_int(const char* name, int64_t v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

Attribute make_float(const char* name, float v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  return a;
}

Attribute make_string(const char* name, std::string v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kString;
  a.s = std::move(v);
  return a;
}

Node fused_node(std::string name, std::string domain, std::string op, int opset, std::vector<int> inputs,
                std::vector<int> outputs, std::vector<Attribute> attributes) {
  Node n;
  n.name = std::move(name);
  n.domain = std::move(domain);
  n.op_type = std::move(op);
  n.opset = opset;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attributes = std::move(attributes);
  return n;
}

void apply(Graph& g, const std::vector<bool>& removed, std::vector<std::pair<size_t, Node>>& replace) {
  if (replace.empty()) return;
  std::sort(replace.begin(), replace.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node> kept;
  size_t next = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (next < replace.size() && replace[next].first == k) {
      kept.push_back(std::move(replace[next].second));
      ++next;
      continue;
    }
    if (!removed[k]) kept.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(k);
}

}  // namespace onyx::rewrite
