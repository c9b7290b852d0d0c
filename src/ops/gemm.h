// Dense matrix products on the CPU: BLAS for float32/float64, a plain loop for
// everything else (which is also the reference the BLAS path is tested against).
#pragma once

#include <cstdint>

namespace onyx::cpu {

// C[m,n] = alpha * op(A) * op(B) + beta * C, row-major, with leading dimensions (BLAS).
void gemm_blas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm_blas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The obviously-right version: accumulates in C (float for 16-bit floats).
template <class T, class C>
void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, C alpha, const T* a, int64_t lda,
                    const T* b, int64_t ldb, C beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      C acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        C av = static_cast<C>(trans_a ? a[p * lda + i] : a[i * lda + p]);
        C bv = static_cast<C>(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        acc += av * bv;
      }
      C prev = beta == C(0) ? C(0) : beta * static_cast<C>(c[i * ldc + j]);
      c[i * ldc + j] = static_cast<T>(alpha * acc + prev);
    }
}

}  // namespace onyx::cpu
