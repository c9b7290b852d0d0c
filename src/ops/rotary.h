// The geometry of a RotaryEmbedding node (ONNX opset 23 and com.microsoft), checked
// once here and shared by shape inference and every backend's kernel.
#pragma once

#include "ops/dispatch.h"
#include "ops/op.h"

namespace onyx {

struct RotaryGeometry {
  int64_t B = 0, S = 0, H = 0, D = 0;
  int64_t rot = 0, half = 0;  // rotated values per head, and half of them (the cache width)
  bool bhsd = false;          // x is [B, H, S, D]; else [B, S, H, D] or [B, S, H*D]
  bool interleaved = false;
  // Where each token's cache row comes from.
  enum class Rows {
    kPositionIds,     // position_ids [B, S] index a [max_pos, half] cache
    kPositionOffset,  // one position id: an offset added to each sequence position (com.microsoft)
    kPerToken,        // no position ids: the caches are [B or 1, S, half]
  } rows = Rows::kPositionIds;
  int64_t cache_rows = 0;     // rows a position may index
  bool cache_batch1 = false;  // kPerToken with caches of batch 1
};

// ONNX RotaryEmbedding-23: X [B, H, S, D] or [B, S, H*D] (num_heads), caches [max_pos, rot/2]
// with position_ids [B, S], or [B|1, S, rot/2] without.
RotaryGeometry onnx_rotary_geometry(const NodeView& n, const Shape& x, const Shape& cos, const Shape& sin,
                                    const Shape* position_ids);
// com.microsoft RotaryEmbedding: input [B, S, hidden] or [B, S, H, D], position_ids [B, S]
// or [1], caches [max_pos, rot/2].
RotaryGeometry ms_rotary_geometry(const NodeView& n, const Shape& x, const Shape& position_ids, const Shape& cos,
                                  const Shape& sin);

// Rotates x viewed as [B, S, H, D] (element (b,s,h,d) at xoff(b,s,h)+d): the
// first `rot` values of each head, in halves or interleaved pairs, by the
// angle whose cos/sin are cs(b,s,j) for j < rot/2. x and y may be the same buffer
// (each pair is read before it is written). Shared by RotaryEmbedding and the
// attention ops that rotate their queries and keys (GroupQueryAttention).
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
