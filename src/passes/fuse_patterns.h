// Load-time fusions of the op patterns exporters emit, each replaced by one node that onyx has
// a kernel for on the CPU and on CUDA (fewer launches per decode step, one rounding instead of
// one per op). Each fusion fires only on its exact pattern: the values between its ops read by
// no one else and no graph output, the constants it needs known at load.
//
//   RMSNorm, decomposed (torch.onnx's HF LlamaRMSNorm in float32):
//     Mul(w, Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2), axes=[-1], keepdims=1), eps)))))
//     (also Div(x, Sqrt(..)) and Div(1, Sqrt(..)), either operand order of Mul and Add)
//   -> SimplifiedLayerNormalization(x, w, axis=-1, epsilon=eps)
#pragma once

#include <string>
#include <vector>

#include "model/ir.h"

namespace onyx {

struct FuseReport {
  int rms_norms = 0;
  int nodes_removed = 0;
};

FuseReport fuse_patterns(Graph& g);

}  // namespace onyx
