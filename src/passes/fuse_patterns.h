// Load-time fusions of the op patterns exporters emit, each replaced by one node that onyx has
// a kernel for on the CPU and on CUDA (fewer launches per decode step, one rounding instead of
// one per op). Each fusion fires only on its exact pattern: the values between its ops read by
// no one else and no graph output, the constants it needs known at load.
//
//   RMSNorm, decomposed (torch.onnx's HF LlamaRMSNorm in float32):
//     Mul(w, Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2), axes=[-1], keepdims=1), eps)))))
//     (also Div(x, Sqrt(..)) and Div(1, Sqrt(..)), either operand order of Mul and Add)
//   -> SimplifiedLayerNormalization(x, w, axis=-1, epsilon=eps)
//
//   Rotary embedding by halves (HF's apply_rotary_pos_emb):
//     Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h, end)), Slice(x, 0, h), axis=-1), sin))
//   -> onyx::RotaryHalf(x, cos, sin, split=h)
//
//   SiLU-gated product (the Llama MLP): Mul(Mul(g, Sigmoid(g)), u) -> onyx::SiluMul(g, u)
//
//   Attention (HF's eager attention, repeat_kv for grouped-query heads):
//     MatMul(Softmax(Add(Mul(MatMul(q, Transpose(rep(k), [0,1,3,2])), c), mask)), rep(v))
//     rep(x) = Reshape(Expand(Unsqueeze(x, [2]), [b, kv, n, t, d]), [b, kv*n, t, d]), or x;
//     the scale Mul(., c) / Div(., c) and the mask Add optional; Casts between floating types
//     before and after the Softmax allowed (softmax in float32); torch's decomposition of
//     scaled_dot_product_attention too: each operand scaled by the root of c, and the weights
//     Where(IsNaN(w), 0, w) (a row whose every key is masked gives zeros, not NaN)
//   -> Attention(q, k, v, mask, scale=c) (ONNX opset 23, 4-D, grouped-query heads): the keys
//      and values are read once per KV head, never repeated nor transposed; from the IsNaN
//      form with onyx_zero_masked_rows=1 (the CPU kernels then set NaN weights to zero; the
//      CUDA kernels give a fully masked row zeros in any case)
//
//   GELU, erf form (torch's nn.GELU / F.gelu at opsets below 20):
//     Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)   (any operand order; Mul(x, 1/sqrt 2) too;
//     the 0.5 may multiply x first)
//   -> com.microsoft Gelu(x)
//   GELU, tanh form (GPT-2's gelu_new, Gemma's gelu_pytorch_tanh):
//     Mul(Mul(0.5, x), Add(1, Tanh(Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3)))))))
//     (x^3 also as Mul(x, Mul(x, x)): TorchScript's gelu(approximate="tanh"))
//   -> com.microsoft FastGelu(x)
//   (before the others, so that fuse_cpu's dense layers take them as their activation)
//
//   First, a Concat of one input is dropped (its readers read the input).
//
//   Then, on the fused graph, the residual add before an RMSNorm:
//     SimplifiedLayerNormalization(Add(a, b), w)
//   -> com.microsoft SkipSimplifiedLayerNormalization(a, b, w) -> (norm, -, -, a + b)
//   and a Shape of a norm's output (or of a Cast's, or another op's that keeps its input's
//   shape) reads that op's input instead (so the norm's output has the products alone as readers)
#pragma once

#include <string>
#include <vector>

#include "model/ir.h"

namespace onyx {

struct FuseOptions {
  // The attention fusion (a Session turns it on by default on every device, generation on CUDA
  // devices only: SessionOptions::fuse_attention).
  bool attention = true;
};

struct FuseReport {
  int rms_norms = 0;
  int rotary_halves = 0;
  int silu_muls = 0;
  int attentions = 0;
  int skip_norms = 0;
  int nodes_removed = 0;
  int shape_reads_moved = 0;  // Shape nodes that read a norm's (or a Cast's) input instead of its output
  int single_concats = 0;     // Concats of one input dropped (their readers read the input)
  int multiplications_by_one = 0;  // Mul(x, 1) and Div(x, 1) dropped (their readers read x)
  int noop_casts = 0;         // Casts to their input's own type dropped (their readers read the input)
  int gelus = 0;              // GELU chains -> com.microsoft Gelu / FastGelu
};

FuseReport fuse_patterns(Graph& g, const FuseOptions& options = {});

}  // namespace onyx
