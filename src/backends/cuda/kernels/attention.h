// What the attention kernels (attention.cu) show outside the op registry.
#pragma once

namespace onyx::cuda {

// The decode attention kernel's key splits per (batch row, KV head), for bench/cuda_bench.cpp's
// side-by-side table only (0: the kernel's own choice).
extern int attention_decode_splits_for_bench;

}  // namespace onyx::cuda
