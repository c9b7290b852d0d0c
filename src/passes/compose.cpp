#include "passes/compose.h"

#include <algorithm>

#include "onyx/error.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

// Drops the nodes whose outputs nothing reads (no node, subgraph or graph output), last first,
// then the graph inputs nothing reads; recomputes the producers.
void prune_unread(Graph& g) {
  std::vector<int> reads(g.values.size(), 0);
  auto count = [&](const Node& n, int d) {
    for (int v : n.inputs)
      if (v >= 0) reads[v] += d;
    for (int v : n.implicit_inputs)
      if (v >= 0) reads[v] += d;
  };
  for (const Node& n : g.nodes) count(n, 1);
  for (int v : g.outputs) ++reads[v];
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    const Node& n = g.nodes[k];
    if (std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && reads[o] > 0; })) continue;
    removed[k] = true;
    count(n, -1);
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!removed[k]) kept.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(kept);
  std::vector<int> inputs;
  for (int v : g.inputs) {
    if (reads[v] > 0 || g.values[v].is_initializer) inputs.push_back(v);
    else g.values[v].is_input = false;
  }
  g.inputs = std::move(inputs);
  set_producers(g);
}

}  // namespace

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

void inline_branch(Graph& g, const std::string& condition, bool value) {
  const int cond = g.find_value(condition);
  ONYX_CHECK(cond >= 0 && g.values[cond].is_input && !g.values[cond].is_initializer, "graph '", g.name,
             "' has no input '", condition, "'");
  int at = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    const bool reads = std::find(n.inputs.begin(), n.inputs.end(), cond) != n.inputs.end() ||
                       std::find(n.implicit_inputs.begin(), n.implicit_inputs.end(), cond) != n.implicit_inputs.end();
    if (!reads) continue;
    ONYX_CHECK(at < 0 && n.op_type == "If" && n.domain.empty() && n.inputs.size() == 1 && n.inputs[0] == cond,
               "graph '", g.name, "': input '", condition, "' is read by ", n.describe(),
               "; onyx fixes an input that only one If node reads as its condition");
    at = static_cast<int>(k);
  }
  ONYX_CHECK(at >= 0, "graph '", g.name, "': no If node reads input '", condition, "'");
  const Node node = g.nodes[at];
  const Attribute* a = node.find_attribute(value ? "then_branch" : "else_branch");
  ONYX_CHECK(a && a->kind == Attribute::Kind::kGraph && a->g, node.describe(), " has no ",
             value ? "then_branch" : "else_branch");
  const Graph& b = *a->g;
  ONYX_CHECK(b.outputs.size() == node.outputs.size(), node.describe(), "'s branch has ", b.outputs.size(),
             " outputs for its ", node.outputs.size());
  // The branch's values in g: what it reads from outer scope by name, its initializers and the
  // values its nodes make under their own names (renamed where g has the name already), its
  // outputs as the If's outputs.
  const std::string prefix = cat(node.name.empty() ? "if" : node.name, value ? "/then/" : "/else/");
  std::vector<int> id(b.values.size(), -1);
  std::vector<bool> renamed(b.values.size(), false);
  auto fresh = [&](const std::string& name, size_t v) {
    if (g.find_value(name) < 0) return g.value_id(name);
    renamed[v] = true;
    std::string n = prefix + name;
    for (int k = 2; g.find_value(n) >= 0; ++k) n = cat(prefix, name, "#", k);
    return g.value_id(n);
  };
  for (size_t v = 0; v < b.values.size(); ++v) {
    const Value& bv = b.values[v];
    if (bv.is_outer || (bv.producer < 0 && !bv.is_initializer && !bv.is_input)) {
      const int o = g.find_value(bv.name);
      ONYX_CHECK(o >= 0, node.describe(), ": its branch reads '", bv.name, "', which the graph does not have");
      id[v] = o;
    } else if (bv.is_initializer) {
      const int o = fresh(bv.name, v);
      g.values[o].is_initializer = true;
      g.values[o].declared = bv.declared;
      g.initializers[o] = b.initializers.at(static_cast<int>(v));
      id[v] = o;
    }
  }
  std::vector<Node> extra;  // Identity for a branch output that is not made by a node of its own
  for (size_t i = 0; i < b.outputs.size(); ++i) {
    const int bo = b.outputs[i], out = node.outputs[i];
    if (out < 0) continue;
    if (b.values[bo].producer >= 0 && id[bo] < 0) {
      id[bo] = out;
      continue;
    }
    ONYX_CHECK(id[bo] >= 0 || b.values[bo].producer >= 0, node.describe(), ": its branch's output '",
               b.values[bo].name, "' is made by nothing");
    Node n;
    n.name = cat(prefix, "output_", i);
    n.op_type = "Identity";
    n.opset = std::max(node.opset, 13);
    n.inputs = {bo};  // mapped below, with the branch's nodes
    n.outputs = {out};
    extra.push_back(std::move(n));
  }
  for (size_t v = 0; v < b.values.size(); ++v)
    if (id[v] < 0 && b.values[v].producer >= 0) {
      id[v] = fresh(b.values[v].name, v);
      g.values[id[v]].declared = b.values[v].declared;
    }
  for (size_t v = 0; v < b.values.size(); ++v)
    if (renamed[v])
      for (const Node& n : b.nodes)
        ONYX_CHECK(std::find(n.implicit_inputs.begin(), n.implicit_inputs.end(), static_cast<int>(v)) ==
                       n.implicit_inputs.end(),
                   node.describe(), ": ", n.describe(), " in its branch has a subgraph reading '", b.values[v].name,
                   "', a name the graph already uses");
  auto mapped = [&](int v) { return v < 0 ? -1 : id[v]; };
  std::vector<Node> nodes;
  for (const Node& bn : b.nodes) {
    Node n = bn;
    for (int& v : n.inputs) v = mapped(v);
    for (int& v : n.outputs) v = mapped(v);
    for (int& v : n.implicit_inputs) v = mapped(v);
    n.def = nullptr;
    nodes.push_back(std::move(n));
  }
  for (Node& n : extra) {
    n.inputs[0] = mapped(n.inputs[0]);
    nodes.push_back(std::move(n));
  }
  g.nodes.erase(g.nodes.begin() + at);
  g.nodes.insert(g.nodes.begin() + at, nodes.begin(), nodes.end());
  prune_unread(g);
}

void drop_outputs(Graph& g, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const int v = g.find_value(name);
    auto it = std::find(g.outputs.begin(), g.outputs.end(), v);
    ONYX_CHECK(v >= 0 && it != g.outputs.end(), "graph '", g.name, "' has no output '", name, "'");
    g.outputs.erase(it);
  }
  prune_unread(g);
}

}  // namespace onyx
