// Load-time rewrites of the products with constant weights into onyx::Linear and
// onyx::SiluGateLinear (ops/linear_ops.cpp), whose weights are stored output-major [N, K]:
// the layout a one-row product (a decode step) streams at full width, and the one
// cuBLASLt takes as a transposed operand for many rows.
//
//   linear_from_matmul: MatMul(x, B) with B a 2-D constant [K, N] -> Linear(x, B^T), the
//     weight transposed once here; MatMul(x, Transpose(W)) with W a 2-D constant (the tied LM
//     head) -> Linear(x, W), W read as it is stored (no copy).
//   split_sliced_linears, on the graph after folding: a Linear whose output every reader cuts
//     along its last axis at constant bounds (Slices, a Split: Phi-3's fused q/k/v and gate/up
//     products as torch.onnx exports them), the cuts not overlapping -> one Linear per cut over
//     those rows of the weight, so that group_linears sees the products it fuses (the gate and up
//     of a SiluMul, the Q, K and V reading one x) and columns no reader takes are not computed.
//   group_linears, on the graph after fuse_patterns:
//     SiluMul(Linear(x, Wg), Linear(x, Wu)) -> SiluGateLinear(x, [Wg; Wu]) (the MLP's gate
//     and up projections: one read of x, one stream of weights, the gating in the epilogue), and
//     Gemma's Mul(Gelu(Linear(x, Wg)), Linear(x, Wu)) (com.microsoft FastGelu or Gelu, ai.onnx
//     Gelu) -> SiluGateLinear(x, [Wg; Wu]; activation = gelu_tanh or gelu);
//     then every set of Linears reading the same x (a layer's Q, K and V projections) ->
//     one Linear over the stacked weights, its outputs cut by `splits`.
//   norm_into_linear, after group_linears: the RMS norm before a product,
//     Linear|SiluGateLinear(SimplifiedLayerNormalization(x, gamma)) or
//     Linear|SiluGateLinear(SkipSimplifiedLayerNormalization(x, skip, gamma)) with the norm read
//     by that product alone -> onyx::RmsNormLinear(x, skip, gamma, w) -> (sum, y...), at the
//     norm's place: the rows are normalized where they are multiplied.
//   biases_into_linear, last: the bias added to a product's outputs (Qwen2's q, k and v
//     projections), Add(y_i, c_i) with c_i a constant [N_i] of the weight's dtype and y_i read by
//     that Add alone -> the product's bias input (ops/linear_ops.cpp: added before the one
//     rounding), zeros for the outputs without one; Linear and RmsNormLinear that are not gated.
//
//   group_nbits: the 4-bit products of onnxruntime's quantizers and the builder,
//     com.microsoft MatMulNBits nodes (no bias) reading the same A with constant weights of one
//     layout (K, bits, block size, accuracy level, zero points or none): first
//     SiluMul(MatMulNBits(x, Bg), MatMulNBits(x, Bu)) -> onyx::LinearNBits(x, [Bg; Bu];
//     gated = 1) (the MLP's gate and up, the gating in the product's epilogue), then the
//     other sets -> onyx::LinearNBits(x, [B_0; ...]; splits) (a layer's Q, K and V), the
//     weights, scales and zero points stacked by output feature (ops/matmul_nbits.cpp): one
//     stream of weights, one launch, no Split after it. norm_into_linear, run again after it,
//     takes the norm before a LinearNBits into onyx::RmsNormLinearNBits(x, skip, gamma, B,
//     scales, zero_points) -> (sum, y...) as it does for Linear.
//
// Both keep the values the rest of the graph reads; the weights they replace are dropped when
// nothing else reads them.
#pragma once

#include <cstddef>

#include "model/ir.h"

namespace onyx {

struct LinearReport {
  int linears = 0;          // MatMuls made Linear
  int transposed = 0;       // of them, weights transposed at load (the rest read W as stored)
  int gated = 0;            // SiluGateLinear nodes made (SiLU or GELU gates)
  int groups = 0;           // Linear nodes made from several
  int grouped = 0;          // Linear nodes those replaced
  int normed = 0;           // RmsNormLinear nodes made
  int sliced = 0;           // Linears split into one per cut of their output
  int biased = 0;           // Linear / RmsNormLinear nodes given the bias Adds after them
  size_t weight_bytes = 0;  // bytes of the weights made (transposed or stacked)
};

LinearReport linear_from_matmul(Graph& g);
LinearReport split_sliced_linears(Graph& g);
LinearReport group_linears(Graph& g);
LinearReport norm_into_linear(Graph& g);
LinearReport biases_into_linear(Graph& g);
// Returns the LinearNBits nodes made (`groups`) and the products they replaced (`grouped`).
LinearReport group_nbits(Graph& g);

}  // namespace onyx
