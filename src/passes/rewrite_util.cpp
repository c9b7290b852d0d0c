#include "passes/rewrite_util.h"

#include <algorithm>
#include <unordered_map>
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
  std::stable_sort(replace.begin(), replace.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Node> kept;
  size_t next = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    bool placed = false;
    for (; next < replace.size() && replace[next].first == k; ++next, placed = true)
      kept.push_back(std::move(replace[next].second));
    if (!placed && !removed[k]) kept.push_back(std::move(g.nodes[k]));
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

namespace {

DType traced_dtype_at(const Graph& g, int id, int depth) {
  if (id < 0 || depth > 64) return DType::kUndefined;
  if (g.values[id].declared.dtype != DType::kUndefined) return g.values[id].declared.dtype;
  if (const Tensor* t = constant_value(g, id)) return t->dtype();
  const int p = g.values[id].producer;
  if (p < 0) return DType::kUndefined;
  const Node& n = g.nodes[p];
  const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
  const std::string& op = n.op_type;
  if (onnx && op == "Cast") {
    const Attribute* to = n.find_attribute("to");
    return to ? dtype_from_onnx(static_cast<int>(to->i)) : DType::kUndefined;
  }
  // The output has the type of input 0 (a data input; the others index, shape or scale it).
  static const char* kFirst[] = {"Gather", "GatherElements", "GatherND", "Reshape", "Identity", "Transpose",
                                 "Squeeze", "Unsqueeze", "Expand", "Slice", "Flatten", "Neg", "Abs", "Sqrt",
                                 "Reciprocal", "Exp", "Log", "Tanh", "Sigmoid", "Relu", "Erf", "Softmax",
                                 "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "Pow", "Cos", "Sin",
                                 "Split", "Tile", "Pad"};
  if (onnx)
    for (const char* f : kFirst)
      if (op == f) return n.inputs.empty() ? DType::kUndefined : traced_dtype_at(g, n.inputs[0], depth + 1);
  // Inputs of one type: the first whose type shows.
  if (onnx && (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Concat" || op == "MatMul" ||
               op == "Max" || op == "Min" || op == "Where")) {
    for (size_t i = op == "Where" ? 1 : 0; i < n.inputs.size(); ++i) {
      const DType d = traced_dtype_at(g, n.inputs[i], depth + 1);
      if (d != DType::kUndefined) return d;
    }
    return DType::kUndefined;
  }
  if (n.domain == "com.microsoft" && op == "SkipSimplifiedLayerNormalization" && !n.inputs.empty())
    return traced_dtype_at(g, n.inputs[0], depth + 1);
  if (n.domain == "onyx" && !n.inputs.empty()) {
    const Tensor* w = constant_value(g, n.inputs.back());
    if (w && (op == "Linear" || op == "SiluGateLinear" || op == "RmsNormLinear")) return w->dtype();
    if (op == "SiluMul") return traced_dtype_at(g, n.inputs[0], depth + 1);
  }
  return DType::kUndefined;
}

}  // namespace

DType traced_dtype(const Graph& g, int id) { return traced_dtype_at(g, id, 0); }

void shape_range(const Node& n, int64_t rank, int64_t& start, int64_t& end) {
  start = 0;
  end = rank;
  if (const Attribute* a = n.find_attribute("start")) start = a->i;
  if (const Attribute* a = n.find_attribute("end")) end = a->i;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
}

int drop_dead_nodes(Graph& g) {
  const std::unordered_set<int> pinned = pinned_values(g);
  std::unordered_map<int, int> readers;
  for (const Node& n : g.nodes) {
    for (int id : n.inputs)
      if (id >= 0) ++readers[id];
    for (int id : n.implicit_inputs) ++readers[id];
  }
  std::vector<bool> removed(g.nodes.size(), false);
  int dropped = 0;
  for (size_t k = g.nodes.size(); k-- > 0;) {  // readers before their producers: chains go whole
    const Node& n = g.nodes[k];
    if (!(n.domain.empty() || n.domain == "ai.onnx") || n.outputs.empty()) continue;
    bool live = false;
    for (int o : n.outputs) live = live || (o >= 0 && (pinned.count(o) || readers[o] > 0));
    if (live) continue;
    removed[k] = true;
    ++dropped;
    for (int id : n.inputs)
      if (id >= 0) --readers[id];
    for (int id : n.implicit_inputs) --readers[id];
  }
  std::vector<std::pair<size_t, Node>> none;
  if (dropped) replace_nodes(g, removed, none);
  return dropped;
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
