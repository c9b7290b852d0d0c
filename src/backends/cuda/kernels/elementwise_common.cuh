// Pieces shared by the elementwise family's files (elementwise.cu,
// elementwise_unary.cu, elementwise_data.cu): the one-input map kernel with
// 16-byte vector accesses, and small helpers for supports() rules.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {

// out[i] = op(in[i], i) over contiguous tensors of n elements. `op_in.prepare()`
// runs once per thread (to read device-resident parameters, e.g. Clip bounds);
// it returns the functor used per element. When `vec`, both pointers are
// aligned to N-element vectors and the bulk moves as 16-byte (or narrower)
// accesses, the n % N tail element by element.
template <class S, class D, class Op>
__global__ void __launch_bounds__(kThreads)
    map1_kernel(const S* __restrict__ in, D* __restrict__ out, int64_t n, bool vec, Op op_in) {
  ONYX_KERNEL_PROLOGUE();
  const auto op = op_in.prepare();
  constexpr int N = vec_width<S, D>();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vec) {
    const int64_t nv = n / N;
    const auto* vin = reinterpret_cast<const Vec<S, N>*>(in);
    auto* vout = reinterpret_cast<Vec<D, N>*>(out);
    for (int64_t v = tid; v < nv; v += stride) {
      const Vec<S, N> x = vin[v];
      Vec<D, N> y;
#pragma unroll
      for (int j = 0; j < N; ++j) y.v[j] = op(x.v[j], v * N + j);
      vout[v] = y;
    }
    start = nv * N;
  }
  for (int64_t i = start + tid; i < n; i += stride) out[i] = op(in[i], i);
}

template <class S, class D, class Op>
void launch_map1(const void* in, void* out, int64_t n, const Op& op, CudaContext& cu, const char* what) {
  if (n <= 0) return;
  constexpr int N = vec_width<S, D>();
  const bool vec = N > 1 && n >= N && is_aligned(in, N * sizeof(S)) && is_aligned(out, N * sizeof(D));
  const int64_t items = vec ? n / N : n;
  launch_kernel(map1_kernel<S, D, Op>, resident_blocks_for(items, cu.device), kThreads, 0, cu,
                static_cast<const S*>(in), static_cast<D*>(out), n, vec, op);
  ONYX_CUDA_CHECK_LAUNCH(what);
}

// Same-size device-to-device copy on the stream (capturable in a CUDA graph).
inline void copy_async(const Tensor& in, Tensor& out, CudaContext& cu) {
  if (out.bytes() == 0 || in.raw() == out.raw()) return;
  ONYX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), in.raw(), out.bytes(), cudaMemcpyDeviceToDevice, cu.stream));
}

// ---- supports() helpers -------------------------------------------------------

inline bool dtype_in(DType t, std::initializer_list<DType> list) {
  for (DType d : list)
    if (d == t) return true;
  return false;
}

inline DType input_dtype(const std::vector<ValueType>& inputs, size_t i) {
  return i < inputs.size() ? inputs[i].dtype : DType::kUndefined;
}

// "" unless some input's known rank exceeds what the broadcast kernels index.
inline std::string rank_reason(const std::vector<ValueType>& inputs, const char* op) {
  for (const ValueType& v : inputs)
    if (v.shape.rank_known && v.shape.dims.size() > static_cast<size_t>(kMaxRank))
      return cat(op, " on CUDA supports tensors of rank at most ", kMaxRank);
  return "";
}

}  // namespace onyx::cuda
