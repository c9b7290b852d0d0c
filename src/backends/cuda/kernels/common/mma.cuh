// One tensor-core multiply-add of 16-bit operands with float accumulation, as the few-row
// products use it (linear.cu's streaming kernel, matmul_nbits.cu's 4-bit kernel): the weight
// rows are the MMA's 16 rows, the (up to 8) rows of x its columns.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace onyx::cuda {

// d += A B for m16n8k16, A row-major (a0: row g, k 2t and 2t + 1; a1: row g + 8, the same k;
// a2, a3: k 2t + 8 and 2t + 9), B column-major (b0: k 2t and 2t + 1 of column g; b1: k 2t + 8
// and 2t + 9), d: rows g (d[0], d[1]) and g + 8 (d[2], d[3]), columns 2t and 2t + 1, where
// g = lane / 4 and t = lane % 4. T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#endif
}

}  // namespace onyx::cuda
