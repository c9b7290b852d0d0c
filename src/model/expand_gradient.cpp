#include "model/expand_gradient.h"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace onyx {

namespace {

const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div"};
const std::set<std::string> kUnary = {"Neg", "Identity", "Exp", "Log", "Sqrt", "Tanh", "Sigmoid", "Relu"};

// Appends the backward nodes of one Gradient node to `out`, naming what it creates after it.
class Expander {
 public:
  Expander(Graph& g, int opset, std::string prefix, std::vector<Node>& out)
      : g_(g), opset_(opset), prefix_(std::move(prefix)), out_(out) {}

  // One node `type`(inputs) in `domain` ("" or "onyx"), its output a new value, or `into`.
  int op(const std::string& type, std::vector<int> inputs, const std::string& domain = "", int into = -1) {
    Node n;
    n.name = cat(prefix_, "/", type, "_", count_++);
    n.op_type = type;
    n.domain = domain;
    n.opset = domain.empty() ? opset_ : 1;
    n.inputs = std::move(inputs);
    n.outputs = {into >= 0 ? into : fresh()};
    out_.push_back(std::move(n));
    return out_.back().outputs[0];
  }

  // d loss / d v so far: the sum of its contributions, or -1 when there is none.
  int total(int v) {
    auto it = contributions_.find(v);
    if (it == contributions_.end() || it->second.empty()) return -1;
    int sum = it->second[0];
    for (size_t k = 1; k < it->second.size(); ++k) sum = op("Add", {sum, it->second[k]});
    it->second = {sum};
    return sum;
  }
  void contribute(int v, int grad) { contributions_[v].push_back(grad); }

 private:
  int fresh() {
    std::string name = cat(prefix_, "/grad_", count_++);
    while (g_.find_value(name) >= 0) name += "_";
    return g_.value_id(name);
  }

  Graph& g_;
  int opset_;
  std::string prefix_;
  std::vector<Node>& out_;
  int count_ = 0;
  std::unordered_map<int, std::vector<int>> contributions_;
};

void expand_one(Graph& g, const Node& grad, int opset, std::vector<Node>& out) {
  const Attribute* xs_attr = grad.find_attribute("xs");
  const Attribute* y_attr = grad.find_attribute("y");
  ONYX_CHECK(xs_attr && xs_attr->kind == Attribute::Kind::kStrings && !xs_attr->strings.empty(),
             "Gradient needs xs, the names of the values to differentiate by");
  ONYX_CHECK(y_attr && y_attr->kind == Attribute::Kind::kString, "Gradient needs y, the name of the value to differentiate");
  std::vector<std::string> names = xs_attr->strings;
  if (const Attribute* zs = grad.find_attribute("zs"); zs && zs->kind == Attribute::Kind::kStrings)
    names.insert(names.end(), zs->strings.begin(), zs->strings.end());
  ONYX_CHECK(grad.inputs.size() == names.size(), "Gradient takes one input per name in xs and zs (", names.size(),
             "), got ", grad.inputs.size());
  std::vector<int> xs;
  for (size_t i = 0; i < names.size(); ++i) {
    const int id = g.find_value(names[i]);
    ONYX_CHECK(id >= 0, "'", names[i], "' (in ", i < xs_attr->strings.size() ? "xs" : "zs", ") names no value of the graph");
    // onyx differentiates the graph's own values, so each input is the value its name names.
    ONYX_CHECK(grad.inputs[i] == id, "input ", i, " must be '", names[i], "', the value its name in xs/zs names");
    if (i < xs_attr->strings.size()) xs.push_back(id);
  }
  ONYX_CHECK(grad.outputs.size() == xs.size(), "Gradient has one output per name in xs (", xs.size(), "), got ",
             grad.outputs.size());
  const int y = g.find_value(y_attr->s);
  ONYX_CHECK(y >= 0, "y names '", y_attr->s, "', no value of the graph");

  // The nodes between xs and y: those reading a value that depends on an x (forward, in
  // topological order), and of those, the ones y depends on (backward from y).
  std::vector<bool> depends(g.values.size(), false), needed(g.values.size(), false);
  for (int x : xs) depends[x] = true;
  std::vector<bool> on_path(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (&n == &grad) continue;
    bool reads = false;
    for (int in : n.inputs) reads |= in >= 0 && depends[in];
    for (int in : n.implicit_inputs) reads |= in >= 0 && depends[in];
    if (reads)
      for (int o : n.outputs) if (o >= 0) depends[o] = true;
  }
  needed[y] = true;
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    bool feeds = false;
    for (int o : n.outputs) feeds |= o >= 0 && needed[o];
    if (!feeds) continue;
    for (int in : n.inputs) if (in >= 0) needed[in] = true;
    for (int in : n.implicit_inputs) if (in >= 0) needed[in] = true;
    bool reads = false;
    for (int in : n.inputs) reads |= in >= 0 && depends[in];
    for (int in : n.implicit_inputs) reads |= in >= 0 && depends[in];
    on_path[k] = reads;
  }

  Expander e(g, opset, grad.name.empty() ? "Gradient" : grad.name, out);
  if (depends[y]) e.contribute(y, e.op("OnesLike", {y}, "onyx"));
  // Reverse topological order: every reader of a value adds its part before the value's
  // own producer passes the total on.
  for (size_t k = g.nodes.size(); k-- > 0;) {
    if (!on_path[k]) continue;
    const Node n = g.nodes[k];  // a copy: emitting grows g's values, not its nodes
    with_context(cat("differentiating ", n.describe()), [&] {
      const bool binary = n.domain.empty() && kBinary.count(n.op_type);
      ONYX_CHECK(n.domain.empty() && (binary || kUnary.count(n.op_type)),
                 "Gradient differentiates Add, Sub, Mul, Div, Neg, Identity, Exp, Log, Sqrt, Tanh, Sigmoid and Relu; "
                 "this node is on the path from xs to y");
      ONYX_CHECK(n.outputs.size() == 1 && n.inputs.size() == (binary ? 2u : 1u) &&
                     std::all_of(n.inputs.begin(), n.inputs.end(), [](int v) { return v >= 0; }),
                 "unexpected inputs or outputs");
      const int go = e.total(n.outputs[0]);
      if (go < 0) return;
      const int out_v = n.outputs[0];
      const int a = n.inputs[0];
      const std::string& t = n.op_type;
      if (binary) {
        const int b = n.inputs[1];
        // Each part is summed back to its input's shape (broadcasting's derivative).
        auto give = [&](int input, int part) {
          if (depends[input]) e.contribute(input, e.op("SumToShape", {part, input}, "onyx"));
        };
        if (t == "Add") {
          give(a, go);
          give(b, go);
        } else if (t == "Sub") {
          give(a, go);
          if (depends[b]) give(b, e.op("Neg", {go}));
        } else if (t == "Mul") {
          if (depends[a]) give(a, e.op("Mul", {go, b}));
          if (depends[b]) give(b, e.op("Mul", {go, a}));
        } else {  // Div: d(a/b)/da = 1/b, d(a/b)/db = -(a/b)/b
          if (depends[a]) give(a, e.op("Div", {go, b}));
          if (depends[b]) give(b, e.op("Neg", {e.op("Div", {e.op("Mul", {go, out_v}), b})}));
        }
        return;
      }
      int part = -1;
      if (t == "Identity") part = go;
      else if (t == "Neg") part = e.op("Neg", {go});
      else if (t == "Exp") part = e.op("Mul", {go, out_v});
      else if (t == "Log") part = e.op("Div", {go, a});
      else if (t == "Sqrt") part = e.op("Div", {go, e.op("Add", {out_v, out_v})});
      else if (t == "Tanh")
        part = e.op("Mul", {go, e.op("Sub", {e.op("OnesLike", {out_v}, "onyx"), e.op("Mul", {out_v, out_v})})});
      else if (t == "Sigmoid")
        part = e.op("Mul", {go, e.op("Mul", {out_v, e.op("Sub", {e.op("OnesLike", {out_v}, "onyx"), out_v})})});
      else part = e.op("Mul", {go, e.op("Sign", {out_v})});  // Relu: 1 where the output is positive
      e.contribute(a, part);
    });
  }
  // Each output: x's total, shaped like x; zeros for an x that y does not depend on.
  for (size_t i = 0; i < xs.size(); ++i)
    if (grad.outputs[i] >= 0) e.op("SumToShape", {e.total(xs[i]), xs[i]}, "onyx", grad.outputs[i]);
}

}  // namespace

bool expand_gradients(Graph& g, int onnx_opset) {
  std::vector<Node> added;
  std::vector<bool> drop(g.nodes.size(), false);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (n.domain != "ai.onnx.preview.training" || n.op_type != "Gradient") continue;
    with_context(n.describe(), [&] { expand_one(g, n, onnx_opset, added); });
    drop[k] = true;
  }
  if (added.empty()) return false;
  std::vector<Node> nodes;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!drop[k]) nodes.push_back(std::move(g.nodes[k]));
  for (auto& n : added) nodes.push_back(std::move(n));
  g.nodes = std::move(nodes);
  for (auto& v : g.values) v.producer = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(k);
  return true;
}

}  // namespace onyx
