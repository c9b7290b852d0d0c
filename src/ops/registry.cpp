#include "ops/registry.h"

#include <algorithm>

namespace onyx {

void OpRegistry::add(OpDef def) {
  ONYX_ASSERT(def.infer, "op ", def.name, " has no inference function");
  auto& list = defs_[{normalize_domain(def.domain), def.name}];
  for (const auto& d : list) ONYX_ASSERT(d.since_version != def.since_version, "op ", def.name, " registered twice");
  list.push_back(std::move(def));
  std::sort(list.begin(), list.end(), [](const OpDef& a, const OpDef& b) { return a.since_version < b.since_version; });
}

const OpDef* OpRegistry::find(const std::string& domain, const std::string& name, int opset) const {
  auto it = defs_.find({normalize_domain(domain), name});
  if (it == defs_.end()) return nullptr;
  const OpDef* best = nullptr;
  for (const auto& d : it->second)
    if (d.since_version <= opset) best = &d;
  return best;
}

std::vector<const OpDef*> OpRegistry::versions(const std::string& domain, const std::string& name) const {
  std::vector<const OpDef*> out;
  auto it = defs_.find({normalize_domain(domain), name});
  if (it != defs_.end())
    for (const auto& d : it->second) out.push_back(&d);
  return out;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [key, list] : defs_) names.push_back(key.first.empty() ? key.second : key.first + "::" + key.second);
  return names;
}

const OpRegistry& OpRegistry::global() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_unary_ops(r);
    register_tensor_ops(r);
    register_layout_ops(r);
    register_slice_pad_ops(r);
    register_reduce_ops(r);
    register_nn_ops(r);
    register_control_flow_ops(r);
    register_cast_ops(r);
    register_gather_scatter_ops(r);
    register_normalization_ops(r);
    register_attention_ops(r);
    register_loss_ops(r);
    register_conv_pool_ops(r);
    register_resize_ops(r);
    register_test_ops(r);
    return r;
  }();
  return registry;
}

void resolve_op(Node& node, const OpRegistry& registry) {
  node.def = registry.find(node.domain, node.op_type, node.opset);
  if (node.def) return;
  std::string domain = node.domain.empty() ? "ai.onnx" : node.domain;
  auto versions = registry.versions(node.domain, node.op_type);
  if (versions.empty())
    throw Error(cat(node.describe(), ": operator '", node.op_type, "' of domain '", domain, "' (opset ", node.opset,
                    ") is not supported by onyx"));
  throw Error(cat(node.describe(), ": operator '", node.op_type, "' of domain '", domain, "' is supported from opset ",
                  versions.front()->since_version, ", but the model uses opset ", node.opset));
}

}  // namespace onyx
