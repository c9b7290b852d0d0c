#include "passes/fuse_qdq.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "passes/rewrite_util.h"

namespace onyx {

namespace {

class QdqMatcher {
 public:
  explicit QdqMatcher(Graph& g) : g_(g), outputs_(g.outputs.begin(), g.outputs.end()) {
    for (const auto& n : g.nodes) {
      for (int id : n.inputs)
        if (id >= 0) ++readers_[id];
      for (int id : n.implicit_inputs) ++readers_[id];
    }
  }

  static bool plain(const Node& n, const char* op) {
    return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
  }
  int readers(int id) const {
    auto it = readers_.find(id);
    return it == readers_.end() ? 0 : it->second;
  }
  bool is_output(int id) const { return outputs_.count(id) != 0; }
  // The node producing `id` when it is `op`.
  int producer(int id, const char* op) const {
    if (id < 0) return -1;
    const int p = g_.values[id].producer;
    return p >= 0 && plain(g_.nodes[p], op) ? p : -1;
  }
  // An initializer no feed replaces.
  const Tensor* constant(int id) const {
    if (id < 0) return nullptr;
    auto it = g_.initializers.find(id);
    return it != g_.initializers.end() && !g_.values[id].is_input ? &it->second : nullptr;
  }
  // The element type of value `id` where the graph shows it: an initializer's, a declaration's,
  // or a QuantizeLinear's output (its zero point's type, else output_dtype, else uint8).
  DType dtype(int id) const {
    if (const Tensor* t = constant(id)) return t->dtype();
    if (g_.values[id].declared.dtype != DType::kUndefined) return g_.values[id].declared.dtype;
    const int q = producer(id, "QuantizeLinear");
    if (q < 0) return DType::kUndefined;
    const Node& n = g_.nodes[q];
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) return dtype(n.inputs[2]);
    const Attribute* a = n.find_attribute("output_dtype");
    if (a && a->kind == Attribute::Kind::kInt && a->i) return static_cast<DType>(a->i);
    return DType::kUInt8;
  }
  static int64_t attr_int(const Node& n, const char* name, int64_t fallback) {
    const Attribute* a = n.find_attribute(name);
    return a && a->kind == Attribute::Kind::kInt ? a->i : fallback;
  }

 private:
  Graph& g_;
  std::unordered_map<int, int> readers_;
  std::unordered_set<int> outputs_;
};

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// A DequantizeLinear's (data, scale, zero point) when its data is 8-bit, its scale a float
// initializer that is a scalar or (when `per_axis` >= 0) 1-D along axis `per_axis` of a data
// of rank `rank`, its zero point (if any) an initializer of the data's type, not blocked.
struct Dq {
  int node = -1, data = -1, scale = -1, zero = -1;
  bool per_axis = false;
};

Dq dequantize_of(const QdqMatcher& m, const Graph& g, int id, int per_axis, int64_t rank) {
  Dq d;
  const int p = m.producer(id, "DequantizeLinear");
  if (p < 0) return d;
  const Node& n = g.nodes[p];
  if (n.inputs.size() < 2 || QdqMatcher::attr_int(n, "block_size", 0) != 0) return d;
  const DType t = m.dtype(n.inputs[0]);
  const Tensor* scale = m.constant(n.inputs[1]);
  if (!is_8bit(t) || !scale || !dtype_is_float(scale->dtype())) return d;
  const int zero = n.inputs.size() > 2 ? n.inputs[2] : -1;
  if (zero >= 0) {
    const Tensor* z = m.constant(zero);
    if (!z || z->dtype() != t || z->numel() != scale->numel()) return d;
  }
  if (scale->numel() != 1) {
    const int64_t axis = QdqMatcher::attr_int(n, "axis", 1);
    if (per_axis < 0 || scale->rank() != 1 || (axis != per_axis && axis != per_axis - rank)) return d;
    d.per_axis = true;
  }
  d.node = p, d.data = n.inputs[0], d.scale = n.inputs[1], d.zero = zero;
  return d;
}

// The integer node replacing `like`: named after it, at its opset, in the default domain.
Node integer_node(const Node& like, std::string op, std::vector<int> inputs, std::vector<int> outputs,
                  std::vector<Attribute> attributes) {
  std::string name = like.name.empty() ? op : like.name + "/" + op;
  return make_node(std::move(name), "", std::move(op), like.opset, std::move(inputs), std::move(outputs),
                   std::move(attributes));
}

}  // namespace

QdqFuseReport fuse_qdq(Graph& g) {
  QdqFuseReport report;
  QdqMatcher m(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;  // at the QuantizeLinear's position
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& op = g.nodes[k];
    const bool matmul = QdqMatcher::plain(op, "MatMul"), conv = QdqMatcher::plain(op, "Conv");
    if ((!matmul && !conv) || removed[k] || op.outputs.size() != 1) continue;
    if (op.inputs.size() < 2 || (matmul && op.inputs.size() != 2) || op.inputs.size() > 3) continue;
    // The float result must go to exactly one QuantizeLinear with 8-bit output and scalar parameters.
    const int out = op.outputs[0];
    if (out < 0 || m.is_output(out) || m.readers(out) != 1) continue;
    int q = -1;
    for (size_t j = k + 1; j < g.nodes.size() && q < 0; ++j)
      if (std::find(g.nodes[j].inputs.begin(), g.nodes[j].inputs.end(), out) != g.nodes[j].inputs.end())
        q = QdqMatcher::plain(g.nodes[j], "QuantizeLinear") ? static_cast<int>(j) : -2;
    if (q < 0 || removed[q]) continue;
    const Node& qn = g.nodes[q];
    if (qn.inputs.size() < 3 || qn.inputs[0] != out || qn.inputs[2] < 0) continue;
    const Tensor* ys = m.constant(qn.inputs[1]);
    const Tensor* yz = m.constant(qn.inputs[2]);
    if (!ys || !yz || ys->numel() != 1 || yz->numel() != 1 || !is_8bit(yz->dtype()) || !dtype_is_float(ys->dtype()))
      continue;
    if (QdqMatcher::attr_int(qn, "block_size", 0) != 0) continue;
    // Its inputs: a per-tensor activation and a weight per tensor or per output channel (a
    // MatMul's B along its last axis, a Conv's W along axis 0).
    const Dq a = dequantize_of(m, g, op.inputs[0], -1, 0);
    int64_t w_rank = -1;
    if (const int wp = m.producer(op.inputs[1], "DequantizeLinear"); wp >= 0)
      if (const Tensor* wq = m.constant(g.nodes[wp].inputs[0])) w_rank = static_cast<int64_t>(wq->rank());
    const Dq b = dequantize_of(m, g, op.inputs[1], matmul ? (w_rank == 2 ? 1 : -1) : 0, w_rank);
    if (a.node < 0 || b.node < 0) continue;
    if (matmul) {
      Node fused = integer_node(op, "QLinearMatMul",
                             {a.data, a.scale, a.zero, b.data, b.scale, b.zero, qn.inputs[1], qn.inputs[2]},
                             {qn.outputs[0]}, {});
      removed[k] = removed[q] = true;
      replace.emplace_back(q, std::move(fused));
      ++report.matmuls;
    } else {
      // A Conv's bias: DequantizeLinear of an int32 initializer with scale x_scale * w_scale.
      int bias = -1;
      if (op.inputs.size() == 3 && op.inputs[2] >= 0) {
        const int bp = m.producer(op.inputs[2], "DequantizeLinear");
        if (bp < 0) continue;
        const Node& bn = g.nodes[bp];
        const Tensor* bq = m.constant(bn.inputs[0]);
        const Tensor* bs = bn.inputs.size() > 1 ? m.constant(bn.inputs[1]) : nullptr;
        const Tensor* bz = bn.inputs.size() > 2 ? m.constant(bn.inputs[2]) : nullptr;
        const Tensor* xs = m.constant(a.scale);
        const Tensor* ws = m.constant(b.scale);
        if (!bq || bq->dtype() != DType::kInt32 || !bs || !xs || !ws) continue;
        bool fits = !bz || [&] {
          for (int64_t i = 0; i < bz->numel(); ++i)
            if (bz->get_as_int64(i) != 0) return false;
          return true;
        }();
        for (int64_t c = 0; fits && c < bs->numel(); ++c) {
          const double want = xs->get_as_double(0) * ws->get_as_double(ws->numel() == 1 ? 0 : c);
          fits = std::abs(bs->get_as_double(c) - want) <= 1e-6 * std::abs(want);
        }
        if (!fits || (bs->numel() != 1 && bs->numel() != bq->numel())) continue;
        if (bs->numel() == 1 && ws->numel() != 1) continue;
        bias = bn.inputs[0];
        if (m.readers(op.inputs[2]) == 1 && !m.is_output(op.inputs[2])) removed[bp] = true;
      }
      std::vector<Attribute> attrs;
      for (const auto& at : op.attributes) attrs.push_back(at);
      std::vector<int> inputs{a.data, a.scale, a.zero, b.data, b.scale, b.zero, qn.inputs[1], qn.inputs[2]};
      if (bias >= 0) inputs.push_back(bias);
      replace.emplace_back(q, integer_node(op, "QLinearConv", std::move(inputs), {qn.outputs[0]}, std::move(attrs)));
      removed[k] = removed[q] = true;
      ++report.convs;
    }
    // A DequantizeLinear read by nothing else goes; one with other readers stays for them.
    for (const Dq* d : {&a, &b})
      if (m.readers(g.nodes[d->node].outputs[0]) == 1 && !m.is_output(g.nodes[d->node].outputs[0]))
        removed[d->node] = true;
  }
  replace_nodes(g, removed, replace);
  return report;
}

}  // namespace onyx
