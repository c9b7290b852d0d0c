// Device helpers shared by the CUDA kernel families: host -> device element
// types, float conversions for the 16-bit floats, aligned vectors for 16-byte
// loads, launch sizing, and numpy broadcast geometry (passed by value).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "onyx/dtype.h"
#include "onyx/error.h"
#include "onyx/shape.h"

namespace onyx::cuda {

// ---- element types ----------------------------------------------------------

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

// ---- vectors ------------------------------------------------------------------

// N elements loaded or stored with one instruction (N * sizeof(T) <= 16).
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements per 16-byte access when every operand type is no wider than 16/N bytes.
template <class... Ts>
constexpr int vec_width() {
  constexpr size_t widest = std::max({sizeof(Ts)...});
  return static_cast<int>(16 / widest);
}

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// ---- launches -----------------------------------------------------------------

constexpr int kThreads = 256;

// Streaming multiprocessors of `device`, asked once per device (not a stream
// operation, so it is harmless during graph capture).
inline int sm_count(int device) {
  static std::atomic<int> cache[64] = {};
  if (device < 0 || device >= 64) return 132;
  int c = cache[device].load(std::memory_order_relaxed);
  if (c == 0) {
    if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || c <= 0) {
      (void)cudaGetLastError();  // clear it so that the next launch check does not report it
      c = 132;
    }
    cache[device].store(c, std::memory_order_relaxed);
  }
  return c;
}

// Blocks for `items` work items, one per thread, for a grid-stride loop:
// enough to fill every SM (8 resident blocks of 256 threads) and no more.
inline unsigned grid_for(int64_t items, int device) {
  const int64_t want = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sm_count(device)) * 8;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

// ---- broadcasting -------------------------------------------------------------

constexpr int kMaxRank = 8;

// Output dims and per-input element strides after merging adjacent axes that
// broadcast alike, innermost axis first; stride 0 where an input broadcasts.
template <int K>
struct Broadcast {
  int rank = 1;
  int64_t dims[kMaxRank] = {};
  int64_t strides[K][kMaxRank] = {};
};

// Builds the geometry for inputs that broadcast (numpy rules) to `out`.
template <int K>
Broadcast<K> make_broadcast(const Shape& out, const std::array<const Shape*, K>& ins) {
  const size_t r = out.rank();
  std::vector<int64_t> dims;                 // outermost first
  std::vector<std::array<bool, K>> bcast;    // per kept axis: does input k broadcast there
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;  // size-1 output axes carry no index
    std::array<bool, K> b{};
    for (int k = 0; k < K; ++k) {
      const Shape& s = *ins[k];
      ONYX_CHECK(s.rank() <= r, "input of shape ", s.str(), " does not broadcast to ", out.str());
      const size_t off = r - s.rank();
      const int64_t in_dim = d < off ? 1 : s[d - off];
      ONYX_CHECK(in_dim == 1 || in_dim == out[d], "input of shape ", s.str(), " does not broadcast to ",
                 out.str());
      b[k] = in_dim == 1;
    }
    if (!dims.empty() && bcast.back() == b) {
      dims.back() *= out[d];
    } else {
      dims.push_back(out[d]);
      bcast.push_back(b);
    }
  }
  Broadcast<K> g;
  if (dims.empty()) {  // one element: every input reads its element 0
    g.rank = 1;
    g.dims[0] = 1;
    return g;
  }
  ONYX_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "broadcast to ", out.str(), " needs ", dims.size(),
             " axes after merging; the CUDA kernels handle at most ", kMaxRank);
  g.rank = static_cast<int>(dims.size());
  for (int k = 0; k < K; ++k) {
    int64_t acc = 1;
    for (int j = g.rank - 1, idx = 0; j >= 0; --j, ++idx) {
      g.dims[idx] = dims[j];
      g.strides[k][idx] = bcast[j][k] ? 0 : acc;
      if (!bcast[j][k]) acc *= dims[j];
    }
  }
  return g;
}

// "#pragma unroll" in functions also compiled for the host (where GCC would warn about it).
#ifdef __CUDA_ARCH__
#define ONYX_UNROLL _Pragma("unroll")
#else
#define ONYX_UNROLL
#endif

// Element offsets of each input for flat output index i. I is uint32_t when
// the output has at most 2^31 - 1 elements (cheap division), else int64_t.
template <class I, int K>
__host__ __device__ __forceinline__ void broadcast_offsets(const Broadcast<K>& g, I i, I (&off)[K]) {
  ONYX_UNROLL
  for (int k = 0; k < K; ++k) off[k] = 0;
  ONYX_UNROLL
  for (int d = 0; d < kMaxRank; ++d) {
    if (d == g.rank - 1) {  // outermost axis: what remains of i is its index
      ONYX_UNROLL
      for (int k = 0; k < K; ++k) off[k] += i * static_cast<I>(g.strides[k][d]);
      break;
    }
    const I dim = static_cast<I>(g.dims[d]);
    const I q = i / dim;
    const I rem = i - q * dim;
    ONYX_UNROLL
    for (int k = 0; k < K; ++k) off[k] += rem * static_cast<I>(g.strides[k][d]);
    i = q;
  }
}

// Whether 32-bit grid-stride indexing is safe: i + stride never wraps.
__host__ __device__ inline bool fits_index32(int64_t n) { return n <= 0x7fffffff; }

}  // namespace onyx::cuda
