// The float32 Attention kernel for the case the load-time fusion produces (passes/fuse_patterns.h:
// HF eager attention -> one Attention node): 4-D Q [B, Hq, S, D], K [B, Hkv, T, D],
// V [B, Hkv, T, Dv], grouped-query heads, an optional additive (or boolean) mask broadcast onto
// [B, Hq, S, T], optional causality, an optional softcap; no past inputs, no present or QK
// outputs. Per (batch, query head), on the intra-op pool: scores = Q K^T (matrix products of
// cpu/gemm.h: a one-row query is dot products with K's rows), scale, soft cap (Gemma 2:
// softcap * tanh(score / softcap)) and mask, softmax by rows, then P V.
// ops/attention.cpp's loops are its specification (and run every other case).
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/rowwise.h"
#include "cpu/thread_pool.h"
#include "ops/common.h"

namespace onyx {

bool attention_float_fast(KernelContext& ctx) {
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  if (q.dtype() != DType::kFloat32 || k.dtype() != DType::kFloat32 || v.dtype() != DType::kFloat32) return false;
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) return false;
  for (size_t i = 4; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) return false;  // past key/value, nonpad lengths
  for (size_t o = 1; o < ctx.num_outputs(); ++o)
    if (ctx.has_output(o)) return false;  // present key/value, QK
  if (ctx.attr_int("qk_matmul_output_mode", 0) != 0) return false;
  const float softcap = ctx.attr_float("softcap", 0.f);
  if (!(softcap >= 0.f)) return false;  // the reference kernel names it
  const int64_t B = q.shape()[0], Hq = q.shape()[1], S = q.shape()[2], D = q.shape()[3];
  const int64_t Hkv = k.shape()[1], T = k.shape()[2], Dv = v.shape()[3];
  if (k.shape()[0] != B || v.shape()[0] != B || k.shape()[3] != D || v.shape()[1] != Hkv || v.shape()[2] != T ||
      Hkv <= 0 || Hq % Hkv != 0)
    return false;  // the reference kernel names what is wrong
  const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  std::array<int64_t, 4> mstride{0, 0, 0, 0};
  if (mask) {
    const Shape& ms = mask->shape();
    if ((mask->dtype() != DType::kFloat32 && mask->dtype() != DType::kBool) || ms.rank() < 1 || ms.rank() > 4 ||
        ms[ms.rank() - 1] != T)
      return false;
    const std::array<int64_t, 4> full{B, Hq, S, T};
    int64_t acc = 1;
    for (size_t i = 0; i < ms.rank(); ++i) {
      const size_t ax = 4 - ms.rank() + (ms.rank() - 1 - i);
      const int64_t dim = ms[ms.rank() - 1 - i];
      if (dim != full[ax] && dim != 1) return false;
      mstride[ax] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  const bool causal = ctx.attr_int("is_causal", 0) != 0;
  const float scale_attr = ctx.has_attr("scale") ? ctx.attr_float("scale", 1.f) : 1.f / std::sqrt(static_cast<float>(D));
  const float* pq = q.data<float>();
  const float* pk = k.data<float>();
  const float* pv = v.data<float>();
  float* py = ctx.output(0).data<float>();
  const int64_t group = Hq / Hkv;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const bool zero_nan = ctx.attr_int("onyx_zero_masked_rows", 0) != 0;
  cpu::parallel_for(B * Hq, 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(S * T));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / Hq, h = t % Hq, hk = h / group;  // consecutive query heads share a KV head
      const float* qh = pq + t * S * D;
      const float* kh = pk + (b * Hkv + hk) * T * D;
      const float* vh = pv + (b * Hkv + hk) * T * Dv;
      float* s = scores.data();
      cpu::gemm(false, true, S, T, D, qh, D, kh, D, s, T);  // Q K^T: K is [T, D]
      for (int64_t i = 0; i < S; ++i) {
        float* row = s + i * T;
        const int64_t mrow = b * mstride[0] + h * mstride[1] + i * mstride[2];
        float scale = scale_attr;
        if (softcap > 0.f) {  // scaled and capped here; the mask below adds to the capped scores
          for (int64_t j = 0; j < T; ++j) row[j] = softcap * std::tanh(row[j] * scale / softcap);
          scale = 1.f;
        }
        if (!mask) {
          for (int64_t j = 0; j < T; ++j) row[j] *= scale;
        } else if (mask->dtype() == DType::kFloat32) {
          const float* m = mask->data<float>() + mrow;
          for (int64_t j = 0; j < T; ++j) row[j] = row[j] * scale + m[j * mstride[3]];
        } else {
          const bool* m = mask->data<bool>() + mrow;
          for (int64_t j = 0; j < T; ++j) row[j] = m[j * mstride[3]] ? row[j] * scale : neg_inf;
        }
        if (causal)
          for (int64_t j = i + 1; j < T; ++j) row[j] = neg_inf;
      }
      cpu::softmax_rows(s, s, S, T, false);
      if (zero_nan)  // the weights of a row whose every key is masked (NaN) count as zeros
        for (int64_t j = 0; j < S * T; ++j)
          if (std::isnan(s[j])) s[j] = 0.f;
      cpu::gemm(false, false, S, Dv, T, s, T, vh, Dv, py + t * S * Dv, Dv);  // P V
    }
  });
  return true;
}

}  // namespace onyx
