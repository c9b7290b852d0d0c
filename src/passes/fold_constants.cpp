#include "passes/fold_constants.h"

#include <algorithm>
#include <unordered_set>

#include "ops/compute.h"

namespace onyx {

namespace {

bool has_subgraph(const Node& n) {
  for (const auto& a : n.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

bool quantization_op(const Node& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx" && n.domain != "com.microsoft") return false;
  return n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "DynamicQuantizeLinear";
}

}  // namespace

// What a folded node may allocate beyond the bytes that folding keeps (kernels' temporaries).
static constexpr size_t kFoldScratchBytes = size_t{64} << 20;

FoldReport fold_constants(Graph& g, const OpRegistry& registry, size_t growth_allowance) {
  FoldReport r;
  std::unordered_set<int> outputs(g.outputs.begin(), g.outputs.end());
  // A constant: an initializer that is not also a graph input (an input with a default can be fed).
  auto constant = [&](int id) {
    return id >= 0 && !g.values[id].is_input && g.initializers.count(id) > 0;
  };
  std::vector<bool> folded(g.nodes.size(), false);
  std::unordered_set<int> read_by_folded;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.inputs.empty() || !n.implicit_inputs.empty() || has_subgraph(n) || quantization_op(n)) continue;
    bool all_constant = true;
    size_t in_bytes = 0;
    for (int id : n.inputs) {
      if (id < 0) continue;
      if (!constant(id)) {
        all_constant = false;
        break;
      }
      in_bytes += g.initializers.at(id).bytes();
    }
    if (!all_constant) continue;
    if (std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && outputs.count(o); })) continue;
    const OpDef* def = registry.find(n.domain, n.op_type, n.opset);
    if (!def || !def->foldable) continue;
    n.def = def;
    std::vector<const Tensor*> in;
    for (int id : n.inputs) in.push_back(id >= 0 ? &g.initializers.at(id) : nullptr);
    std::vector<Tensor> outs;
    // The node computes under a budget of what folding may keep (and some scratch), so a
    // constant node asking for more (a huge ConstantOfShape) is refused before its memory
    // is taken, and left to run under the session's host memory budget.
    auto alloc = make_cpu_allocator();
    alloc->set_budget(in_bytes + growth_allowance + kFoldScratchBytes);
    try {
      outs = compute_node(n, in, *alloc);
    } catch (const Error&) {
      continue;  // the node's own error comes when it runs, with the run's context
    }
    size_t out_bytes = 0;
    for (const auto& t : outs) out_bytes += t.defined() ? t.bytes() : 0;
    if (out_bytes > in_bytes + growth_allowance) continue;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int id = n.outputs[o];
      if (id < 0 || o >= outs.size() || !outs[o].defined()) continue;
      // (A view keeps its input's storage alive, mapped or not.)
      g.initializers[id] = outs[o];
      Value& v = g.values[id];
      v.is_initializer = true;
      v.declared.category = TypeInfo::Category::kTensor;
      v.declared.dtype = outs[o].dtype();
      v.declared.rank_known = true;
      v.declared.dims = outs[o].shape().dims();
      v.declared.dim_params.assign(v.declared.dims.size(), "");
      g.values[id].producer = -1;
    }
    for (int id : n.inputs)
      if (id >= 0) read_by_folded.insert(id);
    folded[k] = true;
    ++r.nodes;
    r.bytes += out_bytes;
    r.ops.push_back(n.op_type);
  }
  if (!r.nodes) return r;
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - static_cast<size_t>(r.nodes));
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!folded[k]) kept.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(k);
  // Initializers only folded nodes read are dropped (their memory too, unless mapped).
  std::unordered_set<int> read;
  for (const auto& n : g.nodes) {
    read.insert(n.inputs.begin(), n.inputs.end());
    read.insert(n.implicit_inputs.begin(), n.implicit_inputs.end());
  }
  for (int id : read_by_folded)
    if (!read.count(id) && !outputs.count(id) && !g.values[id].is_input && g.initializers.erase(id)) {
      g.values[id].is_initializer = false;
      ++r.freed_initializers;
    }
  return r;
}

}  // namespace onyx
