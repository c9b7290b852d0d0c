// What the attention kernels (attention.cu) show outside the op registry.
#pragma once

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// ONNX Attention's kernel (the fused rotary-attention kernel runs it where its own does not apply).
void run_attention(KernelContext& ctx, CudaContext& cu);

// The decode attention kernel's key splits per (batch row, KV head), for bench/cuda_bench.cpp's
// side-by-side table only (0: the kernel's own choice).
extern int attention_decode_splits_for_bench;

// The fewest batch rows onyx::RotaryCacheAttention's fused kernel takes (fewer run RotaryCache's
// kernel, then Attention's: measured faster there); tests set 1 to run the fused one at any shape.
extern int rotary_attention_min_rows;

}  // namespace onyx::cuda
