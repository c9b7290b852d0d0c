#include "backends/cuda/cuda_kernels.h"

#include "onyx/error.h"

namespace onyx::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  throw Error(cat("CUDA error in ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")"));
}

CudaKernelDef onnx_kernel(std::string name, int since, CudaKernelFn run, CudaSupportFn supports) {
  return domain_kernel("", std::move(name), since, std::move(run), std::move(supports));
}

CudaKernelDef domain_kernel(std::string domain, std::string name, int since, CudaKernelFn run, CudaSupportFn supports) {
  CudaKernelDef d;
  d.domain = std::move(domain);
  d.name = std::move(name);
  d.since_version = since;
  d.run = std::move(run);
  d.supports = std::move(supports);
  return d;
}

void CudaKernelRegistry::add(CudaKernelDef def) {
  ONYX_ASSERT(def.run, "CUDA kernel ", def.name, " has no launcher");
  const std::string name = def.name;
  ONYX_ASSERT(table_.add(std::move(def)), "CUDA kernel ", name, " registered twice");
}

CudaKernelRegistry& CudaKernelRegistry::global_mutable() {
  static CudaKernelRegistry registry = [] {
    CudaKernelRegistry r;
    register_binary_kernels(r);
    register_unary_kernels(r);
    register_where_expand_range_kernels(r);
    register_reduce_kernels(r);
    register_norm_kernels(r);
    register_data_kernels(r);
    register_rotary_kernels(r);
    register_rotary_cache_kernels(r);
    register_matmul_kernels(r);
    register_genai_kernels(r);
    register_contrib_kernels(r);
    register_matmul_nbits_kernels(r);
    register_attention_kernels(r);
    register_linear_kernels(r);
    register_collective_kernels(r);
    return r;
  }();
  return registry;
}

const CudaKernelRegistry& CudaKernelRegistry::global() { return global_mutable(); }

void CudaKernelRegistry::add_custom(CudaKernelDef def) { global_mutable().add(std::move(def)); }

}  // namespace onyx::cuda
