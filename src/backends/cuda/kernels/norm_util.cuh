// Helpers shared by the reduction/normalization and data-movement kernels:
// float conversions of the 16-bit types, loads by a runtime dtype code, warp and
// block reductions, launch sizing, and host-side dtype dispatch. Kept in a
// nested namespace so that nothing here collides with other kernel families.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "onyx/error.h"

namespace onyx::cuda::nk {

constexpr int kMaxRank = 8;

// ---- element conversions (arithmetic happens in float) ----

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A float tensor whose dtype is only known at run time (scale, bias, skip,
// caches, statistics outputs): 0 float32, 1 float16, 2 bfloat16.
enum FCode : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline int fcode(DType dt) {
  switch (dt) {
    case DType::kFloat32: return kF32;
    case DType::kFloat16: return kF16;
    case DType::kBFloat16: return kBF16;
    default: throw Error(cat("expected a float32/float16/bfloat16 tensor, got ", dtype_name(dt)));
  }
}
inline bool is_cuda_float(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kFloat16 || dt == DType::kBFloat16;
}

__device__ __forceinline__ float load_f(const void* p, int code, int64_t i) {
  if (code == kF32) return static_cast<const float*>(p)[i];
  if (code == kF16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ void store_f(void* p, int code, int64_t i, float v) {
  if (code == kF32) static_cast<float*>(p)[i] = v;
  else if (code == kF16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

// Index integers (Gather indices, Slice arguments, position ids): int32 or int64.
__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

// ---- reductions ----

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces over the whole block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` holds 32 values; callable repeatedly.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < nwarps; ++w) r = op(r, scratch[w]);
  return r;
}

// ---- broadcasting a small operand (scale, bias, skip) onto a target index ----

// mode 0: same layout as the target; 1: index % n (a suffix of the target's
// dims, a scalar when n == 1); 2: general (per-dim strides, 0 on broadcast dims).
struct Bcast {
  int mode = 0;
  int rank = 0;
  int64_t n = 1;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

__device__ __forceinline__ int64_t bcast_index(const Bcast& b, int64_t i) {
  if (b.mode == 0) return i;
  if (b.mode == 1) return i % b.n;
  int64_t off = 0;
  for (int a = b.rank - 1; a >= 0; --a) {
    const int64_t c = i % b.dims[a];
    i /= b.dims[a];
    off += c * b.strides[a];
  }
  return off;
}

// How `src` (unidirectionally broadcastable to `target`) maps onto target indices.
inline Bcast make_bcast(const Shape& src, const Shape& target, const char* what) {
  const size_t sr = src.rank(), tr = target.rank();
  ONYX_CHECK(sr <= tr, what, " of shape ", src.str(), " does not broadcast to ", target.str());
  for (size_t i = 0; i < sr; ++i) {
    const int64_t s = src[sr - 1 - i], t = target[tr - 1 - i];
    ONYX_CHECK(s == t || s == 1, what, " of shape ", src.str(), " does not broadcast to ", target.str());
  }
  Bcast b;
  b.n = src.numel();
  if (b.n == target.numel()) return b;  // equal up to leading ones
  // Strip the source's leading ones; a suffix of the target's dims means "i % n".
  size_t lead = 0;
  while (lead < sr && src[lead] == 1) ++lead;
  bool suffix = true;
  for (size_t i = lead; i < sr; ++i) suffix = suffix && src[i] == target[tr - sr + i];
  if (suffix) {
    b.mode = 1;
    return b;
  }
  ONYX_CHECK(tr <= static_cast<size_t>(kMaxRank), what, ": broadcasting to rank ", tr,
             " is supported up to rank ", kMaxRank, " on CUDA");
  b.mode = 2;
  b.rank = static_cast<int>(tr);
  int64_t stride = 1;
  for (size_t i = tr; i-- > 0;) {
    b.dims[i] = target[i];
    const size_t k = i + sr;  // source axis = k - tr, when k >= tr
    if (k >= tr && src[k - tr] != 1) {
      b.strides[i] = stride;
      stride *= src[k - tr];
    } else {
      b.strides[i] = 0;
    }
  }
  return b;
}

// ---- launch sizing ----

// Blocks for a grid-stride loop over n items; capped (the loops cover the rest).
inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > (int64_t{1} << 20)) b = int64_t{1} << 20;
  return static_cast<unsigned>(b);
}

// ---- host dtype dispatch ----

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the device type of a float dtype.
template <class F>
void dispatch_float(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(Tag<float>{}); return;
    case DType::kFloat16: f(Tag<__half>{}); return;
    case DType::kBFloat16: f(Tag<__nv_bfloat16>{}); return;
    default: throw Error(cat(what, " on CUDA does not support ", dtype_name(dt)));
  }
}

inline int64_t prod(const std::vector<int64_t>& d, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= d[i];
  return p;
}

inline int64_t norm_axis(int64_t a, int64_t rank) {
  const int64_t n = a < 0 ? a + rank : a;
  ONYX_CHECK(n >= 0 && n < (rank == 0 ? 1 : rank), "axis ", a, " is out of range for rank ", rank);
  return n;
}

}  // namespace onyx::cuda::nk
