// The operator registry: each op family registers its ops here, once.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ops/op.h"

namespace onyx {

class OpRegistry {
 public:
  void add(OpDef def);
  // The definition that applies at `opset` (the newest since_version <= opset), or null.
  const OpDef* find(const std::string& domain, const std::string& name, int opset) const;
  // Every registered version of (domain, name), oldest first; empty when unknown.
  std::vector<const OpDef*> versions(const std::string& domain, const std::string& name) const;
  size_t size() const { return defs_.size(); }
  std::vector<std::string> op_names() const;  // "domain::name" or "name"

  // The registry with every op family of onyx registered.
  static const OpRegistry& global();

 private:
  std::map<std::pair<std::string, std::string>, std::vector<OpDef>> defs_;
};

// Resolves node.def against the registry; throws naming the node, op, domain and opset.
void resolve_op(Node& node, const OpRegistry& registry);

// Family registration functions, one per file in src/ops/.
void register_elementwise_ops(OpRegistry& r);
void register_unary_ops(OpRegistry& r);
void register_tensor_ops(OpRegistry& r);
void register_layout_ops(OpRegistry& r);     // layout_ops.cpp
void register_slice_pad_ops(OpRegistry& r);  // slice_pad.cpp
void register_reduce_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_control_flow_ops(OpRegistry& r);
void register_cast_ops(OpRegistry& r);
void register_gather_scatter_ops(OpRegistry& r);
void register_normalization_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
void register_loss_ops(OpRegistry& r);
void register_conv_pool_ops(OpRegistry& r);
void register_resize_ops(OpRegistry& r);
void register_test_ops(OpRegistry& r);  // onyx.test diagnostic ops

}  // namespace onyx
