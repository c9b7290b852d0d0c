#include "passes/fuse_patterns.h"

#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace onyx {

namespace {

struct Matcher {
  Graph& g;
  std::unordered_map<int, int> readers;  // value id -> how many node inputs read it
  std::unordered_set<int> outputs;

  explicit Matcher(Graph& graph) : g(graph), outputs(graph.outputs.begin(), graph.outputs.end()) {
    for (const auto& n : g.nodes) {
      for (int id : n.inputs)
        if (id >= 0) ++readers[id];
      for (int id : n.implicit_inputs) ++readers[id];
    }
  }

  bool plain(const Node& n, const char* op) const {
    return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
  }
  // The node producing `id` when `op` produces it and only `reader` reads it.
  Node* sole(int id, const char* op) {
    if (id < 0 || outputs.count(id) || readers[id] != 1) return nullptr;
    const int p = g.values[id].producer;
    if (p < 0 || !plain(g.nodes[p], op)) return nullptr;
    return &g.nodes[p];
  }
  // A value known at load: an initializer no feed replaces, or a Constant node's value.
  const Tensor* constant(int id) const {
    if (id < 0) return nullptr;
    auto it = g.initializers.find(id);
    if (it != g.initializers.end()) return g.values[id].is_input ? nullptr : &it->second;
    const int p = g.values[id].producer;
    if (p < 0 || !plain(g.nodes[p], "Constant")) return nullptr;
    const Attribute* a = g.nodes[p].find_attribute("value");
    return a && a->kind == Attribute::Kind::kTensor ? &a->t : nullptr;
  }
  std::optional<double> scalar(int id) const {
    const Tensor* t = constant(id);
    if (!t || t->numel() != 1 || !t->on_host() || t->dtype() == DType::kString) return std::nullopt;
    return t->get_as_double(0);
  }
};

// The value Mul or Add combines with `known` (either operand order); -1 when neither is it.
int other_input(const Node& n, int known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return n.inputs[1];
  if (n.inputs[1] == known) return n.inputs[0];
  return -1;
}

}  // namespace

FuseReport fuse_patterns(Graph& g) {
  FuseReport r;
  Matcher m(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;  // position of the last node -> the fused node
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& out_mul = g.nodes[k];
    if (removed[k] || !m.plain(out_mul, "Mul") || out_mul.inputs.size() != 2) continue;
    // Mul(w, y) with y = Mul(x, inv) or Div(x, s); w a 1-D constant.
    for (int side = 0; side < 2; ++side) {
      const int w = out_mul.inputs[side], y = out_mul.inputs[1 - side];
      const Tensor* wt = m.constant(w);
      if (!wt || wt->rank() != 1) continue;
      const int yp = y >= 0 ? g.values[y].producer : -1;
      if (yp < 0 || m.outputs.count(y) || m.readers[y] != 1) continue;
      Node& yn = g.nodes[yp];
      int x = -1, s = -1;
      std::vector<int> chain{yp};
      if (m.plain(yn, "Div") && yn.inputs.size() == 2) {
        x = yn.inputs[0];
        s = yn.inputs[1];
      } else if (m.plain(yn, "Mul") && yn.inputs.size() == 2) {
        for (int j = 0; j < 2 && s < 0; ++j) {
          const int inv = yn.inputs[j];
          Node* rec = m.sole(inv, "Reciprocal");
          Node* div = rec ? nullptr : m.sole(inv, "Div");
          if (rec && rec->inputs.size() == 1) {
            s = rec->inputs[0];
            chain.push_back(g.values[inv].producer);
          } else if (div && div->inputs.size() == 2 && m.scalar(div->inputs[0]) == 1.0) {
            s = div->inputs[1];
            chain.push_back(g.values[inv].producer);
          } else {
            continue;
          }
          x = yn.inputs[1 - j];
        }
      }
      if (x < 0 || s < 0) continue;
      Node* sqrt = m.sole(s, "Sqrt");
      if (!sqrt || sqrt->inputs.size() != 1) continue;
      chain.push_back(g.values[s].producer);
      const int var = sqrt->inputs[0];
      Node* add = m.sole(var, "Add");
      if (!add || add->inputs.size() != 2) continue;
      chain.push_back(g.values[var].producer);
      int mean = -1;
      std::optional<double> eps;
      for (int j = 0; j < 2 && !eps; ++j)
        if ((eps = m.scalar(add->inputs[j]))) mean = add->inputs[1 - j];
      if (!eps || *eps < 0) continue;
      Node* rm = m.sole(mean, "ReduceMean");
      if (!rm || rm->inputs.empty()) continue;
      chain.push_back(g.values[mean].producer);
      const Attribute* keep = rm->find_attribute("keepdims");
      if (keep && keep->i != 1) continue;
      std::vector<int64_t> axes;
      if (rm->inputs.size() > 1) {  // opset 18: axes as an input
        const Tensor* at = m.constant(rm->inputs[1]);
        if (!at) continue;
        axes = at->to_int64_vector();
      } else if (const Attribute* a = rm->find_attribute("axes")) {
        axes = a->ints;
      }
      const auto& xd = g.values[x].declared;
      const bool last = axes.size() == 1 && (axes[0] == -1 || (xd.rank_known && axes[0] == int64_t(xd.dims.size()) - 1));
      if (!last) continue;
      const int sq = rm->inputs[0];
      Node* pow = m.sole(sq, "Pow");
      Node* mul_sq = pow ? nullptr : m.sole(sq, "Mul");
      if (pow && pow->inputs.size() == 2 && pow->inputs[0] == x && m.scalar(pow->inputs[1]) == 2.0) {
        chain.push_back(g.values[sq].producer);
      } else if (mul_sq && mul_sq->inputs.size() == 2 && mul_sq->inputs[0] == x && mul_sq->inputs[1] == x) {
        chain.push_back(g.values[sq].producer);
      } else {
        continue;
      }
      // x itself may have other readers (the residual); every value in between must not.
      Node fused;
      fused.name = out_mul.name + "/fused_rms_norm";
      fused.op_type = "SimplifiedLayerNormalization";
      fused.opset = out_mul.opset;
      fused.inputs = {x, w};
      fused.outputs = {out_mul.outputs[0]};
      Attribute axis;
      axis.name = "axis";
      axis.kind = Attribute::Kind::kInt;
      axis.i = -1;
      Attribute epsilon;
      epsilon.name = "epsilon";
      epsilon.kind = Attribute::Kind::kFloat;
      epsilon.f = static_cast<float>(*eps);
      fused.attributes = {axis, epsilon};
      for (int c : chain) removed[c] = true;
      removed[k] = true;
      replace.emplace_back(k, std::move(fused));
      ++r.rms_norms;
      r.nodes_removed += static_cast<int>(chain.size());
      break;
    }
  }
  if (replace.empty()) return r;
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
  return r;
}

}  // namespace onyx
