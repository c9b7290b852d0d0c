#include "ops/registry.h"

namespace onyx {

void register_ml_linear_ops(OpRegistry& r);  // ml_linear.cpp: ai.onnx.ml transforms and linear models
void register_ml_tree_ops(OpRegistry& r);    // ml_trees.cpp: TreeEnsembleRegressor, TreeEnsembleClassifier
void register_ml_svm_ops(OpRegistry& r);     // ml_svm.cpp: SVMRegressor, SVMClassifier
void register_ml_map_ops(OpRegistry& r);     // ml_maps.cpp: ZipMap, DictVectorizer, CastMap
void register_quant_contrib_ops(OpRegistry& r);  // quant_contrib.cpp: QEmbedLayerNormalization, DynamicQuantizeLSTM
void register_fused_conv_gemm_ops(OpRegistry& r);  // fused_conv_gemm.cpp: com.microsoft FusedConv, FusedGemm
void register_collective_ops(OpRegistry& r);     // collective_ops.cpp: onyx AllReduce, AllGather (tensor parallelism)
void register_training_ops(OpRegistry& r);   // training_ops.cpp: Adagrad, Adam, Momentum; Gradient's helpers

void OpRegistry::add(OpDef def) {
  ONYX_ASSERT(def.infer, "op ", def.name, " has no inference function");
  const std::string name = def.name;
  ONYX_ASSERT(table_.add(std::move(def)), "op ", name, " registered twice");
}

OpRegistry& OpRegistry::global_mutable() {
  static OpRegistry registry = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_unary_ops(r);
    register_tensor_ops(r);
    register_layout_ops(r);
    register_slice_pad_ops(r);
    register_reduce_ops(r);
    register_matmul_ops(r);
    register_softmax_ops(r);
    register_linalg_ops(r);
    register_control_flow_ops(r);
    register_cast_ops(r);
    register_quantize_ops(r);
    register_quant_matmul_ops(r);
    register_gather_scatter_ops(r);
    register_sort_ops(r);
    register_normalization_ops(r);
    register_attention_ops(r);
    register_group_query_attention_ops(r);
    register_multi_head_attention_ops(r);
    register_matmul_nbits_ops(r);
    register_gather_block_quantized_ops(r);
    register_loss_ops(r);
    register_conv_pool_ops(r);
    register_resize_ops(r);
    register_genai_ops(r);
    register_fused_ops(r);
    register_linear_ops(r);
    register_sequence_ops(r);
    register_state_space_ops(r);
    register_detection_ops(r);
    register_string_ops(r);
    register_rnn_ops(r);
    register_signal_ops(r);
    register_ml_ops(r);
    register_flex_attention_ops(r);
    register_random_ops(r);
    register_image_ops(r);
    register_contrib_nn_ops(r);
    register_attention_contrib_ops(r);
    register_qlinear_ops(r);
    register_ml_linear_ops(r);
    register_ml_tree_ops(r);
    register_ml_svm_ops(r);
    register_ml_map_ops(r);
    register_training_ops(r);
    register_quant_contrib_ops(r);
    register_fused_conv_gemm_ops(r);
    register_collective_ops(r);
    return r;
  }();
  return registry;
}

const OpRegistry& OpRegistry::global() { return global_mutable(); }

void OpRegistry::add_custom(OpDef def) { global_mutable().add(std::move(def)); }

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
