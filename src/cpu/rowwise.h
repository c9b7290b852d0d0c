// Vectorized float32 kernels over rows of a matrix (the last axis): softmax, layer and RMS
// normalization; and the range and uint8 quantization of DynamicQuantizeLinear. Rows are split over the intra-op pool. Each has a reference in double in the
// op family that uses it (ops/softmax.cpp, ops/normalization.cpp), which the tests compare with.
#pragma once

#include <cstdint>

namespace onyx::cpu {

// y[r, :] = softmax(x[r, :]) (or log-softmax), rows of n contiguous floats; y may be x.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, bool log);

struct NormRows {
  const float* x = nullptr;
  const float* skip = nullptr;   // added to x first (rows x n), or null
  const float* bias = nullptr;   // added to x first (n), or null
  float* sum = nullptr;          // x + skip + bias written here when given
  const float* scale = nullptr;  // n
  const float* shift = nullptr;  // n, or null (the "bias" of LayerNormalization)
  float* y = nullptr;
  float* mean = nullptr;         // per row, or null
  float* inv_std = nullptr;      // per row, or null
  int64_t rows = 0, n = 0;
  float epsilon = 1e-5f;
  bool center = true;            // false: RMS normalization (no mean removed)
};

// y = (x' - mean) * inv_std * scale + shift per row, x' = x + skip + bias.
void norm_rows(const NormRows& a);

// lo = min(0, x...) and hi = max(0, x...), NaN skipped: the range of DynamicQuantizeLinear.
void range_with_zero(const float* x, int64_t n, float* lo, float* hi);

// e[i] = exp(double(z[i]) - m) where z[i] >= tau, else 0 (and 0 below e^-708, where a weight is
// nothing next to the largest one's): the sampler's token weights (ops/sampling.cpp), within
// an ulp or two of std::exp.
void exp_weights(const float* z, int64_t n, float m, float tau, double* e);

// y[i] = rint(x[i] / scale) + zero_point, clamped to [lo, hi], as int8 (is_signed) or uint8; the
// quotient in float, ties to even; NaN gives the zero point (clamped). QuantizeLinear's and
// DynamicQuantizeLinear's 8-bit quantization (ops/quantize.h has the scalar definition).
void quantize_8bit(const float* x, int64_t n, float scale, float zero_point, float lo, float hi, bool is_signed,
                   void* y);

// y[i] = rint(acc[i] * mult[i]) + zero_point, clamped to [lo, hi], as int8 or uint8, the product
// in double: the requantization of QLinearMatMul's int32 sums.
void requantize_8bit(const int32_t* acc, const double* mult, int64_t n, double zero_point, double lo, double hi,
                     bool is_signed, void* y);

}  // namespace onyx::cpu
