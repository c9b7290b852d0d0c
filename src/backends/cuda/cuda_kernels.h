// The CUDA kernel table: (domain, op, since_version) -> a host function that launches
// the op's kernels on the session's stream. Kernels read tensors' device pointers with
// Tensor::raw()/data<T>() and shapes from the host-side Tensor metadata; small
// arrays (shapes, strides, pointers of a few inputs) travel by value in kernel
// parameters, so no kernel needs a host staging buffer.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ops/op.h"
#include "ops/op_table.h"

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
  // Kernels that can (kernels/common/pdl.cuh) start while the kernel before them finishes
  // (SessionOptions::overlap_launches).
  bool overlap_launches = false;
};

constexpr unsigned int kDeviceErrorGatherIndex = 1u;
constexpr unsigned int kDeviceErrorRotaryPosition = 2u;
constexpr unsigned int kDeviceErrorCachePosition = 4u;
constexpr unsigned int kDeviceErrorAttentionLengths = 8u;
constexpr unsigned int kDeviceErrorIndexInput = 16u;  // ScatterND's indices, CumSum's axis

using CudaKernelFn = std::function<void(KernelContext& ctx, CudaContext& cu)>;
// "" when the kernel handles these input types and attributes, else why not.
using CudaSupportFn = std::function<std::string(const Node& node, const std::vector<ValueType>& inputs)>;

// A CUDA kernel, keyed and versioned as CPU ops are: found for a node by the same
// (domain, name, opset) rule (OpTable). Registered one way:
//   r.add(onnx_kernel("Relu", 1, run_relu, float_inputs("Relu")));
struct CudaKernelDef {
  std::string domain;  // "" for ai.onnx
  std::string name;
  int since_version = 1;
  CudaKernelFn run;
  CudaSupportFn supports;  // null: every input type the op allows
};

CudaKernelDef onnx_kernel(std::string name, int since, CudaKernelFn run, CudaSupportFn supports = nullptr);
CudaKernelDef domain_kernel(std::string domain, std::string name, int since, CudaKernelFn run,
                            CudaSupportFn supports = nullptr);

class CudaKernelRegistry {
 public:
  void add(CudaKernelDef def);
  const CudaKernelDef* find(const Node& node) const { return table_.find(node); }
  const CudaKernelDef* find(const std::string& domain, const std::string& name, int opset) const {
    return table_.find(domain, name, opset);
  }
  std::vector<const CudaKernelDef*> versions(const std::string& domain, const std::string& name) const {
    return table_.versions(domain, name);
  }
  size_t size() const { return table_.size(); }
  std::vector<std::string> names() const { return table_.names(); }
  // Every kernel family of onyx, and the custom kernels added.
  static const CudaKernelRegistry& global();
  // Adds a kernel of the caller's own (test code's diagnostic ops) before any session is made.
  static void add_custom(CudaKernelDef def);

 private:
  static CudaKernelRegistry& global_mutable();
  OpTable<CudaKernelDef> table_;
};

// Checks the last launch on `stream` (or a cuda call's result) and throws onyx::Error naming `what`.
void check_cuda(cudaError_t status, const char* what);
#define ONYX_CUDA_CHECK(expr) ::onyx::cuda::check_cuda((expr), #expr)
#define ONYX_CUDA_CHECK_LAUNCH(what) ::onyx::cuda::check_cuda(cudaGetLastError(), what)

// D[M, N] = beta * C broadcast from [c0, c1] (each 1 or the full size); for Gemm's C forms
// that cuBLASLt does not take directly.
void write_scaled_broadcast(const Tensor& c, int64_t c0, int64_t c1, int64_t m, int64_t n, float beta, void* d,
                            cudaStream_t stream);

// Conv's sliding window (gemm_c.cu), up to 3 spatial dimensions, in the last `nd` entries
// (the entries before are 1, with stride 1 and no padding): the image's and the output's spatial sizes, the kernel's, strides,
// dilations and the padding at each dimension's start.
struct ConvWindow {
  int nd = 0;
  int64_t image[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
};

// col[r][j] for rows r = c * kernel positions + kernel position (channels [0, channels)) and
// columns j in [0, cols): the image (channels x image positions, of `dtype`) at output position
// p0 + j under that kernel position, 0 outside the image. col is [channels * kernel, cols].
void conv_im2col(const void* image, DType dtype, int64_t channels, const ConvWindow& w, int64_t p0, int64_t cols,
                 void* col, cudaStream_t stream);

// y[n][c][i] += bias[c] for y [n, channels, inner] of `dtype`.
void add_channel_bias(void* y, const void* bias, DType dtype, int64_t n, int64_t channels, int64_t inner,
                      cudaStream_t stream);

// The `n` copies on the stream as one launch (data.cu; for Backend::copy_many_on_device): copy i
// is [dst, dst + bytes) from [src, src + bytes), device memory, no two overlapping.
void copy_batch_on_device(const Backend::DeviceCopy* copies, size_t n, cudaStream_t stream);

// Family registration: each kernel file registers its own kernels.
void register_binary_kernels(CudaKernelRegistry& r);      // elementwise.cu: arithmetic, comparisons, Max/Min/Sum
void register_unary_kernels(CudaKernelRegistry& r);       // elementwise_unary.cu: math, activations, Not, Cast
void register_where_expand_range_kernels(CudaKernelRegistry& r);  // elementwise_data.cu
void register_reduce_kernels(CudaKernelRegistry& r);      // reduce.cu: ReduceSum/Mean/Max/Min
void register_norm_kernels(CudaKernelRegistry& r);        // norm.cu: Softmax, LayerNorm, RMSNorm, Skip*Norm
void register_data_kernels(CudaKernelRegistry& r);        // data.cu: Gather, Concat, Split, Slice, Transpose
void register_rotary_kernels(CudaKernelRegistry& r);      // rotary.cu: RotaryEmbedding
void register_rotary_cache_kernels(CudaKernelRegistry& r);  // rotary_cache.cu: onyx RotaryCache
void register_matmul_kernels(CudaKernelRegistry& r);      // matmul.cpp: MatMul, Gemm, Conv (cuBLASLt)
void register_genai_kernels(CudaKernelRegistry& r);       // genai.cu: onyx.genai CacheUpdate, Sample
void register_attention_kernels(CudaKernelRegistry& r);   // attention.cu: ONNX Attention
void register_linear_kernels(CudaKernelRegistry& r);      // linear.cu: onyx Linear, SiluGateLinear
void register_collective_kernels(CudaKernelRegistry& r);  // nccl.cpp: onyx AllReduce, AllGather (NCCL)
void register_contrib_kernels(
    CudaKernelRegistry& r);  // contrib.cu: GroupQueryAttention, MultiHeadAttention, GatherBlockQuantized
void register_matmul_nbits_kernels(CudaKernelRegistry& r);  // matmul_nbits.cu: com.microsoft MatMulNBits
// Which kernel a 4-bit MatMulNBits of up to 8 rows takes, for the microbenchmark's side-by-side
// table only (bench/cuda_bench.cpp): 0 the default (the streaming kernel where it takes the
// product, else the tensor-core kernel), 1 the per-value float kernel, 2 the tensor-core kernel
// with its own choice of warps, 3, 4, 6, 7 the tensor-core kernel with 4 warps and 4 chunks in
// flight, 8 and 2, 4 and 2, 16 and 2, 9 and 10 the streaming kernel with tiles of 16 and 32 rows.
extern int nbits4_variant_for_bench;

}  // namespace onyx::cuda
