// What the attention kernels (attention.cu) show outside the op registry.
#pragma once

#include <optional>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// ONNX Attention's kernel over Q, K, V, the mask (null where absent) and Y; `scale`: the op's
// attribute (1 / sqrt(head size) where absent); `softcap` > 0: the scaled scores become
// softcap * tanh(score / softcap) before the mask is added (the op's attribute). The fused
// rotary-attention kernel runs it where its own form does not apply.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, std::optional<float> scale,
               Tensor& y, CudaContext& cu, float softcap = 0.f);

// ONNX Attention's kernel.
void run_attention(KernelContext& ctx, CudaContext& cu);

// The decode attention kernel's key splits per (batch row, KV head), for bench/cuda_bench.cpp's
// side-by-side table only (0: the kernel's own choice).
extern int attention_decode_splits_for_bench;

// The fewest batch rows onyx::RotaryCacheAttention's fused kernel takes (fewer run RotaryCache's
// kernel, then Attention's: measured faster there); tests set 1 to run the fused one at any shape.
extern int rotary_attention_min_rows;

}  // namespace onyx::cuda
