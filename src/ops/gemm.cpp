#include "ops/gemm.h"

#include <cblas.h>

namespace onyx::cpu {

namespace {

// BLAS rejects k = 0 leading dimensions; then the product is empty and C becomes beta * C.
template <class T>
bool empty_product(int64_t m, int64_t n, int64_t k, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? T(0) : beta * c[i * ldc + j];
  return true;
}

CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

}  // namespace

void gemm_blas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta,
              c, (int)ldc);
}

void gemm_blas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (empty_product(m, n, k, beta, c, ldc)) return;
  cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta,
              c, (int)ldc);
}

}  // namespace onyx::cpu
