// Linear quantization as ONNX defines it, shared by QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear and the quantized matrix products: q = saturate(rint(x / scale) + zp),
// x = (q - zp) * scale, with rint rounding half to even.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "onyx/dtype.h"
#include "onyx/shape.h"
#include "onyx/tensor.h"

namespace onyx {

// The values an integer quantized type holds.
struct QuantRange {
  int64_t lo = 0, hi = 0;
};

// int8, uint8, int16 and uint16 (what QuantizeLinear produces); throws naming `what` otherwise.
QuantRange quant_range(DType t, std::string_view what);

// rint(scaled) + zero_point, saturated to r. NaN has no quantized value: it maps to the
// zero point (it dequantizes to 0), where numpy's cast would give an arbitrary integer.
inline int64_t quantize_scaled(double scaled, int64_t zero_point, QuantRange r) {
  if (std::isnan(scaled)) return std::clamp(zero_point, r.lo, r.hi);
  // rint without a library call: below 2^51, adding and subtracting 1.5 * 2^52 rounds half to
  // even; beyond, every quantized type has saturated anyway.
  const double c = std::clamp(scaled, -2251799813685248.0, 2251799813685248.0);
  const double q = ((c + 6755399441055744.0) - 6755399441055744.0) + static_cast<double>(zero_point);
  if (q <= static_cast<double>(r.lo)) return r.lo;
  if (q >= static_cast<double>(r.hi)) return r.hi;
  return static_cast<int64_t>(q);
}

// Which element of the scale (and zero point) applies to each element of x: one for the
// whole tensor, one per index along `axis`, or one per block of `block` indices along it.
// x is seen as [outer, axis_dim, inner]; the scale as [outer, groups, inner] when blocked.
struct QuantGranularity {
  enum class Kind { kPerTensor, kPerAxis, kBlocked } kind = Kind::kPerTensor;
  int64_t outer = 1, axis_dim = 1, inner = 1, block = 0;

  // Calls fn(i, p) for each element i of x (in order) with its scale index p.
  template <class Fn>
  void for_each(Fn&& fn) const {
    if (kind == Kind::kPerTensor) {
      const int64_t n = outer * axis_dim * inner;
      for (int64_t i = 0; i < n; ++i) fn(i, int64_t{0});
      return;
    }
    const int64_t groups = kind == Kind::kBlocked ? (axis_dim + block - 1) / block : axis_dim;
    int64_t i = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t a = 0; a < axis_dim; ++a) {
        if (kind == Kind::kPerAxis) {
          for (int64_t n = 0; n < inner; ++n) fn(i++, a);
        } else {
          const int64_t base = (o * groups + a / block) * inner;
          for (int64_t n = 0; n < inner; ++n) fn(i++, base + n);
        }
      }
  }
};

// The granularity that a scale of shape `scale` gives x of shape `x` (per-tensor when it has
// one element and no block size, per-axis for a 1-D scale, blocked when block_size > 0);
// throws naming what does not fit. `allow_axis`/`allow_blocks` are false at opsets that lack them.
QuantGranularity quant_granularity(const Shape& x, const Shape& scale, int64_t axis, int64_t block_size,
                                   bool allow_axis, bool allow_blocks);

// v rounded to the floating type t (float32, float16, bfloat16; other types leave it as is):
// arithmetic done "in" a scale's type, as numpy does it.
double round_to_dtype(DType t, double v);

// The scale input's values widened to double, and the zero point's (0s when absent; it must
// have the scale's shape).
std::vector<double> scale_values(const Tensor& scale, std::string_view what);
std::vector<int64_t> zero_point_values(const Tensor* zero_point, const Tensor& scale, std::string_view what);

// The int32 products of two int8/uint8 tensors under numpy's matmul rules, (A - za)(B - zb) with
// za per row and zb per column, written `into` the caller's buffer or returned. The reference is a
// plain loop; large products go through the float matrix-product kernel in slices of K short
// enough that float holds every partial sum exactly (ops/quant_matmul.cpp), which tests/unit
// checks against the reference.
struct MatmulPlan;
// How integer_products computes: kAuto picks the reference loop for small products, the 8-bit
// dot-product kernel (cpu/int8_gemm.h) where the CPU has it, else the float kernel in exact slices.
enum class IntegerProducts { kAuto, kReference, kFloat, kInt8Dot };
std::vector<int32_t> integer_products(const Tensor& a, const Tensor& b, const MatmulPlan& p,
                                      const std::vector<int32_t>& za, const std::vector<int32_t>& zb,
                                      int32_t* into = nullptr, IntegerProducts how = IntegerProducts::kAuto);

// DynamicQuantizeLinear's per-tensor uint8 parameters for x: the range [min(x, 0), max(x, 0)]
// spread over 0..255, and the zero point that puts 0 on an integer.
struct DynamicQuantParams {
  float scale = 1.f;
  uint8_t zero_point = 0;
};
DynamicQuantParams dynamic_quant_params(const float* x, int64_t n);
void dynamic_quantize(const float* x, int64_t n, const DynamicQuantParams& p, uint8_t* y);

}  // namespace onyx
