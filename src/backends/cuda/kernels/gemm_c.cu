// Gemm's C in the forms cuBLASLt cannot take directly (a scalar, a column [M, 1], or a
// row scaled by beta != 1): written as beta * broadcast(C) into D, which the GEMM then
// reads as its C with beta = 1.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

namespace {

template <class T>
__global__ void scaled_broadcast_kernel(const T* __restrict__ c, int64_t c0, int64_t c1, int64_t m, int64_t n,
                                        float beta, T* __restrict__ d) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / n, col = i - row * n;
    const int64_t src = (c0 == 1 ? 0 : row) * c1 + (c1 == 1 ? 0 : col);
    d[i] = T(beta * float(c[src]));
  }
}

template <class T>
void launch(const Tensor& c, int64_t c0, int64_t c1, int64_t m, int64_t n, float beta, void* d, cudaStream_t s) {
  const int64_t total = m * n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 132 * 16));
  scaled_broadcast_kernel<T><<<blocks, 256, 0, s>>>(static_cast<const T*>(c.raw()), c0, c1, m, n, beta,
                                                      static_cast<T*>(d));
}

}  // namespace

void write_scaled_broadcast(const Tensor& c, int64_t c0, int64_t c1, int64_t m, int64_t n, float beta, void* d,
                            cudaStream_t stream) {
  if (m * n == 0) return;
  switch (c.dtype()) {
    case DType::kFloat32: launch<float>(c, c0, c1, m, n, beta, d, stream); break;
    case DType::kFloat16: launch<__half>(c, c0, c1, m, n, beta, d, stream); break;
    case DType::kBFloat16: launch<__nv_bfloat16>(c, c0, c1, m, n, beta, d, stream); break;
    default: throw Error(cat("Gemm C of ", dtype_name(c.dtype()), " is not supported on CUDA"));
  }
  ONYX_CUDA_CHECK_LAUNCH("Gemm C broadcast");
}

}  // namespace onyx::cuda
