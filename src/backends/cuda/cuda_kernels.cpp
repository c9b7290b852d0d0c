#include "backends/cuda/cuda_kernels.h"

#include "onyx/error.h"

namespace onyx::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(cat("CUDA error in ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
}

const CudaKernelRegistry& CudaKernelRegistry::global() {
  static const CudaKernelRegistry registry = [] {
    CudaKernelRegistry r;
    register_elementwise_kernels(r);
    register_reduce_norm_kernels(r);
    register_data_kernels(r);
    register_matmul_kernels(r);
    register_test_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace onyx::cuda
