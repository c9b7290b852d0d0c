// Launch sizing and vector accesses for the CUDA kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "onyx/error.h"

namespace onyx::cuda {

constexpr int kThreads = 256;
constexpr int kMaxRank = 8;  // the most axes a kernel indexes

// "#pragma unroll" in functions also compiled for the host (where GCC would warn about it).
#ifdef __CUDA_ARCH__
#define ONYX_UNROLL _Pragma("unroll")
#else
#define ONYX_UNROLL
#endif

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

// Blocks for a grid-stride loop over `items` work items of one thread each, in blocks of
// kThreads: enough to fill every SM of `device` (8 resident blocks each) and no more.
inline unsigned resident_blocks_for(int64_t items, int device) {
  const int64_t want = (items + kThreads - 1) / kThreads;
  const int64_t cap = static_cast<int64_t>(sm_count(device)) * 8;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(want, cap)));
}

// Blocks that cover `items` work items at `per_block` items per block, capped at 2^20
// (the kernels' grid-stride loops cover the rest).
inline unsigned blocks_for(int64_t items, int64_t per_block) {
  int64_t b = (items + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > (int64_t{1} << 20)) b = int64_t{1} << 20;
  return static_cast<unsigned>(b);
}

// ---- vectors ----

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

// Whether 32-bit grid-stride indexing is safe: i + stride never wraps.
__host__ __device__ inline bool fits_index32(int64_t n) { return n <= 0x7fffffff; }

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

}  // namespace onyx::cuda
