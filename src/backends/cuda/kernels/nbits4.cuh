// The 4-bit kernels of up to 8 rows of 16-bit A (decode steps) for matmul_nbits.cu, which
// includes this file once, after NBitsArgs, nbits_zero and kNbitsMaxSplits: the per-value float
// kernel (zero points of A's type), the tensor-core kernel, and the streaming kernel that takes
// most decode products (tiles of packed rows brought into shared memory by the bulk-copy engine).
// Not a header to include elsewhere.
#pragma once

#include <mutex>

#include "backends/cuda/kernels/common/bulk_copy.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/gate.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/mma.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {
namespace {

// ---- 4 bits, few rows ----

constexpr int kNb4Warps = 4;

// R rows of A at most (the launch's rows may be fewer), CPW features per warp, U 16-byte loads
// per feature in flight per lane. kTypedZero: zero points of A's type, which may have a
// fraction (2^23 + z would round it), so q - z takes a second subtraction.
template <class T, int R, int CPW, int U, bool kTypedZero>
__global__ void __launch_bounds__(kNb4Warps * 32) nbits4_gemv_kernel(NBitsArgs p) {
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kNb4Warps + (threadIdx.x >> 5)) * CPW;
  const int chunks = static_cast<int>(p.K / 32);          // 16-byte pieces of a row that hold values
  const int64_t row_bytes = p.k_blocks * p.block / 2;     // a multiple of 16 (block % 32 == 0)
  const int per_block = static_cast<int>(p.block / 32);   // pieces per quantization block
  const uint4* row[CPW];
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c) {
    const int64_t n = n0 + c < p.N ? n0 + c : p.N - 1;   // past the end: the last row again, never written
    row[c] = reinterpret_cast<const uint4*>(p.b + n * row_bytes);
  }
  if (lane == 0 && n0 < p.N)
    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c) prefetch_l2(row[c], static_cast<uint32_t>(chunks) * 16u);
  wait_for_prior_grids();
  allow_dependent_grids();
  if (n0 >= p.N) return;
  const int rows = static_cast<int>(p.M < R ? p.M : R);
  const T* A = static_cast<const T*>(p.a);
  const T* scales = static_cast<const T*>(p.scales);
  float acc[CPW][R];
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
  for (int base = 0; base < chunks; base += 32 * U) {
    uint4 wv[U][CPW];
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int q = base + u * 32 + lane;
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c) {
        if (q < chunks) {
          asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
              : "=r"(wv[u][c].x), "=r"(wv[u][c].y), "=r"(wv[u][c].z), "=r"(wv[u][c].w)
              : "l"(row[c] + q));
        } else {
          wv[u][c] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int q = base + u * 32 + lane;
      if (q >= chunks) continue;
      const int64_t blk = q / per_block;
      float offset[CPW], scale[CPW];
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c) {
        const int64_t n = n0 + c < p.N ? n0 + c : p.N - 1;
        const float z = nbits_zero<T>(p, n, blk);
        offset[c] = kTypedZero ? z : 8388608.f + z;  // z, or 2^23 + z (exact for an integer z)
        scale[c] = to_compute(scales[n * p.k_blocks + blk]);
      }
      float dot[CPW][R];
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) dot[c][r] = 0.f;
      ONYX_UNROLL
      for (int s = 0; s < 4; ++s) {  // 8 values: one 32-bit word of each feature's piece
        float w[CPW][8];
        ONYX_UNROLL
        for (int c = 0; c < CPW; ++c) {
          const uint32_t word = s == 0 ? wv[u][c].x : s == 1 ? wv[u][c].y : s == 2 ? wv[u][c].z : wv[u][c].w;
          ONYX_UNROLL
          for (int i = 0; i < 8; ++i) {
            const float q = __uint_as_float(0x4B000000u | ((word >> (4 * i)) & 0xFu));  // 2^23 + q
            w[c][i] = kTypedZero ? (q - 8388608.f) - offset[c] : q - offset[c];
          }
        }
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) {
          if (r >= rows) continue;
          float x[8];
          pack_to_floats<T>(__ldg(reinterpret_cast<const uint4*>(A + r * p.K + q * 32 + s * 8)), x);
          ONYX_UNROLL
          for (int c = 0; c < CPW; ++c)
            ONYX_UNROLL
            for (int i = 0; i < 8; ++i) dot[c][r] = fmaf(x[i], w[c][i], dot[c][r]);
        }
      }
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) acc[c][r] = fmaf(scale[c], dot[c][r], acc[c][r]);
    }
  }
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r)
      ONYX_UNROLL
      for (int o = 16; o > 0; o >>= 1) acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      const int64_t n = n0 + c;
      if (lane != c * R + r || n >= p.N || r >= rows) continue;
      const float bias = p.bias ? to_compute(static_cast<const T*>(p.bias)[n]) : 0.f;
      static_cast<T*>(p.y)[r * p.N + n] = from_compute<T>(acc[c][r] + bias);
    }
}

// ---- 4 bits, up to 8 rows, on tensor cores ----
//
// The per-value float arithmetic above makes nbits4_gemv_kernel bound by instruction issue
// (0.6-1.4 TB/s of packed weights on an H200). Here the values are dequantized two at a time in
// 16-bit pairs and multiplied by mma.sync m16n8k16 (float accumulation): the 16 output features
// of a block are the MMA's rows, the (up to 8) rows of A its columns. A pair is made by one
// bit operation, (word >> 4j) & 0x000F000F | magic, which places nibbles j and j + 4 of a 32-bit
// word in the mantissas of two 16-bit numbers equal to magic + q (bf16: 128 + q, fp16: 1024 + q),
// then one subtraction of magic + z (exact: small integers) and one multiplication by the block's
// scale (the value's one rounding, as the 16-bit dequantized weights of the many-row path have).
// The order of k within the MMA's 16 does not matter to the sum as long as A's and B's fragments
// agree: thread t of a row group takes the 32 values [32t, 32t + 32) of a 128-value chunk (one
// quantization block, one 16-byte load per feature), pair (s, j) holding values 8s + j and
// 8s + j + 4; its activations are loaded as they lie and paired the same way with byte permutes.
// A block's W warps split K by chunks and add their partial sums through shared memory.
template <class T>
struct Nb4Magic;
template <>
struct Nb4Magic<__nv_bfloat16> {
  static constexpr uint32_t kBits = 0x43004300u;  // 128.0 in both halves
  static constexpr float kValue = 128.f;
};
template <>
struct Nb4Magic<__half> {
  static constexpr uint32_t kBits = 0x64006400u;  // 1024.0 in both halves
  static constexpr float kValue = 1024.f;
};

template <class T>
__device__ __forceinline__ uint32_t pair_bits(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// (m - z) * s on both halves, in T's 16-bit arithmetic.
template <class T>
__device__ __forceinline__ uint32_t pair_dequant(uint32_t m, uint32_t z, uint32_t s) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 r = __hmul2(__hsub2(*reinterpret_cast<const __nv_bfloat162*>(&m),
                                             *reinterpret_cast<const __nv_bfloat162*>(&z)),
                                     *reinterpret_cast<const __nv_bfloat162*>(&s));
    return *reinterpret_cast<const uint32_t*>(&r);
  } else {
    const __half2 r = __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&m), *reinterpret_cast<const __half2*>(&z)),
                              *reinterpret_cast<const __half2*>(&s));
    return *reinterpret_cast<const uint32_t*>(&r);
  }
}

constexpr int kNb4MmaFeatures = 16;

// x's 32 values [32t, 32t + 32) of a 128-value chunk (four 16-byte packs) as the MMA's B pairs:
// pack s gives values (8s, 8s + 4), (8s + 1, 8s + 5), (8s + 2, 8s + 6), (8s + 3, 8s + 7), the
// order in which nb4_mma_slice pairs the weights.
__device__ __forceinline__ void nb4_pair_x(const uint4 (&x)[4], uint32_t (&px)[4][4]) {
  ONYX_UNROLL
  for (int s = 0; s < 4; ++s) {
    px[s][0] = __byte_perm(x[s].x, x[s].z, 0x5410);
    px[s][1] = __byte_perm(x[s].x, x[s].z, 0x7632);
    px[s][2] = __byte_perm(x[s].y, x[s].w, 0x5410);
    px[s][3] = __byte_perm(x[s].y, x[s].w, 0x7632);
  }
}

// One thread's part of a 128-value chunk of K in the tensor-core form: wa and wb, 32 packed values
// of MMA rows g and g + 8 (one quantization block each), dequantized in pairs with their zero
// pairs za, zb (magic + z in both halves) and scale pairs sa, sb, times px, the same 32 values of
// x's row g paired by nb4_pair_x, into two chains of MMAs. A part with zero scales adds nothing.
// `magic` is Nb4Magic<T>::kBits from the kernel's arguments (NBitsArgs::magic): as a constant the
// compiler folds it into each (q & 0x000F000F) | magic, which then takes two instructions, not one.
template <class T>
__device__ __forceinline__ void nb4_mma_slice(float (&acc)[4], float (&acc2)[4], const uint4& wa, const uint4& wb,
                                              uint32_t za, uint32_t zb, uint32_t sa, uint32_t sb,
                                              const uint32_t (&px)[4][4], uint32_t magic) {
  ONYX_UNROLL
  for (int s = 0; s < 4; ++s) {
    const uint32_t qa = s == 0 ? wa.x : s == 1 ? wa.y : s == 2 ? wa.z : wa.w;
    const uint32_t qb = s == 0 ? wb.x : s == 1 ? wb.y : s == 2 ? wb.z : wb.w;
    uint32_t pa[4], pb[4];
    ONYX_UNROLL
    for (int j = 0; j < 4; ++j) {
      pa[j] = pair_dequant<T>(((qa >> (4 * j)) & 0x000F000Fu) | magic, za, sa);
      pb[j] = pair_dequant<T>(((qb >> (4 * j)) & 0x000F000Fu) | magic, zb, sb);
    }
    mma_16816<T>(acc, pa[0], pb[0], pa[1], pb[1], px[s][0], px[s][1]);
    mma_16816<T>(acc2, pa[2], pb[2], pa[3], pb[3], px[s][2], px[s][3]);
  }
}

// Where output column `col` of a row goes (constant indices into the arguments, which a run-time
// index would copy to local memory).
template <class T>
__device__ __forceinline__ T* nbits_output(const NBitsArgs& p, int64_t col, int64_t& start, int64_t& width) {
  if (p.splits == 1) {  // one output (MatMulNBits, a gated product's rows)
    start = 0;
    width = p.split_end[0];
    return static_cast<T*>(p.out[0]);
  }
  T* dst = nullptr;
  ONYX_UNROLL
  for (int s = 0; s < kNbitsMaxSplits; ++s) {
    const int64_t lo = s == 0 ? 0 : p.split_end[s - 1];
    if (s < p.splits && col >= lo && col < p.split_end[s]) {
      dst = static_cast<T*>(p.out[s]);
      start = lo;
      width = p.split_end[s] - lo;
    }
  }
  return dst;
}

// The block's rows of h = a + skip normalized into xs (rows x K of T): the sums of squares
// reduced across the block, then h scaled; block 0 writes h to p.sum. Where each row is at most
// one pack per thread (the streaming kernel at the decode shapes), every row's packs of a and
// skip are asked for at once and kept in registers for both passes (one round trip to L2 for all
// rows); otherwise two passes over h from L2, row by row. Thread r adds up row r's sums and shares
// 1 / rms (every thread adding up every row, with a division each, made the 16-bit kernel's norm
// cost 4-5 us a product whatever the rows).
template <class T>
__device__ void nbits_normalize_rows(const NBitsArgs& p, int rows, T* xs) {
  __shared__ float red[32][8];  // per warp (up to 32), per row (up to 8)
  __shared__ float inv_rms[8];
  const int packs = static_cast<int>(p.K / 8);  // 16-byte packs (K % 32 == 0)
  const uint4* a = static_cast<const uint4*>(p.a);
  const uint4* skip = static_cast<const uint4*>(p.skip);
  const uint4* gamma = static_cast<const uint4*>(p.gamma);
  const bool write_sum = p.sum && blockIdx.x == 0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto h_of = [&](uint4 av, uint4 sv, float* h) {
    pack_to_floats<T>(av, h);
    if (skip) {
      float sk[8];
      pack_to_floats<T>(sv, sk);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) h[i] += sk[i];
    }
  };
  auto pack_of = [&](const float* f) {
    uint4 v;
    T* t = reinterpret_cast<T*>(&v);
    ONYX_UNROLL
    for (int i = 0; i < 8; ++i) t[i] = from_compute<T>(f[i]);
    return v;
  };
  auto inverse_rms = [&](float (&sq)[8]) {
    ONYX_UNROLL
    for (int r = 0; r < 8; ++r) {
      if (r >= rows) break;
      ONYX_UNROLL
      for (int o = 16; o > 0; o >>= 1) sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], o);
      if (lane == 0) red[warp][r] = sq[r];
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows) {
      float total = 0.f;
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += red[w][threadIdx.x];
      inv_rms[threadIdx.x] = rsqrtf(total / static_cast<float>(p.K) + p.eps);
    }
    __syncthreads();
  };
  float sq[8];
  ONYX_UNROLL
  for (int r = 0; r < 8; ++r) sq[r] = 0.f;
  if (packs <= static_cast<int>(blockDim.x)) {
    const int pk = threadIdx.x;
    const bool mine = pk < packs;
    uint4 ar[8], sr[8], gv = make_uint4(0, 0, 0, 0);
    ONYX_UNROLL
    for (int r = 0; r < 8; ++r) {
      ar[r] = sr[r] = make_uint4(0, 0, 0, 0);
      const size_t pack = static_cast<size_t>(r) * packs + pk;
      if (mine && r < rows) ar[r] = a[pack];
      if (mine && r < rows && skip) sr[r] = skip[pack];
    }
    if (mine) gv = gamma[pk];
    ONYX_UNROLL
    for (int r = 0; r < 8; ++r) {
      if (r >= rows) break;
      float h[8];
      h_of(ar[r], sr[r], h);
      if (write_sum && mine) static_cast<uint4*>(p.sum)[static_cast<size_t>(r) * packs + pk] = pack_of(h);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) sq[r] = fmaf(h[i], h[i], sq[r]);
    }
    inverse_rms(sq);
    if (mine) {
      float g[8];
      pack_to_floats<T>(gv, g);
      ONYX_UNROLL
      for (int r = 0; r < 8; ++r) {
        if (r >= rows) break;
        const float inv = inv_rms[r];
        float h[8];
        h_of(ar[r], sr[r], h);
        ONYX_UNROLL
        for (int i = 0; i < 8; ++i) h[i] = h[i] * inv * g[i];
        reinterpret_cast<uint4*>(xs)[static_cast<size_t>(r) * packs + pk] = pack_of(h);
      }
    }
    __syncthreads();
    return;
  }
  ONYX_UNROLL
  for (int r = 0; r < 8; ++r) {
    if (r >= rows) break;
    for (int pk = threadIdx.x; pk < packs; pk += blockDim.x) {
      const size_t pack = static_cast<size_t>(r) * packs + pk;
      float h[8];
      h_of(a[pack], skip ? skip[pack] : make_uint4(0, 0, 0, 0), h);
      if (write_sum) static_cast<uint4*>(p.sum)[pack] = pack_of(h);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) sq[r] = fmaf(h[i], h[i], sq[r]);
    }
  }
  inverse_rms(sq);
  ONYX_UNROLL
  for (int r = 0; r < 8; ++r) {
    if (r >= rows) break;
    const float inv = inv_rms[r];
    for (int pk = threadIdx.x; pk < packs; pk += blockDim.x) {
      const size_t pack = static_cast<size_t>(r) * packs + pk;
      float h[8], g[8];
      h_of(a[pack], skip ? skip[pack] : make_uint4(0, 0, 0, 0), h);
      pack_to_floats<T>(gamma[pk], g);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) h[i] = h[i] * inv * g[i];
      reinterpret_cast<uint4*>(xs)[pack] = pack_of(h);
    }
  }
  __syncthreads();
}

// G (gated): a block's 16 MMA rows are 8 gate rows and the 8 up rows of the same outputs, so
// each thread holds an output's gate and up sums and gates them in registers. kNorm: A's rows
// normalized into shared memory first (RmsNormLinearNBits).
template <class T, int W, int U, bool G, bool kNorm>
__global__ void __launch_bounds__(W * 32) nbits4_mma_kernel(NBitsArgs p) {
  __shared__ float partial[W > 1 ? W - 1 : 1][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t F = p.N / 2;  // G: outputs
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (G ? kNb4MmaFeatures / 2 : kNb4MmaFeatures);
  const int64_t row_bytes = p.k_blocks * p.block / 2;
  // Weight row of MMA row i (0..15), and whether it holds an output (else a repeat, never written).
  auto weight_row = [&](int i, bool& live) -> int64_t {
    if constexpr (G) {
      const int64_t j = n0 + (i & 7);
      live = j < F;
      return (i >= 8 ? F : 0) + (live ? j : F - 1);
    } else {
      live = n0 + i < p.N;
      return live ? n0 + i : p.N - 1;
    }
  };
  bool live_a, live_b;
  const int64_t na = weight_row(g, live_a), nb = weight_row(g + 8, live_b);
  const uint8_t* row_a = p.b + na * row_bytes;
  const uint8_t* row_b = p.b + nb * row_bytes;
  if (warp == 0 && lane < kNb4MmaFeatures) {
    bool live;
    const int64_t r = weight_row(lane, live);
    if (live) prefetch_l2(p.b + r * row_bytes, static_cast<uint32_t>(p.K / 2));
  }
  wait_for_prior_grids();
  allow_dependent_grids();
  const int chunks = static_cast<int>((p.K + 127) / 128);
  const int rows = static_cast<int>(p.M);
  extern __shared__ uint4 normed_rows[];  // kNorm: [rows][K] of T
  if constexpr (kNorm) nbits_normalize_rows<T>(p, rows, reinterpret_cast<T*>(normed_rows));
  const T* A = kNorm ? reinterpret_cast<const T*>(normed_rows) : static_cast<const T*>(p.a);
  const T* scales = static_cast<const T*>(p.scales);
  float acc[4] = {0.f, 0.f, 0.f, 0.f}, acc2[4] = {0.f, 0.f, 0.f, 0.f};  // two chains of MMAs
  for (int base = warp; base < chunks; base += W * U) {
    uint4 wa[U], wb[U];
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int64_t k0 = static_cast<int64_t>(base + u * W) * 128 + 32 * t;
      if (base + u * W < chunks && k0 < p.K) {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(wa[u].x), "=r"(wa[u].y), "=r"(wa[u].z), "=r"(wa[u].w)
            : "l"(row_a + k0 / 2));
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(wb[u].x), "=r"(wb[u].y), "=r"(wb[u].z), "=r"(wb[u].w)
            : "l"(row_b + k0 / 2));
      } else {
        wa[u] = wb[u] = make_uint4(0, 0, 0, 0);
      }
    }
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int c = base + u * W;
      const int64_t k0 = static_cast<int64_t>(c) * 128 + 32 * t;
      const bool live = c < chunks && k0 < p.K;  // else this thread's part of the MMA is zeros
      uint32_t za = 0, zb = 0, sa = 0, sb = 0;
      if (live) {
        const int64_t blk = k0 / p.block;
        za = pair_bits<T>(Nb4Magic<T>::kValue + nbits_zero<T>(p, na, blk), Nb4Magic<T>::kValue + nbits_zero<T>(p, na, blk));
        zb = pair_bits<T>(Nb4Magic<T>::kValue + nbits_zero<T>(p, nb, blk), Nb4Magic<T>::kValue + nbits_zero<T>(p, nb, blk));
        const uint16_t s16a = reinterpret_cast<const uint16_t*>(scales)[na * p.k_blocks + blk];
        const uint16_t s16b = reinterpret_cast<const uint16_t*>(scales)[nb * p.k_blocks + blk];
        sa = s16a | (static_cast<uint32_t>(s16a) << 16);
        sb = s16b | (static_cast<uint32_t>(s16b) << 16);
      }
      uint4 x[4] = {};
      if (live && g < rows) {
        const uint4* xr = reinterpret_cast<const uint4*>(A + g * p.K + k0);
        ONYX_UNROLL
        for (int s = 0; s < 4; ++s) x[s] = kNorm ? xr[s] : __ldg(xr + s);
      }
      uint32_t px[4][4];
      nb4_pair_x(x, px);
      nb4_mma_slice<T>(acc, acc2, wa[u], wb[u], za, zb, sa, sb, px, p.magic);
    }
  }
  ONYX_UNROLL
  for (int i = 0; i < 4; ++i) acc[i] += acc2[i];
  if constexpr (W > 1) {
    if (warp > 0)
      ONYX_UNROLL
      for (int i = 0; i < 4; ++i) partial[warp - 1][lane][i] = acc[i];
    __syncthreads();
    if (warp > 0) return;
    for (int w = 0; w < W - 1; ++w)
      ONYX_UNROLL
      for (int i = 0; i < 4; ++i) acc[i] += partial[w][lane][i];
  }
  // acc: MMA rows g (0, 1) and g + 8 (2, 3), rows of A 2t and 2t + 1.
  if constexpr (G) {
    if (!live_a) return;
    ONYX_UNROLL
    for (int i = 0; i < 2; ++i) {
      const int r = 2 * t + i;
      if (r >= rows) continue;
      const float gate = acc[i];
      static_cast<T*>(p.out[0])[r * F + n0 + g] = from_compute<T>(gated_value(gate, acc[i + 2], p.act));
    }
  } else {
    ONYX_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int64_t n = n0 + g + (i >= 2 ? 8 : 0);
      const int r = 2 * t + (i & 1);
      if (n >= p.N || r >= rows) continue;
      const float bias = p.bias ? to_compute(static_cast<const T*>(p.bias)[n]) : 0.f;
      int64_t start = 0, width = 0;
      T* dst = nbits_output<T>(p, n, start, width);
      dst[r * width + (n - start)] = from_compute<T>(acc[i] + bias);
    }
  }
}

// Whether the 4-bit kernel takes this product: 16-bit A aligned to 16 bytes, K and the block a
// multiple of 32 (a 16-byte piece of a row lies in one block), at most 8 rows.
bool nbits4_fits(const NBitsArgs& p, DType a_dtype) {
  return p.bits == 4 && p.M >= 1 && p.M <= 8 && p.K % 32 == 0 && p.block % 32 == 0 &&
         (a_dtype == DType::kBFloat16 || a_dtype == DType::kFloat16) && is_aligned(p.a, 16) && is_aligned(p.b, 16) &&
         p.K / 32 <= (int64_t{1} << 30);
}

template <class T, int R, int CPW, int U>
void launch_nbits4(const NBitsArgs& p, CudaContext& cu) {
  const int64_t per_block = kNb4Warps * CPW;
  const unsigned blocks = static_cast<unsigned>((p.N + per_block - 1) / per_block);
  if (p.zp && !p.zp_packed)
    launch_kernel(nbits4_gemv_kernel<T, R, CPW, U, true>, blocks, kNb4Warps * 32, 0, cu, p);
  else
    launch_kernel(nbits4_gemv_kernel<T, R, CPW, U, false>, blocks, kNb4Warps * 32, 0, cu, p);
}

// The normalized rows of RmsNormLinearNBits sit in shared memory: 32 KiB at most (K = 2048 at 8
// rows), so that with the kernel's static shared memory a block stays within the 48 KiB it gets
// without asking. Every block normalizes the rows it multiplies (two passes over them from L2):
// at one row that costs less than a kernel of its own (the 1.24B Llama's 4-bit decode step went
// from 1.04x to 0.99x bf16's on an H200), at 8 rows of K = 2048 the gated product's 1024 blocks
// read 64 MiB for it (the step went from 0.84x to 1.03x bf16's). So past kNbitsNormInKernelRows
// rows the rows are normalized once, by a kernel of their own into the workspace (as prompts are).
constexpr size_t kNbitsNormSmem = 32 * 1024;
constexpr int64_t kNbitsNormInKernelRows = 2;

template <class T, int W, int U>
void launch_nbits4_mma(const NBitsArgs& p, CudaContext& cu) {
  const int64_t per_block = p.gated ? kNb4MmaFeatures / 2 : kNb4MmaFeatures;
  const int64_t outputs = p.gated ? p.N / 2 : p.N;
  const unsigned blocks = static_cast<unsigned>((outputs + per_block - 1) / per_block);
  const size_t smem = p.gamma ? static_cast<size_t>(p.M * p.K) * sizeof(T) : 0;
  if (p.gamma) {
    if (p.gated) launch_kernel(nbits4_mma_kernel<T, W, U, true, true>, blocks, W * 32, smem, cu, p);
    else launch_kernel(nbits4_mma_kernel<T, W, U, false, true>, blocks, W * 32, smem, cu, p);
  } else {
    if (p.gated) launch_kernel(nbits4_mma_kernel<T, W, U, true, false>, blocks, W * 32, 0, cu, p);
    else launch_kernel(nbits4_mma_kernel<T, W, U, false, false>, blocks, W * 32, 0, cu, p);
  }
}

// The tensor-core kernel's shape for a product, by bench/cuda_bench.cpp's 4-bit table (H200):
// where the blocks fit the SMs in one wave and K is long (the down product, K = 8192) 16 warps
// per block, K split 16 ways (0.9-1.0 TB/s against 0.7-0.9 with 8); where they are fewer than
// two per SM (a layer's Q, K, V and its o product) 8 warps (0.55-0.75 TB/s against 0.45-0.67
// with 4; 16 warps take two waves there); else (gate and up, the LM head) 4 warps, 1.1-1.9 TB/s.
template <class T>
void run_nbits4_mma(NBitsArgs p, CudaContext& cu) {
  p.magic = Nb4Magic<T>::kBits;
  switch (nbits4_variant_for_bench) {
    case 3: launch_nbits4_mma<T, 4, 4>(p, cu); return;
    case 4: launch_nbits4_mma<T, 8, 2>(p, cu); return;
    case 6: launch_nbits4_mma<T, 4, 2>(p, cu); return;
    case 7: launch_nbits4_mma<T, 16, 2>(p, cu); return;
    default: break;
  }
  const int64_t blocks = (p.gated ? p.N / 2 : p.N) / (p.gated ? kNb4MmaFeatures / 2 : kNb4MmaFeatures);
  const int sms = sm_count(cu.device);
  if (blocks <= sms && p.K >= 32 * 128) launch_nbits4_mma<T, 16, 2>(p, cu);
  else if (blocks < 2 * sms) launch_nbits4_mma<T, 8, 2>(p, cu);
  else launch_nbits4_mma<T, 4, 2>(p, cu);
}

// ---- 4 bits, up to 8 rows: the streaming kernel ----
//
// The tensor-core kernel above reads its weights with loads of its own (a few KiB in flight per
// block) and is short of blocks on the small products. Here, as in linear.cu's streaming kernel
// of 16-bit weights, each block (one per SM, 16 warps) takes tiles of weight rows in turn and the
// bulk-copy engine brings their packed rows and scales into shared memory, as many stages ahead
// as shared memory holds, the first ones asked for before the kernel waits on the kernel before
// it. A tile is RB row-blocks of 16 rows (the MMA's rows; gated: its gate rows, then its up rows)
// and a stage a chunk of each row: RB = 2 where there are tiles enough for every SM (the LM head,
// gate/up: a tile of K = 2,048 is 36 KiB with block 32's scales), else 1 (the layer's other
// products, where half as many tiles would leave SMs idle). The warps of a row-block split the
// chunk's 128-value groups, two each, and hold x's part for them in registers, paired for the MMA
// (loaded once where K is one chunk; four groups a warp spill registers). When a tile's last
// chunk is done, the warps' sums meet in shared memory and its outputs (cut into the outputs,
// gated, biased) are written.
// Item counters advance by addition: no division on the way.
// Takes (nbits4_stream_fits): K a multiple of 128 and of the block, blocks of 32 to 1,024 values,
// a multiple of 8 blocks a row and a chunk (whole 16-byte runs of scales in every copy), no zero
// points or packed ones, at most 8 rows (normalized ones within kNbitsNormSmem).
constexpr int kNb4StreamWarps = 16;
constexpr int kNb4XGroups = 2;  // 128-value groups of x a warp holds (16 registers each)
constexpr int kNb4MaxStages = 16;
constexpr size_t kNb4StreamSmem = 227 * 1024;  // a Hopper block's shared memory

struct Nb4Stream {
  int chunks;        // of K
  int chunk_values;  // of a row per stage (the last chunk may be shorter)
  int chunk_bytes;   // the row pitch of a stage's packed values
  int chunk_scales;  // the row pitch of its scales
  int stage_bytes;
  int stages;
};

template <class T, int G, bool kNorm, int RB>
__global__ void __launch_bounds__(kNb4StreamWarps * 32, 1) nbits4_stream_kernel(NBitsArgs p, Nb4Stream s) {
  constexpr int kRows = kNb4MmaFeatures * RB;          // weight rows per tile
  constexpr int kOuts = kRows / G;                     // outputs per tile
  constexpr int kSplit = kNb4StreamWarps / RB;         // warps splitting a row-block's chunk
  extern __shared__ __align__(128) unsigned char nb4_smem[];
  __shared__ uint64_t full[kNb4MaxStages];
  __shared__ float4 partial[kNb4StreamWarps][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int rb = warp % RB, wk = warp / RB;  // this warp's row-block, its place among the warps splitting it
  const int bid = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
  const int64_t outputs = G == 2 ? p.N / 2 : p.N;
  const int tiles = static_cast<int>((outputs + kOuts - 1) / kOuts);
  const int items = (bid < tiles ? (tiles - 1 - bid) / grid + 1 : 0) * s.chunks;
  const int shift = __ffs(static_cast<int>(p.block)) - 1;  // the block is a power of two
  const int64_t row_bytes = p.K / 2;
  const uint16_t* scales = static_cast<const uint16_t*>(p.scales);
  // Weight row of stage row r of a tile; a dead row (past the outputs) the last output's, whose
  // sums are never written.
  auto weight_row = [&](int tile, int r) -> int64_t {
    int64_t j = static_cast<int64_t>(tile) * kOuts + (r % kOuts);
    if (j >= outputs) j = outputs - 1;
    return G == 2 && r >= kOuts ? outputs + j : j;
  };
  // The next item to ask for (warp 0): its tile, chunk and stage. A tile of whole rows comes as
  // one copy of packed rows and one of scales per run of adjacent rows (gated: the gate rows,
  // then the up rows); a chunk of a row as one of each per row.
  int q_tile = bid, q_chunk = 0, q_stage = 0;
  auto issue_next = [&]() {
    const int first = q_chunk * s.chunk_values;
    const int values = min(s.chunk_values, static_cast<int>(p.K) - first);
    const uint32_t packed = static_cast<uint32_t>(values / 2), sbytes = static_cast<uint32_t>((values >> shift) * 2);
    unsigned char* stage = nb4_smem + q_stage * s.stage_bytes;
    unsigned char* stage_scales = stage + kRows * s.chunk_bytes;
    const int64_t left = outputs - static_cast<int64_t>(q_tile) * kOuts;
    const int valid = static_cast<int>(left < kOuts ? left : kOuts);
    uint64_t* bar = &full[q_stage];
    if (lane == 0) barrier_expect(bar, static_cast<uint32_t>(G * valid) * (packed + sbytes));
    __syncwarp();
    if (s.chunks == 1) {
      if (lane < G) {
        const int64_t n = weight_row(q_tile, lane * kOuts);
        bulk_copy(stage + lane * kOuts * s.chunk_bytes, p.b + n * row_bytes, static_cast<uint32_t>(valid) * packed, bar);
        bulk_copy(stage_scales + lane * kOuts * s.chunk_scales * 2, scales + n * p.k_blocks,
                  static_cast<uint32_t>(valid) * sbytes, bar);
      }
    } else {
      for (int r = lane; r < kRows; r += 32) {
        if (r % kOuts >= valid) continue;
        const int64_t n = weight_row(q_tile, r);
        bulk_copy(stage + r * s.chunk_bytes, p.b + n * row_bytes + first / 2, packed, bar);
        bulk_copy(stage_scales + r * s.chunk_scales * 2, scales + n * p.k_blocks + (first >> shift), sbytes, bar);
      }
    }
    if (++q_chunk == s.chunks) {
      q_chunk = 0;
      q_tile += grid;
    }
    if (++q_stage == s.stages) q_stage = 0;
  };
  if (threadIdx.x == 0) {
    for (int st = 0; st < s.stages; ++st) barrier_init(&full[st]);
    fence_barrier_init();
  }
  __syncthreads();
  // The weights do not depend on the kernels before this one: start them now.
  if (warp == 0)
    for (int i = 0; i < s.stages - 1 && i < items; ++i) issue_next();
  wait_for_prior_grids();
  allow_dependent_grids();
  const int rows = static_cast<int>(p.M < 8 ? p.M : 8);
  T* xs = reinterpret_cast<T*>(nb4_smem + s.stages * s.stage_bytes);  // kNorm: [rows][K]
  if constexpr (kNorm) nbits_normalize_rows<T>(p, rows, xs);
  const T* A = kNorm ? xs : static_cast<const T*>(p.a);
  const uint32_t no_zero = pair_bits<T>(Nb4Magic<T>::kValue + 8.f, Nb4Magic<T>::kValue + 8.f);
  auto zero_pair = [&](int64_t n, int blk) {
    const uint8_t byte = static_cast<const uint8_t*>(p.zp)[n * p.zp_row + (blk >> 1)];
    const float z = Nb4Magic<T>::kValue + static_cast<float>((byte >> ((blk & 1) * 4)) & 15);
    return pair_bits<T>(z, z);
  };
  // This thread's rows of a stage: MMA rows g and g + 8 of its row-block.
  const int ra = rb * kNb4MmaFeatures + g, rbb = ra + 8;
  uint32_t px[kNb4XGroups][4][4];  // x's row g for this warp's groups of the chunk, paired
  float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};  // two chains of MMAs
  int tile = bid, chunk = 0, stage_at = 0;
  uint32_t phase = 0;
  for (int i = 0; i < items; ++i) {
    if (warp == 0 && i + s.stages - 1 < items) {
      fence_before_refill();  // the stage's reads before its refill
      issue_next();
    }
    const int first = chunk * s.chunk_values;
    const int groups = min(s.chunk_values, static_cast<int>(p.K) - first) / 128;
    if (i == 0 || s.chunks > 1) {  // x's part for the chunk, asked for before the wait
      ONYX_UNROLL
      for (int st = 0; st < kNb4XGroups; ++st) {
        const int group = wk + st * kSplit;
        uint4 x[4] = {};
        if (group < groups && g < rows) {
          const uint4* xr = reinterpret_cast<const uint4*>(A + g * p.K + first + group * 128 + 32 * t);
          ONYX_UNROLL
          for (int q = 0; q < 4; ++q) x[q] = kNorm ? xr[q] : __ldg(xr + q);
        }
        nb4_pair_x(x, px[st]);
      }
    }
    int64_t na = 0, nb = 0;
    if (p.zp) {
      na = weight_row(tile, ra);
      nb = weight_row(tile, rbb);
    }
    barrier_wait(&full[stage_at], phase);
    const unsigned char* stage = nb4_smem + stage_at * s.stage_bytes;
    const unsigned char* wa_at = stage + ra * s.chunk_bytes + 16 * t;
    const unsigned char* wb_at = stage + rbb * s.chunk_bytes + 16 * t;
    const uint16_t* sa_at = reinterpret_cast<const uint16_t*>(stage + kRows * s.chunk_bytes) + ra * s.chunk_scales;
    const uint16_t* sb_at = sa_at + 8 * s.chunk_scales;
    ONYX_UNROLL
    for (int st = 0; st < kNb4XGroups; ++st) {
      const int group = wk + st * kSplit;
      if (group >= groups) break;
      const uint4 wa = *reinterpret_cast<const uint4*>(wa_at + group * 64);
      const uint4 wb = *reinterpret_cast<const uint4*>(wb_at + group * 64);
      const int blk = (group * 128 + 32 * t) >> shift;
      const uint32_t s16a = sa_at[blk], s16b = sb_at[blk];
      uint32_t za = no_zero, zb = no_zero;
      if (p.zp) {
        za = zero_pair(na, (first >> shift) + blk);
        zb = zero_pair(nb, (first >> shift) + blk);
      }
      nb4_mma_slice<T>(c0, c1, wa, wb, za, zb, s16a | (s16a << 16), s16b | (s16b << 16), px[st], p.magic);
    }
    __syncthreads();  // every warp is done with the stage (before its refill) and with `partial`
    if (chunk == s.chunks - 1) {
      partial[warp][lane] = make_float4(c0[0] + c1[0], c0[1] + c1[1], c0[2] + c1[2], c0[3] + c1[3]);
      ONYX_UNROLL
      for (int e = 0; e < 4; ++e) c0[e] = c1[e] = 0.f;
      __syncthreads();
      // Thread (j, r): output j of the tile for x's row r (gated: stage rows j and kOuts + j).
      // Stage row sr is MMA row f = sr % 16 of row-block sr / 16, whose column r sits in lane
      // (f % 8) * 4 + r / 2, element (f >= 8 ? 2 : 0) + r % 2, of the warps w with w % RB == sr / 16.
      if (static_cast<int>(threadIdx.x) < kOuts * 8) {
        const int j = threadIdx.x / 8, r = threadIdx.x % 8;
        const int64_t col = static_cast<int64_t>(tile) * kOuts + j;
        auto total = [&](int sr) {
          const float* part = reinterpret_cast<const float*>(partial);
          const int f = sr % kNb4MmaFeatures, e = ((f & 7) * 4 + (r >> 1)) * 4 + (f >= 8 ? 2 : 0) + (r & 1);
          float v = 0.f;
          ONYX_UNROLL
          for (int w = 0; w < kSplit; ++w) v += part[(w * RB + sr / kNb4MmaFeatures) * 128 + e];
          return v;
        };
        if (col < outputs && r < rows) {
          float v = total(j);
          if constexpr (G == 2) {
            v = gated_value(v, total(j + kOuts), p.act);
            static_cast<T*>(p.out[0])[r * outputs + col] = from_compute<T>(v);
          } else {
            if (p.bias) v += to_compute(static_cast<const T*>(p.bias)[col]);
            int64_t start = 0, width = 0;
            T* dst = nbits_output<T>(p, col, start, width);
            dst[r * width + (col - start)] = from_compute<T>(v);
          }
        }
      }
      // The next write of `partial` follows the next item's barrier, which these threads reach
      // only after their reads.
      chunk = 0;
      tile += grid;
    } else {
      ++chunk;
    }
    if (++stage_at == s.stages) {
      stage_at = 0;
      phase ^= 1;
    }
  }
}

// A stage's chunk of a row, in values, for tiles of RB row-blocks: what the warps' registers hold.
int64_t nb4_chunk_values(const NBitsArgs& p, int rb) {
  return std::min<int64_t>(128 * kNb4XGroups * (kNb4StreamWarps / rb), p.K);
}

// Whether the streaming kernel with tiles of RB row-blocks takes a product nbits4_fits takes (the
// comment above): every copy of scales whole 16-byte runs, for every chunk (a copy of another size
// would never complete its stage).
bool nbits4_stream_fits(const NBitsArgs& p, int rb) {
  const int64_t chunk = nb4_chunk_values(p, rb);
  return p.K % 128 == 0 && p.K % p.block == 0 && p.block >= 32 && p.block <= 1024 && p.k_blocks % 8 == 0 &&
         (chunk == p.K || (chunk % p.block == 0 && (chunk / p.block) % 8 == 0)) && p.K < (int64_t{1} << 30) &&
         is_aligned(p.scales, 16) && (!p.zp || p.zp_packed) &&
         (!p.gamma || static_cast<size_t>(p.M * p.K) * 2 <= kNbitsNormSmem);
}

bool nbits4_stream_fits(const NBitsArgs& p) { return nbits4_stream_fits(p, 1); }

template <class T, int G, bool kNorm, int RB>
void launch_nbits4_stream(const NBitsArgs& p, CudaContext& cu) {
  auto kernel = nbits4_stream_kernel<T, G, kNorm, RB>;
  // The static part (barriers, the warps' sums, the norm's) comes out of the same 227 KiB.
  static size_t dynamic[64] = {};
  static std::once_flag once[64];
  std::call_once(once[cu.device & 63], [&] {
    cudaFuncAttributes attr{};
    ONYX_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    const size_t d = (kNb4StreamSmem - attr.sharedSizeBytes) & ~size_t{127};
    ONYX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(d)));
    dynamic[cu.device & 63] = d;
  });
  constexpr int kRows = kNb4MmaFeatures * RB;
  Nb4Stream s{};
  s.chunk_values = static_cast<int>(nb4_chunk_values(p, RB));
  s.chunks = static_cast<int>((p.K + s.chunk_values - 1) / s.chunk_values);
  s.chunk_bytes = s.chunk_values / 2;
  s.chunk_scales = static_cast<int>(s.chunk_values / p.block);
  s.stage_bytes = (kRows * (s.chunk_bytes + s.chunk_scales * 2) + 127) & ~127;
  const size_t x_bytes = kNorm ? static_cast<size_t>(p.M * p.K) * sizeof(T) : 0;
  s.stages = static_cast<int>(std::min<size_t>(kNb4MaxStages, (dynamic[cu.device & 63] - x_bytes) / s.stage_bytes));
  const int64_t outputs = p.gated ? p.N / 2 : p.N;
  const int64_t tiles = (outputs + kRows / G - 1) / (kRows / G);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, sm_count(cu.device)));
  launch_kernel(kernel, dim3(blocks), dim3(kNb4StreamWarps * 32), s.stages * s.stage_bytes + x_bytes, cu, p, s);
}

template <class T, int RB>
void run_nbits4_stream_rb(const NBitsArgs& p, CudaContext& cu) {
  if (p.gamma) {
    if (p.gated) launch_nbits4_stream<T, 2, true, RB>(p, cu);
    else launch_nbits4_stream<T, 1, true, RB>(p, cu);
  } else {
    if (p.gated) launch_nbits4_stream<T, 2, false, RB>(p, cu);
    else launch_nbits4_stream<T, 1, false, RB>(p, cu);
  }
}

// Tiles of 2 row-blocks where there are as many as SMs (nbits4_variant_for_bench 9 and 10: 1 and
// 2 row-blocks whatever the product).
template <class T>
void run_nbits4_stream(NBitsArgs p, CudaContext& cu) {
  p.magic = Nb4Magic<T>::kBits;
  const int64_t outputs = p.gated ? p.N / 2 : p.N;
  const int64_t wide_tiles = (outputs + 2 * kNb4MmaFeatures / (p.gated ? 2 : 1) - 1) / (2 * kNb4MmaFeatures / (p.gated ? 2 : 1));
  const bool wide = nbits4_stream_fits(p, 2) && (nbits4_variant_for_bench == 10 ||
                                                 (nbits4_variant_for_bench != 9 && wide_tiles >= sm_count(cu.device)));
  if (wide) run_nbits4_stream_rb<T, 2>(p, cu);
  else run_nbits4_stream_rb<T, 1>(p, cu);
}

}  // namespace
}  // namespace onyx::cuda
