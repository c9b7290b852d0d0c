// Element types and conversions for the CUDA kernels: the device type of each onyx
// element type, arithmetic in float for the 16-bit floats (rounding to nearest even as
// the CPU reference does), wrapping integer arithmetic, loads and stores by a run-time
// dtype code, and host-side dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "onyx/dtype.h"
#include "onyx/error.h"

namespace onyx::cuda {

// The device type holding an onyx host element type (same size and bits).
template <class T>
struct DeviceElem {
  using type = T;
};
template <>
struct DeviceElem<Float16> {
  using type = __half;
};
template <>
struct DeviceElem<BFloat16> {
  using type = __nv_bfloat16;
};
template <class T>
using device_t = typename DeviceElem<T>::type;

template <class T>
inline constexpr bool is_half_dev_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool is_float_dev_v = std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_dev_v<T>;
template <class T>
inline constexpr bool is_int_dev_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Arithmetic type for T: float for the 16-bit floats, T otherwise.
template <class T>
using dev_compute_t = std::conditional_t<is_half_dev_v<T>, float, T>;

template <class T>
__device__ __forceinline__ dev_compute_t<T> to_compute(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return x;
}

// Rounds to nearest even for the 16-bit floats, as the CPU reference does.
template <class T>
__device__ __forceinline__ T from_compute(dev_compute_t<T> x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return x;
}

// Two's-complement wrapping integer arithmetic (signed overflow is undefined in C++).
template <class T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <class T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <class T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <class T>
__device__ __forceinline__ T wrap_neg(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(a));
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

// The 16 / sizeof(T) elements of a 16-byte pack (4 float32, 8 float16 or bfloat16) as floats.
template <class T>
__device__ __forceinline__ void pack_to_floats(const uint4& v, float* f) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  } else {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      } else {
        const float2 h = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        f[2 * i] = h.x;
        f[2 * i + 1] = h.y;
      }
    }
  }
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

}  // namespace onyx::cuda
