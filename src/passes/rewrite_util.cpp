#include "passes/rewrite_util.h"

#include <algorithm>
#include <unordered_set>

namespace onyx {

Attribute make_int_attr(const char* name, int64_t v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

Attribute make_float_attr(const char* name, float v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  return a;
}

Attribute make_ints_attr(const char* name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

Attribute make_string_attr(const char* name, std::string v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kString;
  a.s = std::move(v);
  return a;
}

Node make_node(std::string name, std::string domain, std::string op, int opset, std::vector<int> inputs,
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

void replace_nodes(Graph& g, const std::vector<bool>& removed, std::vector<std::pair<size_t, Node>>& replace) {
  if (replace.empty() && std::none_of(removed.begin(), removed.end(), [](bool b) { return b; })) return;
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
  set_producers(g);
}

void set_producers(Graph& g) {
  for (auto& v : g.values) v.producer = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(k);
}

std::unordered_set<int> pinned_values(const Graph& g) {
  std::unordered_set<int> pinned(g.outputs.begin(), g.outputs.end());
  for (const Node& n : g.nodes) pinned.insert(n.implicit_inputs.begin(), n.implicit_inputs.end());
  return pinned;
}

void redirect_reads(Graph& g, int from, int to) {
  for (Node& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
}

const Tensor* constant_value(const Graph& g, int id) {
  if (id < 0) return nullptr;
  auto it = g.initializers.find(id);
  if (it != g.initializers.end()) return g.values[id].is_input ? nullptr : &it->second;
  const int p = g.values[id].producer;
  if (p < 0) return nullptr;
  const Node& n = g.nodes[p];
  if (n.op_type != "Constant" || !(n.domain.empty() || n.domain == "ai.onnx")) return nullptr;
  const Attribute* a = n.find_attribute("value");
  return a && a->kind == Attribute::Kind::kTensor ? &a->t : nullptr;
}

int add_initializer(Graph& g, const std::string& base, Tensor t) {
  std::string name = base;
  for (int i = 1; g.find_value(name) >= 0; ++i) name = base + "_" + std::to_string(i);
  const int id = g.value_id(name);
  Value& v = g.values[id];
  v.is_initializer = true;
  v.producer = -1;
  v.declared.category = TypeInfo::Category::kTensor;
  v.declared.dtype = t.dtype();
  v.declared.rank_known = true;
  v.declared.dims = t.shape().dims();
  v.declared.dim_params.assign(v.declared.dims.size(), "");
  g.initializers[id] = std::move(t);
  return id;
}

int drop_unread_initializers(Graph& g, const std::vector<int>& candidates) {
  std::unordered_set<int> read(g.outputs.begin(), g.outputs.end());
  for (const auto& n : g.nodes) {
    read.insert(n.inputs.begin(), n.inputs.end());
    read.insert(n.implicit_inputs.begin(), n.implicit_inputs.end());
  }
  int dropped = 0;
  for (int id : candidates) {
    if (read.count(id) || g.values[id].is_input || !g.initializers.erase(id)) continue;
    g.values[id].is_initializer = false;
    ++dropped;
  }
  return dropped;
}

}  // namespace onyx
