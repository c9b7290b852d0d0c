// The pieces the CPU rewrites (fuse_cpu.cpp) match and rewrite with: the matcher over the
// graph's producers and readers that fuse_patterns.cpp uses (its anonymous-namespace copy is
// the same code; one should replace the other when the pass helpers are unified), and the
// rewrite that puts fused nodes in place of the chains they replace.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "model/ir.h"
#include "passes/rewrite_util.h"

namespace onyx::rewrite {

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
  const Tensor* constant(int id) const { return constant_value(g, id); }
  std::optional<double> scalar(int id) const {
    const Tensor* t = constant(id);
    if (!t || t->numel() != 1 || !t->on_host() || t->dtype() == DType::kString) return std::nullopt;
    return t->get_as_double(0);
  }
  // A constant integer list (a 1-D or scalar int tensor known at load).
  std::optional<std::vector<int64_t>> ints(int id) const {
    const Tensor* t = constant(id);
    if (!t || !t->on_host() || t->rank() > 1 || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32))
      return std::nullopt;
    return t->to_int64_vector();
  }
  // An int attribute, or `fallback` when absent.
  static int64_t attr_int(const Node& n, const char* name, int64_t fallback) {
    const Attribute* a = n.find_attribute(name);
    return a && a->kind == Attribute::Kind::kInt ? a->i : fallback;
  }
  // The rank of value `id` where the graph shows it (declared, or through ops whose output
  // rank follows from their inputs'); -1 when it does not.
  int rank(int id, int depth = 0) const {
    if (id < 0 || depth > 512) return -1;
    auto memo = rank_memo.find(id);
    if (memo != rank_memo.end()) return memo->second;
    const int r = rank_uncached(id, depth);
    rank_memo[id] = r;
    return r;
  }
  mutable std::unordered_map<int, int> rank_memo;
  int rank_uncached(int id, int depth) const {
    const TypeInfo& t = g.values[id].declared;
    if (t.rank_known) return static_cast<int>(t.dims.size());
    auto it = g.initializers.find(id);
    if (it != g.initializers.end()) return static_cast<int>(it->second.rank());
    if (const Tensor* c = constant(id)) return static_cast<int>(c->rank());  // a Constant node's
    const int p = g.values[id].producer;
    if (p < 0) return -1;
    const Node& n = g.nodes[p];
    const std::string& op = n.op_type;
    // The fused ops of this pass: shaped like their first input (SiluMul: the broadcast of both).
    if (n.domain == "onyx" || ((n.domain.empty() || n.domain == "ai.onnx") &&
                               (op == "SimplifiedLayerNormalization" || op == "Attention"))) {
      int r = -1;
      for (size_t i = 0; i < (op == "SiluMul" ? n.inputs.size() : std::min<size_t>(1, n.inputs.size())); ++i) {
        const int ri = rank(n.inputs[i], depth + 1);
        if (ri < 0) return -1;
        r = std::max(r, ri);
      }
      return r;
    }
    if (n.domain == "com.microsoft" && !n.inputs.empty()) {
      // Contrib ops whose first output (a skip norm's sum, output 3, too) is shaped like their
      // first input: onnxruntime-genai's and the quantizers' products, norms and attention.
      const size_t k = static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), id) - n.outputs.begin());
      const bool skip = op == "SkipSimplifiedLayerNormalization" || op == "SkipLayerNormalization";
      if ((k == 0 && (op == "MatMulNBits" || op == "SimplifiedLayerNormalization" || op == "GroupQueryAttention" ||
                      op == "MultiHeadAttention" || op == "RotaryEmbedding" || op == "FastGelu" ||
                      op == "BiasGelu" || op == "Gelu" || op == "QuickGelu" || skip)) ||
          (k == 3 && skip))
        return rank(n.inputs[0], depth + 1);
      return -1;
    }
    if (!n.domain.empty() && n.domain != "ai.onnx") return -1;
    if (op == "Transpose") {
      const Attribute* perm = n.find_attribute("perm");
      return perm ? static_cast<int>(perm->ints.size()) : rank(n.inputs[0], depth + 1);
    }
    if (op == "Reshape") {
      const auto shape = ints(n.inputs.size() > 1 ? n.inputs[1] : -1);
      if (shape) return static_cast<int>(shape->size());
      const int e = elements(n.inputs.size() > 1 ? n.inputs[1] : -1, depth + 1);
      return e;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Where") {
      int r = -1;
      for (int in : n.inputs) {
        const int ri = rank(in, depth + 1);
        if (ri < 0) return -1;
        r = std::max(r, ri);
      }
      return r;
    }
    if (op == "Shape" || op == "Range") return 1;
    if (op == "MatMul" && n.inputs.size() == 2) {
      const int a = rank(n.inputs[0], depth + 1), b = rank(n.inputs[1], depth + 1);
      return a >= 2 && b >= 2 ? std::max(a, b) : -1;
    }
    if (op == "Unsqueeze") {
      std::optional<std::vector<int64_t>> axes;
      if (n.inputs.size() > 1) axes = ints(n.inputs[1]);
      else if (const Attribute* a = n.find_attribute("axes")) axes = a->ints;
      const int in = n.inputs.empty() ? -1 : rank(n.inputs[0], depth + 1);
      return axes && in >= 0 ? in + static_cast<int>(axes->size()) : -1;
    }
    if (op == "Gather" && n.inputs.size() == 2) {
      const int d = rank(n.inputs[0], depth + 1), i = rank(n.inputs[1], depth + 1);
      return d >= 1 && i >= 0 ? d + i - 1 : -1;
    }
    if (op == "Neg" || op == "Cast" || op == "Sigmoid" || op == "Slice" || op == "Concat" || op == "Softmax" ||
        op == "Identity" || op == "Cos" || op == "Sin" || op == "Sqrt" || op == "Reciprocal" || op == "Exp" ||
        op == "Tanh" || op == "Relu" || op == "Erf" || op == "Abs" || op == "Split" || op == "Pow")
      return n.inputs.empty() ? -1 : rank(n.inputs[0], depth + 1);
    if ((op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd" ||
         op == "ReduceL2" || op == "ReduceSumSquare") &&
        !n.inputs.empty()) {  // a decomposed norm's mean of squares (Gemma 3's q and k norms)
      const int in = rank(n.inputs[0], depth + 1);
      if (in < 0 || attr_int(n, "keepdims", 1) != 0) return in;
      std::optional<std::vector<int64_t>> axes;
      if (n.inputs.size() > 1) axes = ints(n.inputs[1]);
      else if (const Attribute* a = n.find_attribute("axes")) axes = a->ints;
      return axes && !axes->empty() ? in - static_cast<int>(axes->size()) : -1;
    }
    if (op == "Expand" && n.inputs.size() == 2) {  // the broadcast of the input and the shape
      const int a = rank(n.inputs[0], depth + 1), e = elements(n.inputs[1], depth + 1);
      return a >= 0 && e >= 0 ? std::max(a, e) : -1;
    }
    return -1;
  }
  // The number of elements of a 1-D shape tensor where the graph shows it; -1 when not.
  int elements(int id, int depth = 0) const {
    if (id < 0 || depth > 24) return -1;
    if (const Tensor* t = constant(id)) return t->rank() <= 1 ? static_cast<int>(t->numel()) : -1;
    const int p = g.values[id].producer;
    if (p < 0) return -1;
    const Node& n = g.nodes[p];
    if (!plain(n, "Concat") && !plain(n, "Unsqueeze") && !plain(n, "Shape")) return -1;
    if (n.op_type == "Shape") {  // opset 15's start and end (negative from the end) clamped to the rank
      const int r = rank(n.inputs[0], depth + 1);
      if (r < 0) return -1;
      int64_t start = 0, end = 0;
      shape_range(n, r, start, end);
      return static_cast<int>(std::max<int64_t>(0, end - start));
    }
    if (n.op_type == "Unsqueeze") {  // a scalar made 1-D: Unsqueeze(Gather(shape, scalar index), [0])
      const int in = n.inputs.empty() ? -1 : n.inputs[0];
      const int gp = in >= 0 ? g.values[in].producer : -1;
      if (gp < 0 || !plain(g.nodes[gp], "Gather") || g.nodes[gp].inputs.size() != 2) return -1;
      const Tensor* idx = constant(g.nodes[gp].inputs[1]);
      return idx && idx->rank() == 0 && rank(g.nodes[gp].inputs[0], depth + 1) == 1 ? 1 : -1;
    }
    int sum = 0;
    for (int in : n.inputs) {
      const int e = elements(in, depth + 1);
      if (e < 0) return -1;
      sum += e;
    }
    return sum;
  }
  // Slice(x, starts, ends, axes, steps) along the last axis of a rank-`r` x with step 1:
  // {start, end}, or nullopt.
  std::optional<std::pair<int64_t, int64_t>> last_axis_slice(const Node& n, int r) const {
    if (!plain(n, "Slice") || n.inputs.size() < 3 || n.opset < 10) return std::nullopt;
    const auto st = ints(n.inputs[1]), en = ints(n.inputs[2]);
    if (!st || !en || st->size() != 1 || en->size() != 1) return std::nullopt;
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) {
      const auto ax = ints(n.inputs[3]);
      if (!ax || ax->size() != 1 || !((*ax)[0] == -1 || (r > 0 && (*ax)[0] == r - 1))) return std::nullopt;
    } else if (r != 1) {
      return std::nullopt;  // no axes: every axis from 0, so only a 1-D x slices its last
    }
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      const auto sp = ints(n.inputs[4]);
      if (!sp || sp->size() != 1 || (*sp)[0] != 1) return std::nullopt;
    }
    return std::pair<int64_t, int64_t>{(*st)[0], (*en)[0]};
  }
};

// The value Mul or Add combines with `known` (either operand order); -1 when neither is it.
int other_input(const Node& n, int known);

}  // namespace onyx::rewrite
