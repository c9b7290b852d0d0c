#include "passes/kv_cache.h"

#include <algorithm>
#include <map>

#include "passes/rewrite_util.h"

namespace onyx {

namespace {

int64_t int_attr(const Node& n, const char* name, int64_t fallback) {
  const Attribute* a = n.find_attribute(name);
  return a && a->kind == Attribute::Kind::kInt ? a->i : fallback;
}

int64_t concat_axis(const Node& n) { return int_attr(n, "axis", 0); }

Node plain_node(const Node& like, std::string name, std::string op, std::vector<int> in, int out) {
  Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.opset = like.opset;
  n.inputs = std::move(in);
  n.outputs = {out};
  return n;
}

int int64_initializer(Graph& g, const std::string& name, std::vector<int64_t> v) {
  const int id = g.value_id(name);
  g.values[id].is_initializer = true;
  const int64_t n = static_cast<int64_t>(v.size());
  g.initializers[id] = Tensor::from_vector<int64_t>(v, Shape{n});
  return id;
}

// Shape(past) -> Shape(past) - [.., new positions at the sequence axis, ..], nodes inserted
// after the Shape node; returns the values that now hold the rewritten shapes.
std::vector<int> rewrite_past_shapes(Graph& g, const std::vector<int>& pasts, int ids) {
  std::vector<int> rewritten;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.op_type != "Shape" || !n.domain.empty() || n.inputs.empty() ||
        std::find(pasts.begin(), pasts.end(), n.inputs[0]) == pasts.end())
      continue;
    int64_t start = int_attr(n, "start", 0), end = int_attr(n, "end", 4);
    if (start < 0) start += 4;
    if (end < 0) end += 4;
    start = std::clamp<int64_t>(start, 0, 4);
    end = std::clamp<int64_t>(end, 0, 4);
    if (!(start <= 2 && 2 < end)) continue;
    const std::string base = cat(n.name.empty() ? "past_shape" : n.name, "/onyx_capacity");
    const int out = n.outputs[0];
    const int true_shape = g.value_id(base + "/shape");
    n.outputs[0] = true_shape;
    std::vector<int64_t> onehot(end - start, 0);
    onehot[2 - start] = 1;
    const int s_ids = g.value_id(base + "/ids_shape"), s_len = g.value_id(base + "/new"),
              delta = g.value_id(base + "/delta");
    const Node like = n;
    std::vector<Node> added;
    added.push_back(plain_node(like, base + "/Shape", "Shape", {ids}, s_ids));
    added.push_back(plain_node(like, base + "/Slice", "Slice",
                               {s_ids, int64_initializer(g, base + "/one", {1}), int64_initializer(g, base + "/two", {2})},
                               s_len));
    added.push_back(plain_node(like, base + "/Mul", "Mul", {s_len, int64_initializer(g, base + "/axis", onehot)}, delta));
    added.push_back(plain_node(like, base + "/Sub", "Sub", {true_shape, delta}, out));
    g.nodes.insert(g.nodes.begin() + static_cast<long>(k) + 1, added.begin(), added.end());
    k += added.size();
    rewritten.push_back(out);
  }
  set_producers(g);
  return rewritten;
}

// Whether `v` is computed from one of `lengths` through ops that pass an element along.
bool from_past_length(const Graph& g, int v, const std::vector<int>& lengths) {
  for (int depth = 0; depth < 16 && v >= 0; ++depth) {
    if (std::find(lengths.begin(), lengths.end(), v) != lengths.end()) return true;
    const int p = g.values[v].producer;
    if (p < 0) return false;
    const Node& n = g.nodes[p];
    static const char* kPass[] = {"Cast", "Gather", "Squeeze", "Unsqueeze", "Identity", "Reshape", "Slice"};
    if (!n.domain.empty() || n.inputs.empty() ||
        std::none_of(std::begin(kPass), std::end(kPass), [&](const char* op) { return n.op_type == op; }))
      return false;
    v = n.inputs[0];
  }
  return false;
}

// Range(start, end, delta) with start from a past's length -> Range(0, end - start, delta) +
// index: the same positions from the index on, in a tensor whose length the plan knows (its
// bounds come from shapes alone), so that the step stays capturable.
int rewrite_position_ranges(Graph& g, const std::vector<int>& lengths, int index) {
  int rewritten = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (g.nodes[k].op_type != "Range" || !g.nodes[k].domain.empty() || g.nodes[k].inputs.size() != 3 ||
        !from_past_length(g, g.nodes[k].inputs[0], lengths))
      continue;
    const Node like = g.nodes[k];
    const std::string base = cat(like.name.empty() ? "positions" : like.name, "/onyx_index");
    const int zero = g.value_id(base + "/zero"), count = g.value_id(base + "/count"),
              start = g.value_id(base + "/start"), from_zero = g.value_id(base + "/from_zero");
    std::vector<Node> before;
    before.push_back(plain_node(like, base + "/Zero", "Sub", {like.inputs[0], like.inputs[0]}, zero));
    before.push_back(plain_node(like, base + "/Count", "Sub", {like.inputs[1], like.inputs[0]}, count));
    Node cast = plain_node(like, base + "/CastLike", "CastLike", {index, like.inputs[0]}, start);
    cast.opset = std::max(like.opset, 15);
    before.push_back(std::move(cast));
    const Node after = plain_node(like, base + "/Add", "Add", {from_zero, start}, like.outputs[0]);
    g.nodes[k].inputs[0] = zero;
    g.nodes[k].inputs[1] = count;
    g.nodes[k].outputs[0] = from_zero;
    g.nodes.insert(g.nodes.begin() + static_cast<long>(k) + 1, after);
    g.nodes.insert(g.nodes.begin() + static_cast<long>(k), before.begin(), before.end());
    k += before.size() + 1;
    ++rewritten;
  }
  set_producers(g);
  return rewritten;
}

}  // namespace

CacheRewrite rewrite_concat_cache(Graph& g, const std::vector<std::pair<std::string, std::string>>& pairs,
                                  const std::string& ids_input, const std::string& index_name,
                                  bool positions_from_past) {
  CacheRewrite r;
  const int ids = g.find_value(ids_input);
  if (ids < 0 || !g.values[ids].is_input) {
    r.why_not = cat("'", ids_input, "' is not an input of the decoder");
    return r;
  }
  std::vector<int> nodes, pasts;
  std::map<int, int> fused;  // RotaryCache nodes (passes/fuse_rotary_cache.h) -> their presents among the pairs
  for (const auto& [past_name, present_name] : pairs) {
    const int past = g.find_value(past_name), present = g.find_value(present_name);
    if (past < 0 || !g.values[past].is_input) {
      r.why_not = cat("'", past_name, "' is not an input of the decoder");
      return r;
    }
    const int producer = present >= 0 ? g.values[present].producer : -1;
    if (producer < 0) {
      r.why_not = cat("'", present_name, "' is not computed by a node of the decoder's main graph");
      return r;
    }
    const Node& n = g.nodes[producer];
    if (n.op_type == "RotaryCache" && n.domain == "onyx" && n.inputs.size() == 7 && n.outputs.size() >= 3 &&
        ((n.outputs[1] == present && n.inputs[5] == past) || (n.outputs[2] == present && n.inputs[6] == past))) {
      ++fused[producer];
      pasts.push_back(past);
      continue;
    }
    const int64_t axis = concat_axis(n);
    if (n.op_type != "Concat" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[0] != past ||
        (axis != 2 && axis != -2)) {
      r.why_not = cat("'", present_name, "' is made by ", n.describe(),
                      ", not by a Concat of '", past_name, "' and the new entries along axis 2");
      return r;
    }
    nodes.push_back(producer);
    pasts.push_back(past);
  }
  // A RotaryCache writes two caches by one index: both must be rewritten, or neither.
  for (const auto& [id, presents] : fused)
    if (presents != 2) {
      r.why_not = cat(g.nodes[id].describe(), " writes a key and a value cache, and only one of them is among the pairs");
      return r;
    }
  const int index = g.value_id(index_name);
  Value& v = g.values[index];
  ONYX_CHECK(!v.is_input && v.producer < 0 && !v.is_initializer, "the decoder already has a value named '",
             index_name, "'");
  v.is_input = true;
  v.declared.category = TypeInfo::Category::kTensor;
  v.declared.dtype = DType::kInt64;
  v.declared.rank_known = false;  // a scalar (one position for every row) or [batch] (one per row)
  g.inputs.push_back(index);
  for (int id : nodes) {
    Node& n = g.nodes[id];
    n.op_type = "CacheUpdate";
    n.domain = "onyx.genai";
    n.opset = 1;
    n.inputs.push_back(index);
    Attribute axis;
    axis.name = "axis";
    axis.kind = Attribute::Kind::kInt;
    axis.i = 2;
    n.attributes = {axis};
    n.def = nullptr;
  }
  // A RotaryCache given the index writes its new entries in place (ops/rotary_cache.cpp).
  for (const auto& [id, presents] : fused) {
    g.nodes[id].inputs.push_back(index);
    g.nodes[id].def = nullptr;
  }
  const std::vector<int> lengths = rewrite_past_shapes(g, pasts, ids);
  if (positions_from_past) r.position_ranges = rewrite_position_ranges(g, lengths, index);
  r.applied = true;
  r.index_input = index_name;
  return r;
}

}  // namespace onyx
