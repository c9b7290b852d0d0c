// QDQ models (onnxruntime's quantize_static with QuantFormat.QDQ, and most exported quantized
// models) mark each quantized product by dequantizing its integer inputs, computing in float
// and quantizing the result:
//
//   QuantizeLinear(MatMul(DequantizeLinear(a), DequantizeLinear(b)), y_scale, y_zero_point)
//   -> QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
//
//   QuantizeLinear(Conv(DequantizeLinear(x), DequantizeLinear(w)[, DequantizeLinear(bias)]), ..)
//   -> QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp[, bias])
//
// This pass rewrites each such chain into the integer op, so the product runs in int32 on the
// 8-bit values (what the model's quantization means; the float chain would round each sum to
// float32) and the weights stay 8-bit in memory. It runs before constant folding, which would
// otherwise turn each weight's DequantizeLinear into a float copy of it. A chain fuses only in
// the form the integer ops take: 8-bit data, scalar activation scales and zero points, weight
// scales per tensor or per output channel, an int32 bias whose scale is x_scale * w_scale, the
// float value between the ops read by nothing else. A DequantizeLinear read only by the fused
// product goes with it.
#pragma once

#include "model/ir.h"

namespace onyx {

struct QdqFuseReport {
  int matmuls = 0;
  int convs = 0;
};

QdqFuseReport fuse_qdq(Graph& g);

}  // namespace onyx
