// One cuBLASLt call (matmul.cpp), for MatMul and Gemm and for kernels that compose products
// with their own steps (attention over long prompts).
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// One cuBLASLt call in row-major terms: D[b] = alpha * op(A[b]) · op(B[b]) + beta * C + bias,
// for b in [0, batch). A is stored [M, K] (or [K, M] when ta), B [K, N] (or [N, K] when tb),
// D [M, N] with leading dimension ldd. Strides are in elements; 0 broadcasts that operand.
struct GemmCall {
  DType dtype = DType::kFloat32;
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  float alpha = 1.f, beta = 0.f;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;     // [M, N] with D's layout, read when beta != 0
  const void* bias = nullptr;  // [N], added to every row (cuBLASLt's BIAS epilogue)
  void* d = nullptr;
};

// Enqueues the call on cu.stream; `cu.workspace` / `cu.workspace_bytes` is the cuBLASLt
// workspace it may use. `where` names the call in errors.
void run_gemm(const GemmCall& g, CudaContext& cu, const std::string& where);

}  // namespace onyx::cuda
