// 8-bit integer matrix products on the CPU by the AVX-512 VNNI dot-product instruction
// (VPDPBUSD: four unsigned-by-signed byte products summed into each int32 lane per instruction),
// the integer products of MatMulInteger, QLinearMatMul, MatMulIntegerToFloat and
// DynamicQuantizeMatMul. The ops keep their reference loop as the specification and use this
// kernel when the CPU has the instruction (has_int8_dot); tests/unit/test_ops_quant.cpp compares
// the two on random values, zero points and element types.
#pragma once

#include <cstdint>

namespace onyx::cpu {

// Whether this CPU runs gemm_int8 (AVX-512 F, BW and VNNI).
bool has_int8_dot();

struct Int8Operand {
  const void* data = nullptr;     // uint8_t or int8_t values
  bool is_signed = false;         // int8 (true) or uint8
  int64_t ld = 0;                 // row stride, in elements
  const int32_t* zero = nullptr;  // zero points: one per row of A or per column of B; null: 0
};

// C[i, j] = sum over q of (A[i, q] - za[i]) * (B[q, j] - zb[j]) for A m x k and B k x n, summed
// modulo 2^32 (as int32 wraps; no 8-bit product sum reaches that below k = 65793) and written as
// int32 with row stride ldc. Needs has_int8_dot(). Splits its work over the intra-op pool.
void gemm_int8(int64_t m, int64_t n, int64_t k, const Int8Operand& a, const Int8Operand& b, int32_t* c,
               int64_t ldc);

}  // namespace onyx::cpu
