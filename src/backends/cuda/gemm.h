// One strided-batched matrix product through cuBLASLt (matmul.cpp), for kernels that compose
// products with their own steps (attention over long prompts): in row-major terms
// D[b] = alpha * op(A[b]) · op(B[b]), b in [0, batch), A [M, K] (or [K, M] when ta), B [K, N]
// (or [N, K] when tb), D [M, N]; leading dimensions and batch strides in elements.
#pragma once

#include <cstdint>
#include <string>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

struct StridedGemm {
  DType dtype = DType::kFloat32;
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  float alpha = 1.f;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
};

// `cu.workspace` / `cu.workspace_bytes` is the cuBLASLt workspace this call may use.
void strided_gemm(const StridedGemm& g, CudaContext& cu, const std::string& where);

}  // namespace onyx::cuda
