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
  // One row (a decode step): a matrix-vector product, which reads B once in place; sgemm
  // would first copy (pack) all of B, the larger part of the work at this shape.
  if (m == 1) {
    const int incx = trans_a ? (int)lda : 1;
    if (trans_b)  // B is [n, k]: c = B a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)k, alpha, b, (int)ldb, a, incx, beta, c, 1);
    else  // B is [k, n]: c = B^T a
      cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)n, alpha, b, (int)ldb, a, incx, beta, c, 1);
    return;
  }
  if (n == 1) {  // one column: c = op(A) b
    const int incx = trans_b ? 1 : (int)ldb;
    if (trans_a)  // A is [k, m]
      cblas_sgemv(CblasRowMajor, CblasTrans, (int)k, (int)m, alpha, a, (int)lda, b, incx, beta, c, (int)ldc);
    else  // A is [m, k]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, alpha, a, (int)lda, b, incx, beta, c, (int)ldc);
    return;
  }
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
