// The operator registry: each op family registers its ops here, once.
#pragma once

#include <string>
#include <vector>

#include "ops/op.h"
#include "ops/op_table.h"

namespace onyx {

class OpRegistry {
 public:
  void add(OpDef def);
  // The definition that applies at `opset` (the newest since_version <= opset), or null.
  const OpDef* find(const std::string& domain, const std::string& name, int opset) const {
    return table_.find(domain, name, opset);
  }
  // Every registered version of (domain, name), oldest first; empty when unknown.
  std::vector<const OpDef*> versions(const std::string& domain, const std::string& name) const {
    return table_.versions(domain, name);
  }
  size_t size() const { return table_.size(); }
  std::vector<std::string> op_names() const { return table_.names(); }

  // The registry with every op family of onyx registered, and the custom ops added.
  static const OpRegistry& global();
  // Adds an op of the caller's own (a custom op; test code's diagnostic ops) to the
  // global registry. Call it before any session is made (at static initialization).
  static void add_custom(OpDef def);

 private:
  static OpRegistry& global_mutable();
  OpTable<OpDef> table_;
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
void register_matmul_ops(OpRegistry& r);   // matmul.cpp: MatMul, Gemm
void register_softmax_ops(OpRegistry& r);  // softmax.cpp
void register_linalg_ops(OpRegistry& r);   // linalg.cpp: Det, Einsum
void register_control_flow_ops(OpRegistry& r);
void register_cast_ops(OpRegistry& r);
void register_quantize_ops(OpRegistry& r);  // quantize.cpp: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear
void register_quant_matmul_ops(
    OpRegistry& r);  // quant_matmul.cpp: MatMulInteger, QLinearMatMul, com.microsoft's integer MatMuls
void register_gather_scatter_ops(OpRegistry& r);
void register_sort_ops(OpRegistry& r);  // sort_ops.cpp: TopK, Unique
void register_normalization_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
void register_group_query_attention_ops(OpRegistry& r);   // group_query_attention.cpp (com.microsoft)
void register_multi_head_attention_ops(OpRegistry& r);    // multi_head_attention.cpp (com.microsoft)
void register_matmul_nbits_ops(OpRegistry& r);            // matmul_nbits.cpp (com.microsoft)
void register_gather_block_quantized_ops(OpRegistry& r);  // gather_block_quantized.cpp (com.microsoft)
void register_loss_ops(OpRegistry& r);
void register_conv_pool_ops(OpRegistry& r);
void register_resize_ops(OpRegistry& r);
void register_genai_ops(OpRegistry& r);  // genai_ops.cpp, sampling.cpp: onyx.genai CacheUpdate, Sample
void register_fused_ops(OpRegistry& r);  // fused_ops.cpp: onyx RotaryHalf, SiluMul (made by passes/fuse_patterns); RotaryCache (rotary_cache.cpp)
void register_linear_ops(OpRegistry& r);  // linear_ops.cpp: onyx Linear, SiluGateLinear (made by passes/fuse_linear)
void register_sequence_ops(OpRegistry& r);  // sequence_ops.cpp: sequences and optionals
void register_state_space_ops(OpRegistry& r);  // state_space.cpp: CausalConvWithState, LinearAttention
void register_detection_ops(OpRegistry& r);  // detection.cpp: NonMaxSuppression, RoiAlign
void register_string_ops(OpRegistry& r);  // string_ops.cpp: StringConcat, StringSplit, StringNormalizer, RegexFullMatch
void register_rnn_ops(OpRegistry& r);  // rnn.cpp: RNN, GRU, LSTM
void register_signal_ops(OpRegistry& r);  // signal.cpp: DFT, STFT, windows, MelWeightMatrix
void register_ml_ops(OpRegistry& r);  // ml_ops.cpp: TfIdfVectorizer and ai.onnx.ml ops
void register_flex_attention_ops(OpRegistry& r);  // flex_attention.cpp: ai.onnx.preview FlexAttention
void register_random_ops(OpRegistry& r);  // random_ops.cpp: RandomUniform/Normal(Like), Bernoulli
void register_image_ops(OpRegistry& r);  // image_decoder.cpp: ImageDecoder
void register_contrib_nn_ops(OpRegistry& r);  // contrib_nn.cpp: Gelu family, BiasAdd, FusedMatMul
void register_attention_contrib_ops(OpRegistry& r);  // attention_contrib.cpp: Attention, QAttention, EmbedLayerNormalization
void register_qlinear_ops(OpRegistry& r);  // qlinear_ops.cpp: QGemm and the com.microsoft QLinear* ops

}  // namespace onyx
