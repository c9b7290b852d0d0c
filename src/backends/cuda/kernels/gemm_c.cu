// The steps around cuBLASLt products that it does not take itself: Gemm's C in the forms
// cuBLASLt cannot take directly (a scalar, a column [M, 1], or a row scaled by beta != 1),
// written as beta * broadcast(C) into D, which the GEMM then reads as its C with beta = 1;
// and Conv's im2col and per-channel bias.
#include <algorithm>

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

// One thread per col element: row r = c * K + k (k the kernel position), column j.
template <class T>
__global__ void im2col_kernel(const T* __restrict__ image, int64_t rows, int64_t cols, int64_t p0, int64_t kpos,
                              int64_t image_size, ConvWindow w, T* __restrict__ col) {
  const int64_t total = rows * cols;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, j = e - r * cols;
    const int64_t c = r / kpos;
    int64_t k = r - c * kpos, p = p0 + j;
    // Kernel and output coordinates, last dimension fastest.
    int64_t off = 0;
    bool inside = true;
    int64_t kc[3], pc[3];
    for (int d = 2; d >= 0; --d) {
      kc[d] = k % w.kernel[d];
      k /= w.kernel[d];
      pc[d] = p % w.out[d];
      p /= w.out[d];
    }
    for (int d = 0; d < 3; ++d) {
      const int64_t i = pc[d] * w.stride[d] - w.pad[d] + kc[d] * w.dilation[d];
      inside = inside && i >= 0 && i < w.image[d];
      off = off * w.image[d] + i;
    }
    col[e] = inside ? image[c * image_size + off] : T(0.f);
  }
}

template <class T>
__global__ void channel_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t channels, int64_t inner,
                                    int64_t total) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (e / inner) % channels;
    y[e] = T(float(y[e]) + float(bias[c]));
  }
}

unsigned blocks_for_total(int64_t total) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, 132 * 16)));
}

}  // namespace

void conv_im2col(const void* image, DType dtype, int64_t channels, const ConvWindow& w, int64_t p0, int64_t cols,
                 void* col, cudaStream_t stream) {
  const int64_t kpos = w.kernel[0] * w.kernel[1] * w.kernel[2], rows = channels * kpos;
  const int64_t image_size = w.image[0] * w.image[1] * w.image[2];
  if (rows * cols == 0) return;
  const unsigned blocks = blocks_for_total(rows * cols);
  switch (dtype) {
    case DType::kFloat32:
      im2col_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<const float*>(image), rows, cols, p0, kpos,
                                                        image_size, w, static_cast<float*>(col));
      break;
    case DType::kFloat16:
      im2col_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<const __half*>(image), rows, cols, p0, kpos,
                                                         image_size, w, static_cast<__half*>(col));
      break;
    case DType::kBFloat16:
      im2col_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(image), rows, cols,
                                                                p0, kpos, image_size, w,
                                                                static_cast<__nv_bfloat16*>(col));
      break;
    default: throw Error(cat("Conv of ", dtype_name(dtype), " is not supported on CUDA"));
  }
  ONYX_CUDA_CHECK_LAUNCH("Conv im2col");
}

void add_channel_bias(void* y, const void* bias, DType dtype, int64_t n, int64_t channels, int64_t inner,
                      cudaStream_t stream) {
  const int64_t total = n * channels * inner;
  if (total == 0) return;
  const unsigned blocks = blocks_for_total(total);
  switch (dtype) {
    case DType::kFloat32:
      channel_bias_kernel<float><<<blocks, 256, 0, stream>>>(static_cast<float*>(y), static_cast<const float*>(bias),
                                                              channels, inner, total);
      break;
    case DType::kFloat16:
      channel_bias_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<__half*>(y),
                                                               static_cast<const __half*>(bias), channels, inner, total);
      break;
    case DType::kBFloat16:
      channel_bias_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(
          static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(bias), channels, inner, total);
      break;
    default: throw Error(cat("Conv bias of ", dtype_name(dtype), " is not supported on CUDA"));
  }
  ONYX_CUDA_CHECK_LAUNCH("Conv bias");
}

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
