// What the RotaryCache kernels (rotary_cache.cu) share with the fused rotary-attention kernel
// (attention.cu, onyx::RotaryCacheAttention): the rows' geometry, its checks, and the launch.
#pragma once

#include <cstdint>
#include <optional>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// The rows of q or k (row r = (b * H + h) * S + s) and where their cos/sin rows start:
// b * cb + h * ch + s * cs (0 where cos broadcasts).
struct RopeRows {
  int64_t H = 1, S = 1, cb = 0, ch = 0, cs = 0;
};

// A present: rows of (batch, head) pairs, each `out_len` positions; `written` of them per pair
// are written (all, or the new ones when the present is its cache bound in place).
struct CacheRows {
  int64_t H = 1;        // heads
  int64_t S = 0;        // new positions
  int64_t past = 0;     // the past's positions (Concat) or the cache's capacity (indexed)
  int64_t out_len = 0;  // present's positions
  int64_t written = 0;  // rows written per (batch, head)
  int aliased = 0;      // present is the past (indexed, in place)
};

// cos/sin's strides onto x [B, H, S, D] (the tables broadcast onto x, ending in its D); throws
// naming `what` where they do not.
RopeRows rope_rows(const Shape& x, const Shape& tab, const char* what);

// A present's rows from its past, the new entries and the present; throws where they do not fit.
CacheRows cache_rows(const Shape& past, const Shape& fresh, const Shape& present, bool indexed, bool aliased,
                     const char* what);

// onyx::RotaryCache's tensors: inputs q, k, v, cos, sin, past_k, past_v[, index], outputs q_rot,
// present_k, present_v[, k_rot] (index and k_rot null where absent).
struct RotaryCacheTensors {
  const Tensor *q = nullptr, *k = nullptr, *v = nullptr, *cos = nullptr, *sin = nullptr;
  const Tensor *past_k = nullptr, *past_v = nullptr, *index = nullptr;
  Tensor *q_rot = nullptr, *present_k = nullptr, *present_v = nullptr, *k_rot = nullptr;
};

// RotaryCache's kernel over those tensors; `split`: the op's attribute (D / 2 where absent).
void rotary_cache(const RotaryCacheTensors& t, std::optional<int64_t> split, CudaContext& cu);

// onyx::RotaryCache's kernel.
void run_rotary_cache(KernelContext& ctx, CudaContext& cu);

}  // namespace onyx::cuda
