// Direct float32 convolution kernels for the cases a matrix product serves badly: a depthwise
// 2-D convolution (one input channel per output channel: MobileNet's 3x3 and 5x5 layers), which
// through im2col would be one single-row product per channel.
#pragma once

#include <cstdint>

#include "cpu/activation.h"

namespace onyx::cpu {

struct DepthwiseConv2d {
  const float* x = nullptr;     // [channels, ih, iw] (one image)
  const float* w = nullptr;     // [channels, kh, kw]
  const float* bias = nullptr;  // [channels], or null
  float* y = nullptr;           // [channels, oh, ow]
  int64_t channels = 0, ih = 0, iw = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;  // pads: the leading ones, >= 0
  Activation act;
  // Which kernel: chosen by the geometry (kAuto), or one of the two (tests).
  enum class Path : uint8_t { kAuto, kFlat, kBlocked } path = Path::kAuto;
};

// y = act(depthwise conv(x, w) + bias), split over the intra-op pool. Two kernels: the flat one
// (zero-padded planes per channel, runs of flat positions a vector at a time) and the blocked one
// (a vector of channels per pixel: kL channels' rows transposed into pixel-major tiles, each tap
// one load and one multiply-add, the outputs transposed back).
void depthwise_conv2d(const DepthwiseConv2d& a);

// A max pool's row steps: src[0, n) split into its even columns (even[q / 2] = src[q]) and odd
// ones; best[j] = v[j] where v[j] > best[j] or v[j] is NaN (a NaN wins a max window), j < n.
void split_row2(const float* src, int64_t n, float* even, float* odd);
void max_nan_into(float* best, const float* v, int64_t n);
// dst[j] = taps[0][j], then max_nan_into'd with taps[1][j], ... taps[count - 1][j], for j < n (dst
// may be none of the taps).
void max_nan_taps(const float* const* taps, int64_t count, int64_t n, float* dst);

}  // namespace onyx::cpu
