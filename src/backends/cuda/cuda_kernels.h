// The CUDA kernel table: (domain, op) -> a host function that launches the op's
// kernels on the session's stream. Kernels read tensors' device pointers with
// Tensor::raw()/data<T>() and shapes from the host-side Tensor metadata; small
// arrays (shapes, strides, pointers of a few inputs) travel by value in kernel
// parameters, so no kernel needs a host staging buffer.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/op.h"

struct cublasLtContext;

namespace onyx::cuda {

class Staging;

struct CudaContext {
  cudaStream_t stream = nullptr;
  cublasLtContext* lt = nullptr;     // cuBLASLt handle (cublasLtHandle_t)
  void* workspace = nullptr;         // cuBLASLt workspace on the device
  size_t workspace_bytes = 0;
  int device = 0;
  // The session's host -> device staging path, for a kernel that must send a
  // parameter block through host memory; and a small device scratch to send it to.
  Staging* staging = nullptr;
  void* param_scratch = nullptr;
  size_t param_scratch_bytes = 0;
  // The device error word: kernels that take indices set a bit (kDeviceError*) on an
  // out-of-range index instead of reading out of bounds; the executor checks it after
  // each run and replay, and names the op family.
  unsigned int* error_word = nullptr;
};

constexpr unsigned int kDeviceErrorGatherIndex = 1u;
constexpr unsigned int kDeviceErrorRotaryPosition = 2u;

using CudaKernelFn = std::function<void(KernelContext& ctx, CudaContext& cu)>;
// "" when the kernel handles these input types and attributes, else why not.
using CudaSupportFn = std::function<std::string(const Node& node, const std::vector<ValueType>& inputs)>;

struct CudaKernelDef {
  std::string domain;  // "" for ai.onnx
  std::string name;
  CudaKernelFn run;
  CudaSupportFn supports;  // null: every input type the op allows
};

class CudaKernelRegistry {
 public:
  void add(CudaKernelDef def) { defs_[{def.domain, def.name}] = std::move(def); }
  const CudaKernelDef* find(const std::string& domain, const std::string& name) const {
    auto it = defs_.find({domain, name});
    return it == defs_.end() ? nullptr : &it->second;
  }
  size_t size() const { return defs_.size(); }
  static const CudaKernelRegistry& global();

 private:
  std::map<std::pair<std::string, std::string>, CudaKernelDef> defs_;
};

// Checks the last launch on `stream` (or a cuda call's result) and throws onyx::Error naming `what`.
void check_cuda(cudaError_t status, const char* what);
#define ONYX_CUDA_CHECK(expr) ::onyx::cuda::check_cuda((expr), #expr)
#define ONYX_CUDA_CHECK_LAUNCH(what) ::onyx::cuda::check_cuda(cudaGetLastError(), what)

// D[M, N] = beta * C broadcast from [c0, c1] (each 1 or the full size); for Gemm's C forms
// that cuBLASLt does not take directly.
void write_scaled_broadcast(const Tensor& c, int64_t c0, int64_t c1, int64_t m, int64_t n, float beta, void* d,
                            cudaStream_t stream);

// Family registration, one per kernels/*.cu file.
void register_elementwise_kernels(CudaKernelRegistry& r);  // unary, binary (broadcast), Where, Cast, Expand, Range
void register_reduce_norm_kernels(CudaKernelRegistry& r);  // Reduce*, Softmax, LayerNorm, RMSNorm, Skip*Norm
void register_data_kernels(CudaKernelRegistry& r);         // Gather, Concat, Split, Slice, Transpose, RotaryEmbedding
void register_matmul_kernels(CudaKernelRegistry& r);       // MatMul, Gemm (cuBLASLt)
void register_test_kernels(CudaKernelRegistry& r);         // onyx.test::StagedAdd

}  // namespace onyx::cuda
