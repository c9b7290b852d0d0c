// Load-time rewrites for CPU sessions, after fuse_patterns (which makes GELU chains one node on
// every device): dense layers and convolutions with what follows them become single nodes whose
// CPU kernels do the whole chain in one pass.
//
//   A dense layer: MatMul(X, W) with W a constant float32 matrix, or Gemm(A, B, C) with B
//   constant (transA = 0; alpha and beta folded into the packed weight and the bias, C a
//   constant row or absent), then optionally Add(., bias) with bias a constant of n values,
//   then optionally Add(., r) with r computed by the graph (a residual), then optionally one
//   activation (Relu,
//   LeakyRelu, Clip with constant bounds, Sigmoid, Tanh, Gelu, FastGelu without bias, ONNX Gelu,
//   HardSigmoid, HardSwish)
//   -> onyx::DenseMatMul(X, W packed, bias, R; activation) (ops/dense.cpp); a weight read by several
//      products is packed once, and the unpacked weight is dropped when nothing else reads it.
//
//   A float32 Conv (constant weights), then optionally Add(., z) with z of the output's shape
//   (ungrouped convolutions: ResNet's residual), then optionally an activation
//   -> onyx::FusedConv(X, W, B, Z; Conv's attributes, plus the activation's) (ops/conv_pool.cpp).
//   Large weights (cpu::conv_panels_pay), when the convolution alone reads them, are packed as
//   the products' right-hand operand (each group's W^T, cpu::pack_b; attribute w_panels = 1),
//   a Conv with nothing to absorb becoming a FusedConv for that alone. A 3 x 3 convolution of
//   stride 1, dilation 1, one group and enough channels (cpu::winograd_tile) has its weights
//   transformed for Winograd's F(2x2, 3x3) or F(4x4, 3x3) instead ([16 or 36, M, C]; attribute
//   w_winograd = the output tile, 2 or 4).
//
//   A product by a transposed operand, scaled or not (attention scores: Whisper's and others'
//   Q (K^T s)): MatMul(A, Transpose(B)) or MatMul(A, Mul(Transpose(B), s)), the transposition
//   swapping the last two axes and keeping the others, s a float32 constant scalar
//   -> com.microsoft FusedMatMul(A, B; transB = 1, alpha = s): B read as stored, no transposed
//      copy (ops/contrib_nn.cpp).
//
// Every rewrite keeps the values between the chain's ops private (one reader, not a graph output).
#pragma once

#include "model/ir.h"

namespace onyx {

struct CpuFuseReport {
  int dense = 0;
  int biases = 0;        // bias Adds absorbed into dense nodes
  int residuals = 0;     // residual Adds absorbed into dense nodes
  int activations = 0;   // activations absorbed into dense nodes
  int conv_activations = 0;  // activations absorbed into onyx::FusedConv
  int conv_residuals = 0;    // residual Adds absorbed into onyx::FusedConv
  int conv_panels = 0;       // onyx::FusedConv weights kept as the products' packed operand (w_panels)
  int conv_winograd = 0;     // onyx::FusedConv weights transformed for Winograd (w_winograd)
  int transposed_products = 0;  // MatMul(A, [Mul(] Transpose(B) [, s)]) -> FusedMatMul(transB, alpha)
  int nodes_removed = 0;
};

CpuFuseReport fuse_cpu(Graph& g);

}  // namespace onyx
