#include "passes/kv_cache.h"

namespace onyx {

namespace {

int64_t concat_axis(const Node& n) {
  const Attribute* a = n.find_attribute("axis");
  return a && a->kind == Attribute::Kind::kInt ? a->i : 0;
}

}  // namespace

CacheRewrite rewrite_concat_cache(Graph& g, const std::vector<std::pair<std::string, std::string>>& pairs,
                                  const std::string& index_name) {
  CacheRewrite r;
  std::vector<int> nodes;
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
    const int64_t axis = concat_axis(n);
    if (n.op_type != "Concat" || !n.domain.empty() || n.inputs.size() != 2 || n.inputs[0] != past ||
        (axis != 2 && axis != -2)) {
      r.why_not = cat("'", present_name, "' is made by ", n.describe(),
                      ", not by a Concat of '", past_name, "' and the new entries along axis 2");
      return r;
    }
    nodes.push_back(producer);
  }
  const int index = g.value_id(index_name);
  Value& v = g.values[index];
  ONYX_CHECK(!v.is_input && v.producer < 0 && !v.is_initializer, "the decoder already has a value named '",
             index_name, "'");
  v.is_input = true;
  v.declared.category = TypeInfo::Category::kTensor;
  v.declared.dtype = DType::kInt64;
  v.declared.rank_known = true;
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
  r.applied = true;
  r.index_input = index_name;
  return r;
}

}  // namespace onyx
