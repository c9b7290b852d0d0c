// The geometry of a RotaryEmbedding node (ONNX opset 23 and com.microsoft), checked
// once here and shared by shape inference and every backend's kernel.
#pragma once

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

}  // namespace onyx
