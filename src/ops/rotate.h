// The rotation of rotary position embeddings on the host, shared by the CPU kernels of
// RotaryEmbedding (attention.cpp) and GroupQueryAttention; the geometry is ops/rotary.h's.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace onyx {

// Rotates x viewed as [B, S, H, D] (element (b,s,h,d) at xoff(b,s,h)+d): the
// first `rot` values of each head, in halves or interleaved pairs, by the
// angle whose cos/sin are cs(b,s,j) for j < rot/2. x and y may be the same buffer
// (each pair is read before it is written). Shared by RotaryEmbedding and the
// attention ops that rotate their queries and keys (GroupQueryAttention). Host code only:
// ops/rotary.h, which the CUDA kernels include, stays free of it.
template <class T, class XOff, class CosSin>
inline void rotate(const T* x, T* y, int64_t B, int64_t S, int64_t H, int64_t D, int64_t rot, bool interleaved,
                   XOff xoff, CosSin cs) {
  const int64_t half = rot / 2;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = xoff(b, s, h);
        for (int64_t j = 0; j < half; ++j) {
          auto [c, sn] = cs(b, s, j);
          int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
          double x1 = static_cast<double>(static_cast<compute_t<T>>(x[o + i1]));
          double x2 = static_cast<double>(static_cast<compute_t<T>>(x[o + i2]));
          y[o + i1] = static_cast<T>(static_cast<compute_t<T>>(c * x1 - sn * x2));
          y[o + i2] = static_cast<T>(static_cast<compute_t<T>>(sn * x1 + c * x2));
        }
        for (int64_t d = rot; d < D; ++d) y[o + d] = x[o + d];
      }
}

}  // namespace onyx
