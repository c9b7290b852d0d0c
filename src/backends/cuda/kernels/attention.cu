// ONNX Attention (opset 23) on CUDA, the op the attention fusion makes (passes/fuse_patterns.h)
// and the semantics of the CPU kernel (ops/attention.cpp): 4-D Q [B, Hq, L, D], K and V
// [B, Hkv, S, D] with Hq a multiple of Hkv (query head h reads KV head h / (Hq / Hkv)), an
// optional mask (bool, or additive in Q's type) broadcast right-aligned onto [B, Hq, L, mask_len]
// with the columns past mask_len masked; no past, one output. Two paths:
//
// - Few query rows per KV head (decode, short chunks): one kernel. A block takes up to 16 rows,
//   a row being (query head of the group, position), so a group's query heads share each K/V
//   tile, loaded once into shared memory in 16-byte loads; each warp takes rows, a lane a key
//   for the scores and a feature for the values, with an online softmax in float. When the grid
//   would not fill the GPU, the keys split across the blocks of a cluster (up to 16), whose first
//   block merges the others' partial (max, sum, values) per row from their shared memory.
// - 128 or more rows per KV head (prompts): strided-batched cuBLASLt products over each KV
//   head's query group, with a softmax by row between them.
#include <cooperative_groups.h>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/rotary_cache.h"

namespace onyx::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kAttnWarps = 4;
constexpr int kAttnKeys = 32;  // keys per shared-memory tile
constexpr int kAttnMaxHead = 256;

// The rotary-cache part of the fused decode kernel (onyx::RotaryCacheAttention): q is rotated as
// it is loaded, and the new keys (rotated) and values are written into the caches, which are K
// and V, at the index, by the block whose keys they fall among.
struct AttnRope {
  const void* k_new = nullptr;  // [B, Hkv, S_new, D]
  const void* v_new = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  void* q_rot = nullptr;           // the rotated q, written by the first block of each cluster
  const int64_t* index = nullptr;  // null: no rotary part
  int per_row = 0;                 // the index holds one position per batch row
  int64_t S_new = 0;
  RopeRows qr, kr;
  unsigned int* err = nullptr;
};

struct AttnArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;  // null: none
  int mask_bool;
  int64_t mstride[4];  // element strides of the mask along (b, h, l, j); 0 where broadcast
  int64_t mask_len;
  int mask_shared;  // the mask broadcasts over heads and query positions (mstride[1] = mstride[2] = 0)
  void* y;
  int64_t B, Hq, Hkv, L, S, D, G, R;  // R = G * L rows per (b, KV head)
  int rows_per_warp, tiles, splits;
  int vec8;  // D % 8 == 0 and K, V 16-byte aligned: K and V tiles load 8 features at a time
  int64_t chunk;  // keys per split
  int prefetch;   // the decode kernel asks L2 for its first keys before it waits on the kernel before it
  float scale;
  AttnRope rope;  // the decode kernel with ROPE only
};

// Eight consecutive values as float, in 16-byte loads (p 16-byte aligned).
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void load8(const __half* p, float (&f)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&v);
  ONYX_UNROLL
  for (int i = 0; i < 4; ++i) {
    const float2 q = __half22float2(h[i]);
    f[2 * i] = q.x, f[2 * i + 1] = q.y;
  }
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
  ONYX_UNROLL
  for (int i = 0; i < 4; ++i) {
    const float2 q = __bfloat1622float2(h[i]);
    f[2 * i] = q.x, f[2 * i + 1] = q.y;
  }
}

template <class T, int PER_LANE, int RPW>
__global__ void __launch_bounds__(kAttnWarps * 32) attn_kernel(AttnArgs a) {
  ONYX_KERNEL_PROLOGUE();
  extern __shared__ float sm[];
  const int64_t D = a.D;
  constexpr int rows_block = kAttnWarps * RPW;
  float* qs = sm;                                  // [rows_block][D]
  float* ks = qs + rows_block * D;                 // [kAttnKeys][D + 1]
  float* vs = ks + kAttnKeys * (D + 1);            // [kAttnKeys][D]
  const int tile = blockIdx.x / a.splits, split = blockIdx.x % a.splits;
  const int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r0 = static_cast<int64_t>(tile) * rows_block;
  const T* qp = static_cast<const T*>(a.q);
  const T* kp = static_cast<const T*>(a.k) + (b * a.Hkv + kvh) * a.S * D;
  const T* vp = static_cast<const T*>(a.v) + (b * a.Hkv + kvh) * a.S * D;
  const int Di = static_cast<int>(D);  // 32-bit index arithmetic below: 64-bit division is slow
  // Query rows of this block, scaled: row r is query head kvh * G + r / L at position r % L.
  for (int e = threadIdx.x; e < rows_block * Di; e += blockDim.x) {
    const int rr = e / Di, d = e - rr * Di;
    const int64_t r = r0 + rr;
    float x = 0.f;
    if (r < a.R) {
      const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
      x = to_compute(qp[((b * a.Hq + h) * a.L + l) * D + d]) * a.scale;
    }
    qs[e] = x;
  }
  const int64_t lo = split * a.chunk, hi = min(a.S, lo + a.chunk);
  float m[RPW], lsum[RPW], acc[RPW][PER_LANE];
  ONYX_UNROLL
  for (int i = 0; i < RPW; ++i) {
    m[i] = -INFINITY;
    lsum[i] = 0.f;
    ONYX_UNROLL
    for (int c = 0; c < PER_LANE; ++c) acc[i][c] = 0.f;
  }
  for (int64_t t0 = lo; t0 < hi; t0 += kAttnKeys) {
    __syncthreads();
    if (a.vec8) {  // 16-byte loads: 8 features of a key at a time
      const int dv = Di / 8;
      for (int e = threadIdx.x; e < kAttnKeys * dv; e += blockDim.x) {
        const int j = e / dv, c = (e - j * dv) * 8;
        const int64_t key = t0 + j;
        float kf[8], vf[8];
        if (key < hi) {
          load8(kp + key * D + c, kf);
          load8(vp + key * D + c, vf);
        } else {
          ONYX_UNROLL
          for (int u = 0; u < 8; ++u) kf[u] = vf[u] = 0.f;
        }
        ONYX_UNROLL
        for (int u = 0; u < 8; ++u) {
          ks[j * (Di + 1) + c + u] = kf[u];
          vs[j * Di + c + u] = vf[u];
        }
      }
    } else {
      for (int e = threadIdx.x; e < kAttnKeys * Di; e += blockDim.x) {
        const int j = e / Di, d = e - j * Di;
        const int64_t key = t0 + j;
        const bool in = key < hi;
        ks[j * (Di + 1) + d] = in ? to_compute(kp[key * D + d]) : 0.f;
        vs[j * Di + d] = in ? to_compute(vp[key * D + d]) : 0.f;
      }
    }
    __syncthreads();
    const int64_t key = t0 + lane;
    ONYX_UNROLL
    for (int i = 0; i < RPW; ++i) {
      const int64_t rl = warp * RPW + i, r = r0 + rl;
      if (r >= a.R) break;
      float s = -INFINITY;
      if (key < hi) {
        const float* qr = qs + rl * D;
        const float* kr = ks + lane * (D + 1);
        float dot = 0.f;
#pragma unroll 8
        for (int d = 0; d < static_cast<int>(D); ++d) dot += qr[d] * kr[d];
        s = dot;
        if (a.mask || key >= a.mask_len) {
          if (key >= a.mask_len) {
            s = -INFINITY;
          } else {
            const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
            const int64_t mi = b * a.mstride[0] + h * a.mstride[1] + l * a.mstride[2] + key * a.mstride[3];
            if (a.mask_bool) s = static_cast<const bool*>(a.mask)[mi] ? s : -INFINITY;
            else s += to_compute(static_cast<const T*>(a.mask)[mi]);
          }
        }
      }
      const float mt = warp_reduce(s, [](float x, float y) { return fmaxf(x, y); });
      const float mn = fmaxf(m[i], mt);
      if (mn == -INFINITY) continue;  // every key so far masked
      const float p = s == -INFINITY ? 0.f : __expf(s - mn);
      const float corr = m[i] == -INFINITY ? 0.f : __expf(m[i] - mn);
      lsum[i] = lsum[i] * corr + warp_reduce(p, [](float x, float y) { return x + y; });
      ONYX_UNROLL
      for (int c = 0; c < PER_LANE; ++c) acc[i][c] *= corr;
      for (int jj = 0; jj < kAttnKeys; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        const float* vr = vs + jj * D;
        ONYX_UNROLL
        for (int c = 0; c < PER_LANE; ++c) {
          const int64_t d = lane + 32 * c;
          if (d < D) acc[i][c] += pj * vr[d];
        }
      }
      m[i] = mn;
    }
  }
  ONYX_UNROLL
  for (int i = 0; i < RPW; ++i) {
    const int64_t r = r0 + warp * RPW + i;
    if (r >= a.R) break;
    const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
    if (a.splits == 1) {
      T* yr = static_cast<T*>(a.y) + ((b * a.Hq + h) * a.L + l) * D;
      const float inv = lsum[i] > 0.f ? 1.f / lsum[i] : 0.f;
      ONYX_UNROLL
      for (int c = 0; c < PER_LANE; ++c) {
        const int64_t d = lane + 32 * c;
        if (d < D) yr[d] = from_compute<T>(acc[i][c] * inv);
      }
    }
  }
  if (a.splits == 1) return;
  // The splits of a tile are one cluster: each leaves (max, sum, values) per row in its shared
  // memory (where the K tile was), and the cluster's first block merges them.
  __syncthreads();
  float* part = ks;  // [rows_block][D + 2]
  ONYX_UNROLL
  for (int i = 0; i < RPW; ++i) {
    const int64_t rl = warp * RPW + i;
    float* pr = part + rl * (D + 2);
    if (lane == 0) {
      pr[0] = m[i];
      pr[1] = lsum[i];
    }
    ONYX_UNROLL
    for (int c = 0; c < PER_LANE; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < D) pr[2 + d] = acc[i][c];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (cluster.block_rank() == 0) {
    const unsigned n = cluster.num_blocks();
    ONYX_UNROLL
    for (int i = 0; i < RPW; ++i) {
      const int64_t rl = warp * RPW + i, r = r0 + rl;
      if (r >= a.R) break;
      float mx = -INFINITY;
      for (unsigned q = 0; q < n; ++q) mx = fmaxf(mx, cluster.map_shared_rank(part, q)[rl * (D + 2)]);
      float den = 0.f;
      float out[PER_LANE];
      ONYX_UNROLL
      for (int c = 0; c < PER_LANE; ++c) out[c] = 0.f;
      for (unsigned q = 0; q < n; ++q) {
        const float* pr = cluster.map_shared_rank(part, q) + rl * (D + 2);
        if (pr[0] == -INFINITY) continue;
        const float f = __expf(pr[0] - mx);
        den += pr[1] * f;
        ONYX_UNROLL
        for (int c = 0; c < PER_LANE; ++c) {
          const int64_t d = lane + 32 * c;
          if (d < D) out[c] += pr[2 + d] * f;
        }
      }
      const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
      T* yr = static_cast<T*>(a.y) + ((b * a.Hq + h) * a.L + l) * D;
      const float inv = den > 0.f ? 1.f / den : 0.f;
      ONYX_UNROLL
      for (int c = 0; c < PER_LANE; ++c) {
        const int64_t d = lane + 32 * c;
        if (d < D) yr[d] = from_compute<T>(out[c] * inv);
      }
    }
  }
  cluster.sync();  // the others' shared memory stays until the first block has read it
}

// Launches `kernel(a)` with clusters of `splits` blocks along x (the key splits of one tile,
// merged through distributed shared memory), a programmatic dependent of the kernel before it
// (both kernels begin with ONYX_KERNEL_PROLOGUE or its wait); past 8 blocks a cluster is
// Hopper's non-portable size, allowed per kernel here.
template <class Kernel>
void launch_key_splits(Kernel kernel, dim3 grid, int threads, size_t smem, int splits, CudaContext& cu,
                       const AttnArgs& a) {
  if (smem > 48 * 1024)
    ONYX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  if (splits > 8) ONYX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  launch_clusters(kernel, grid, dim3(static_cast<unsigned>(threads)), smem, static_cast<unsigned>(splits), cu, a);
}

// Decode (at most kDecodeRows query rows per KV head: a group's heads at one or a few positions),
// 16-bit Q, K, V with head size 64 or 128: a key's D values lie across D / 8 lanes, 16 bytes each,
// so a warp reads 32 / (D / 8) keys per load with every lane busy, and U such loads of K and of V
// are in flight per lane. Each lane keeps a running softmax (max, sum, its 8 features of the
// weighted values) over the keys its lane group sees; the groups of a warp merge by shuffles, the
// warps of a block in shared memory, and the blocks of a cluster (the key splits) in the first
// block's shared memory, which each block writes its part into before it leaves; the first block
// waits once for all of them and writes Y. Each merge takes the largest max first, then scales
// every part to it at once (no chain of pairwise merges). Left out one by one on an H200 (batch
// 1, past 512, 8.4 us a launch), the merges cost about 3.2 us of it: the warps' and the block's
// 1.55, the cluster's (two full cluster barriers and reads of the others' shared memory) 1.65;
// this form took the launch to 6.2-6.3 us.
constexpr int kDecodeRows = 8;
}  // namespace
int attention_decode_splits_for_bench = 0;
int rotary_attention_min_rows = 4;
namespace {
constexpr int kDecodeWarps = 8;
constexpr int kMaxClusterBlocks = 16;  // launch_key_splits' largest cluster

template <int R, int D>
struct DecodeShared {
  float m[kDecodeWarps][R], l[kDecodeWarps][R];
  float acc[kDecodeWarps][R][D];
};

// The cluster barrier in two halves (every thread of the cluster arrives, then waits; a thread
// that has exited counts as arrived).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// Eight values of T from floats, as one 16-byte word.
template <class T>
__device__ __forceinline__ uint4 floats_to_pack(const float (&f)[8]) {
  uint4 out;
  T* t = reinterpret_cast<T*>(&out);
  ONYX_UNROLL
  for (int i = 0; i < 8; ++i) t[i] = from_compute<T>(f[i]);
  return out;
}

// With ROPE (onyx::RotaryCacheAttention), before the keys: the block writes the new positions
// among its keys into the caches (K rotated, as RotaryCache's kernel rounds it; V copied); a
// position outside the cache sets the device error and writes nothing (RotaryCache's rule). A
// thread takes a pair of K vectors or a V vector of the new rows; its loads do not wait for the
// index (only where it writes does), so they and the index are one round trip to memory.
template <class T, int D>
__device__ __forceinline__ void decode_write_new_rows(const AttnArgs& a, int64_t b, int64_t kvh, int64_t lo,
                                                      int64_t hi, bool first) {
  const AttnRope& e = a.rope;
  constexpr int kHalf = D / 2, kHalfVecs = D / 16, kVecs = D / 8;
  const int64_t head = b * a.Hkv + kvh;
  const int n_k = static_cast<int>(e.S_new) * kHalfVecs, n = n_k + static_cast<int>(e.S_new) * kVecs;
  const int64_t at = e.index[e.per_row ? b : 0];
  const bool in_cache = at >= 0 && at + e.S_new <= a.S;
  for (int u = threadIdx.x; u < n; u += blockDim.x) {
    const bool is_k = u < n_k;
    const int w = is_k ? u : u - n_k;
    const int64_t t = is_k ? w / kHalfVecs : w / kVecs;
    const int c = is_k ? (w % kHalfVecs) * 8 : (w % kVecs) * 8;
    const T* src = static_cast<const T*>(is_k ? e.k_new : e.v_new) + (head * e.S_new + t) * D + c;
    const int64_t co = b * e.kr.cb + kvh * e.kr.ch + t * e.kr.cs + c;
    const uint4 xl = *reinterpret_cast<const uint4*>(src);
    uint4 xh{}, cl{}, ch{}, sl{}, sh{};
    if (is_k) {
      xh = *reinterpret_cast<const uint4*>(src + kHalf);
      cl = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.cos) + co);
      ch = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.cos) + co + kHalf);
      sl = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.sin) + co);
      sh = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.sin) + co + kHalf);
    }
    const int64_t pos = at + t;
    if (!in_cache || pos < lo || pos >= hi) continue;
    T* dst = static_cast<T*>(const_cast<void*>(is_k ? a.k : a.v)) + (head * a.S + pos) * D + c;
    if (!is_k) {
      *reinterpret_cast<uint4*>(dst) = xl;
      continue;
    }
    float fxl[8], fxh[8], fcl[8], fch[8], fsl[8], fsh[8], yl[8], yh[8];
    pack_to_floats<T>(xl, fxl);
    pack_to_floats<T>(xh, fxh);
    pack_to_floats<T>(cl, fcl);
    pack_to_floats<T>(ch, fch);
    pack_to_floats<T>(sl, fsl);
    pack_to_floats<T>(sh, fsh);
    ONYX_UNROLL
    for (int i = 0; i < 8; ++i) {
      yl[i] = fxl[i] * fcl[i] + (-fxh[i]) * fsl[i];
      yh[i] = fxh[i] * fch[i] + fxl[i] * fsh[i];
    }
    *reinterpret_cast<uint4*>(dst) = floats_to_pack<T>(yl);
    *reinterpret_cast<uint4*>(dst + kHalf) = floats_to_pack<T>(yh);
  }
  if (!in_cache && first && kvh == 0 && threadIdx.x == 0) atomicOr(e.err, kDeviceErrorCachePosition);
}

template <class T, int D, int R, bool ROPE>
__global__ void __launch_bounds__(kDecodeWarps * 32) attn_decode_kernel(AttnArgs a) {
  constexpr int kLanesPerKey = D / 8, kKeysPerLoad = 32 / kLanesPerKey, kU = 4;
  constexpr int kStep = kDecodeWarps * kKeysPerLoad * kU;  // keys of one step of the block's warps
  __shared__ DecodeShared<R, D> sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / kLanesPerKey, part = lane % kLanesPerKey;
  const int split = blockIdx.x;
  const int64_t kvh = blockIdx.y, b = blockIdx.z;
  const int rows = static_cast<int>(a.R);
  const int64_t lo = split * a.chunk, hi = min(a.S, lo + a.chunk);
  const T* qp = static_cast<const T*>(a.q);
  const T* kp = static_cast<const T*>(a.k) + (b * a.Hkv + kvh) * a.S * D + part * 8;
  const T* vp = static_cast<const T*>(a.v) + (b * a.Hkv + kvh) * a.S * D + part * 8;
  if (a.splits > 1) cluster_arrive_relaxed();  // waited for before the first write into another block
  // The keys and values of the block's first step, asked of L2 before the wait: the kernel before
  // (the cache write) changes at most the new positions among them, and a later write reaches L2
  // too, so the loads after the wait read them from L2 either way, fresh.
  if (a.prefetch && threadIdx.x < 2 && hi > lo) {
    const T* base = (threadIdx.x == 0 ? kp : vp) - part * 8 + lo * D;
    prefetch_l2(base, static_cast<uint32_t>(min(hi - lo, static_cast<int64_t>(kStep)) * D * sizeof(T)));
  }
  ONYX_KERNEL_PROLOGUE();
  float q[R][8];
  if constexpr (ROPE) {
    // y = x cos + rotate_half(x) sin, rounded to T as RotaryCache's kernel rounds q_rot: each lane
    // reads its 8 features of a row, the 8 of the lane holding the other half's, and their cos and
    // sin. Up to 4 rows' loads go out with the new rows' (one round trip), then the block meets
    // (the new rows written) and the rows are rotated; the first block of a cluster writes q_rot.
    constexpr int kHalfParts = kLanesPerKey / 2, RQ = R < 4 ? R : 4;
    const AttnRope& e = a.rope;
    const bool low = part < kHalfParts;
    ONYX_UNROLL
    for (int g = 0; g < R; g += RQ) {
      uint4 own[RQ], other[RQ], cs[RQ], sn[RQ];
      ONYX_UNROLL
      for (int i = 0; i < RQ; ++i) {
        const int r = g + i;
        own[i] = other[i] = cs[i] = sn[i] = make_uint4(0, 0, 0, 0);
        if (r < rows) {
          const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
          const T* row = qp + ((b * a.Hq + h) * a.L + l) * D;
          const int64_t co = b * e.qr.cb + h * e.qr.ch + l * e.qr.cs + part * 8;
          own[i] = *reinterpret_cast<const uint4*>(row + part * 8);
          other[i] = *reinterpret_cast<const uint4*>(row + (part ^ kHalfParts) * 8);
          cs[i] = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.cos) + co);
          sn[i] = *reinterpret_cast<const uint4*>(static_cast<const T*>(e.sin) + co);
        }
      }
      if (g == 0) {
        decode_write_new_rows<T, D>(a, b, kvh, lo, hi, split == 0);
        __syncthreads();  // the new rows, written, before the keys' loads
      }
      ONYX_UNROLL
      for (int i = 0; i < RQ; ++i) {
        const int r = g + i;
        if (r >= rows) {
          ONYX_UNROLL
          for (int j = 0; j < 8; ++j) q[r][j] = 0.f;
          continue;
        }
        float fo[8], fx[8], fc[8], fs[8], y[8];
        pack_to_floats<T>(own[i], fo);
        pack_to_floats<T>(other[i], fx);
        pack_to_floats<T>(cs[i], fc);
        pack_to_floats<T>(sn[i], fs);
        ONYX_UNROLL
        for (int j = 0; j < 8; ++j) y[j] = low ? fo[j] * fc[j] + (-fx[j]) * fs[j] : fo[j] * fc[j] + fx[j] * fs[j];
        const uint4 packed = floats_to_pack<T>(y);
        if (split == 0 && warp == 0 && sub == 0) {
          const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
          *reinterpret_cast<uint4*>(static_cast<T*>(e.q_rot) + ((b * a.Hq + h) * a.L + l) * D + part * 8) = packed;
        }
        pack_to_floats<T>(packed, q[r]);
        ONYX_UNROLL
        for (int j = 0; j < 8; ++j) q[r][j] *= a.scale;
      }
    }
  } else {
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      if (r < rows) {
        const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
        load8(qp + ((b * a.Hq + h) * a.L + l) * D + part * 8, q[r]);
        ONYX_UNROLL
        for (int i = 0; i < 8; ++i) q[r][i] *= a.scale;
      } else {
        ONYX_UNROLL
        for (int i = 0; i < 8; ++i) q[r][i] = 0.f;
      }
    }
  }
  float m[R], lsum[R], acc[R][8];
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    lsum[r] = 0.f;
    ONYX_UNROLL
    for (int i = 0; i < 8; ++i) acc[r][i] = 0.f;
  }
  for (int64_t t0 = lo + warp * kKeysPerLoad * kU; t0 < hi; t0 += kStep) {
    // All loads of the step first: K, V and the mask's value of each (key, row).
    uint4 kr[kU], vr[kU];
    float madd[kU][R];  // the mask's addend: 0, -inf (bool false or past the keys), or its value
    ONYX_UNROLL
    for (int u = 0; u < kU; ++u) {
      const int64_t key = t0 + u * kKeysPerLoad + sub;
      const bool in = key < hi && key < a.mask_len;
      if (key < hi) {
        kr[u] = *reinterpret_cast<const uint4*>(kp + key * D);
        vr[u] = *reinterpret_cast<const uint4*>(vp + key * D);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
      if (a.mask_shared) {  // one value for every row: one load (the decode case, [B, 1, 1, T])
        float mu = in ? 0.f : -INFINITY;
        if (in && a.mask) {
          const int64_t mi = b * a.mstride[0] + key * a.mstride[3];
          mu = a.mask_bool ? (static_cast<const bool*>(a.mask)[mi] ? 0.f : -INFINITY)
                           : to_compute(static_cast<const T*>(a.mask)[mi]);
        }
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) madd[u][r] = mu;
        continue;
      }
      ONYX_UNROLL
      for (int r = 0; r < R; ++r) {
        madd[u][r] = in ? 0.f : -INFINITY;
        if (in && a.mask && r < rows) {
          const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
          const int64_t mi = b * a.mstride[0] + h * a.mstride[1] + l * a.mstride[2] + key * a.mstride[3];
          madd[u][r] = a.mask_bool ? (static_cast<const bool*>(a.mask)[mi] ? 0.f : -INFINITY)
                                   : to_compute(static_cast<const T*>(a.mask)[mi]);
        }
      }
    }
    // Every (key, row) score at once, so that the shuffles of one do not wait for another's.
    float sc[kU][R];
    ONYX_UNROLL
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      pack_to_floats<T>(kr[u], kf);
      ONYX_UNROLL
      for (int r = 0; r < R; ++r) {
        float dot = 0.f;
        ONYX_UNROLL
        for (int i = 0; i < 8; ++i) dot = fmaf(q[r][i], kf[i], dot);
        sc[u][r] = dot;
      }
    }
    ONYX_UNROLL
    for (int o = kLanesPerKey / 2; o > 0; o >>= 1) {
      ONYX_UNROLL
      for (int u = 0; u < kU; ++u) {
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) sc[u][r] += __shfl_xor_sync(0xffffffffu, sc[u][r], o);
      }
    }
    // One rescale of each row's running softmax per step (by the step's largest score), then
    // the step's keys added in.
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      float mx = -INFINITY;
      ONYX_UNROLL
      for (int u = 0; u < kU; ++u) {
        sc[u][r] += madd[u][r];
        mx = fmaxf(mx, sc[u][r]);
      }
      const float mn = fmaxf(m[r], mx);
      if (r >= rows || mn == -INFINITY || mn == m[r]) continue;
      const float corr = __expf(m[r] - mn);  // 0 before the first key (exp(-inf))
      lsum[r] *= corr;
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) acc[r][i] *= corr;
      m[r] = mn;
    }
    ONYX_UNROLL
    for (int u = 0; u < kU; ++u) {
      float vf[8];
      pack_to_floats<T>(vr[u], vf);
      ONYX_UNROLL
      for (int r = 0; r < R; ++r) {
        if (r >= rows || sc[u][r] == -INFINITY) continue;
        const float p = __expf(sc[u][r] - m[r]);
        lsum[r] += p;
        ONYX_UNROLL
        for (int i = 0; i < 8; ++i) acc[r][i] = fmaf(p, vf[i], acc[r][i]);
      }
    }
  }
  // The lane groups of the warp (the same features, other keys) into lanes [0, kLanesPerKey):
  // each row's largest max first, then every group's sum and values scaled to it and added.
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) {
    float mw = m[r];
    ONYX_UNROLL
    for (int o = kLanesPerKey; o < 32; o <<= 1) mw = fmaxf(mw, __shfl_xor_sync(0xffffffffu, mw, o));
    const float f = m[r] == -INFINITY ? 0.f : __expf(m[r] - mw);
    lsum[r] *= f;
    ONYX_UNROLL
    for (int i = 0; i < 8; ++i) acc[r][i] *= f;
    m[r] = mw;
  }
  ONYX_UNROLL
  for (int o = kLanesPerKey; o < 32; o <<= 1) {
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], o);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) acc[r][i] += __shfl_xor_sync(0xffffffffu, acc[r][i], o);
    }
  }
  if (sub == 0) {
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      if (part == 0) {
        sh.m[warp][r] = m[r];
        sh.l[warp][r] = lsum[r];
      }
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i) sh.acc[warp][r][part * 8 + i] = acc[r][i];
    }
  }
  // With key splits, the cluster's first block gathers each block's (max, sum, values) in its
  // dynamic shared memory, pushed there by their owners: [split][row] maxes, then sums, then
  // [split][row][D] values. Every block first waits until the cluster's blocks have all
  // started (the arrival at the top, long passed by now), as writes into another block's
  // shared memory need.
  extern __shared__ float cluster_part[];
  cg::cluster_group cluster = cg::this_cluster();
  float* gather = nullptr;
  if (a.splits > 1) {
    cluster_wait();
    gather = cluster.map_shared_rank(cluster_part, 0);
  }
  __syncthreads();
  // The block's warps: one thread per (row, feature); every warp's scale to the block's max
  // at once, then the sums.
  auto write = [&](int r, int d, float value, float den) {
    const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
    static_cast<T*>(a.y)[((b * a.Hq + h) * a.L + l) * D + d] = from_compute<T>(den > 0.f ? value / den : 0.f);
  };
  const int ns = a.splits;
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int r = e / D, d = e - r * D;
    float mb = -INFINITY;
    ONYX_UNROLL
    for (int w = 0; w < kDecodeWarps; ++w) mb = fmaxf(mb, sh.m[w][r]);
    float lb = 0.f, ab = 0.f;
    if (mb != -INFINITY) {
      ONYX_UNROLL
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float mw = sh.m[w][r];
        const float f = mw == -INFINITY ? 0.f : __expf(mw - mb);
        lb = fmaf(sh.l[w][r], f, lb);
        ab = fmaf(sh.acc[w][r][d], f, ab);
      }
    }
    if (ns == 1) {
      write(r, d, ab, lb);
    } else {
      if (d == 0) {
        gather[split * R + r] = mb;
        gather[ns * R + split * R + r] = lb;
      }
      gather[2 * ns * R + (split * R + r) * D + d] = ab;
    }
  }
  if (ns == 1) return;
  // The others arrive (their writes released to the first block) and leave; the first block
  // waits for them, then merges the splits in its own shared memory.
  cluster_arrive_release();
  if (split != 0) return;
  cluster_wait();
  const float* pm = cluster_part;
  const float* pl = cluster_part + ns * R;
  const float* pa = cluster_part + 2 * ns * R;
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int r = e / D, d = e - r * D;
    float mb = -INFINITY;
    for (int q2 = 0; q2 < ns; ++q2) mb = fmaxf(mb, pm[q2 * R + r]);
    float lb = 0.f, ab = 0.f;
    if (mb != -INFINITY) {
      for (int q2 = 0; q2 < ns; ++q2) {
        const float mq = pm[q2 * R + r];
        const float f = mq == -INFINITY ? 0.f : __expf(mq - mb);
        lb = fmaf(pl[q2 * R + r], f, lb);
        ab = fmaf(pa[(q2 * R + r) * D + d], f, ab);
      }
    }
    write(r, d, ab, lb);
  }
}

// The first block's gathering space for `splits` blocks' partial softmaxes (decode kernel).
constexpr size_t decode_gather_bytes(int splits, int rows, int d) {
  return splits > 1 ? static_cast<size_t>(splits) * rows * (d + 2) * sizeof(float) : 0;
}

// Past 48 KiB of shared memory in all, a kernel launches with dynamic shared memory only once
// allowed: the decode kernel is allowed its largest gathering space.
template <class T, int D, int R, bool ROPE>
void set_decode_gather_limit() {
  const size_t most = decode_gather_bytes(kMaxClusterBlocks, R, D);
  if (most + sizeof(DecodeShared<R, D>) > 48 * 1024)
    ONYX_CUDA_CHECK(cudaFuncSetAttribute(attn_decode_kernel<T, D, R, ROPE>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)));
}

// How many blocks of the decode kernel an SM holds at once (its registers decide), asked once.
template <class T, int D, int R, bool ROPE>
int decode_blocks_per_sm() {
  static const int n = [] {
    int blocks = 1;
    set_decode_gather_limit<T, D, R, ROPE>();
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attn_decode_kernel<T, D, R, ROPE>, kDecodeWarps * 32,
                                                      decode_gather_bytes(kMaxClusterBlocks, R, D)) !=
        cudaSuccess) {
      cudaGetLastError();
      blocks = 1;
    }
    return std::max(1, blocks);
  }();
  return n;
}

// Whether the decode kernel takes this attention, and launches it.
bool attention_decode(AttnArgs& a, DType dt, CudaContext& cu) {
  if (!a.vec8 || a.R > kDecodeRows || (a.D != 64 && a.D != 128) || (dt != DType::kBFloat16 && dt != DType::kFloat16) ||
      reinterpret_cast<uintptr_t>(a.q) % 16 != 0 || a.Hkv > 65535 || a.B > 65535)
    return false;
  // As many blocks as the SMs hold at once (a second wave of blocks would double the time), at
  // least 64 keys each. At most a cluster of 8 where an SM holds one block: a cluster of 16 then
  // needs 16 free SMs of one GPC, which not every GPC of an H200 has (16 splits of a past of 8,192
  // took 34.7 us against 25.5 for 8, bench/cuda_bench.cpp); 16 where SMs hold two. And at most
  // half the SMs' worth of blocks, but 2 splits: at 16 and 32 (batch row, KV head) pairs the slots
  // allowed 8 and 4 splits, and 4 and 2 took 6.7 against 11.4 us and 9.0 against 12.4 at a past of
  // 512, 42.1 against 46.6 and 79.1 against 84.3 at 8,192 (the attention table of
  // bench/cuda_bench.cpp, an H200); at 8 and 64 pairs the choice is as before.
  const int64_t heads = a.Hkv * a.B;
  auto launch = [&](auto kernel, int per_sm, int rows) {
    const int64_t slots = static_cast<int64_t>(sm_count(cu.device)) * per_sm;
    const int64_t half_sms = std::max<int64_t>(1, sm_count(cu.device) / 2);
    int64_t splits = std::min<int64_t>({per_sm >= 2 ? 16 : 8, slots / heads, (a.S + 63) / 64,
                                        std::max<int64_t>(2, half_sms / heads)});
    if (attention_decode_splits_for_bench > 0) splits = std::min<int64_t>(16, attention_decode_splits_for_bench);
    splits = std::max<int64_t>(1, splits);
    a.chunk = (a.S + splits - 1) / splits;
    a.splits = static_cast<int>(std::max<int64_t>(1, (a.S + a.chunk - 1) / std::max<int64_t>(1, a.chunk)));
    a.prefetch = cu.overlap_launches;
    launch_key_splits(kernel,
                      dim3(static_cast<unsigned>(a.splits), static_cast<unsigned>(a.Hkv), static_cast<unsigned>(a.B)),
                      kDecodeWarps * 32, decode_gather_bytes(a.splits, rows, static_cast<int>(a.D)), a.splits, cu, a);
  };
  auto by_rows = [&](auto tag, auto dim) {
    using T = typename decltype(tag)::type;
    constexpr int Dc = decltype(dim)::value;
    auto with = [&](auto rows_tag) {
      constexpr int R = decltype(rows_tag)::value;
      if (a.rope.index) {
        const int per_sm = decode_blocks_per_sm<T, Dc, R, true>();
        set_decode_gather_limit<T, Dc, R, true>();  // (on this device too)
        launch(attn_decode_kernel<T, Dc, R, true>, per_sm, R);
      } else {
        const int per_sm = decode_blocks_per_sm<T, Dc, R, false>();
        set_decode_gather_limit<T, Dc, R, false>();
        launch(attn_decode_kernel<T, Dc, R, false>, per_sm, R);
      }
    };
    if (a.R <= 1) with(std::integral_constant<int, 1>{});
    else if (a.R <= 2) with(std::integral_constant<int, 2>{});
    else if (a.R <= 4) with(std::integral_constant<int, 4>{});
    else with(std::integral_constant<int, 8>{});
  };
  dispatch_float(dt, "Attention", [&](auto tag) {
    if constexpr (!std::is_same_v<typename decltype(tag)::type, float>) {
      if (a.D == 64) by_rows(tag, std::integral_constant<int, 64>{});
      else by_rows(tag, std::integral_constant<int, 128>{});
    }
  });
  ONYX_CUDA_CHECK_LAUNCH("Attention (decode)");
  return true;
}

// Long prompts: the scores of a chunk of query rows for every (batch row, KV head) as one
// strided-batched product (a KV head's query group is G * L consecutive rows of Q), the softmax
// in place (one block per row: scale and mask in float, the scores and probabilities in T, as
// the unfused graph rounds them), then the values' product into Y. The chunk's scores live in
// the workspace, past the part given to cuBLASLt.
constexpr int64_t kAttnGemmRows = 128;            // from this many rows per KV head (G * L)
constexpr size_t kAttnLtWorkspace = 8ull << 20;   // of the 32 MiB workspace: cuBLASLt's

template <class T>
__global__ void attn_softmax_rows_kernel(T* __restrict__ p, AttnArgs a, int64_t r0, int64_t rc) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;  // over batch * Hkv * rc
  const int64_t bk = row / rc, r = r0 + row % rc, kvh = bk % a.Hkv, b = bk / a.Hkv;
  const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
  T* s = p + row * a.S;
  auto score = [&](int64_t j) {
    float v = to_compute(s[j]) * a.scale;
    if (j >= a.mask_len) return -INFINITY;
    if (a.mask) {
      const int64_t mi = b * a.mstride[0] + h * a.mstride[1] + l * a.mstride[2] + j * a.mstride[3];
      if (a.mask_bool) v = static_cast<const bool*>(a.mask)[mi] ? v : -INFINITY;
      else v += to_compute(static_cast<const T*>(a.mask)[mi]);
    }
    return v;
  };
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) mx = fmaxf(mx, score(j));
  mx = block_reduce(mx, [](float x, float y) { return fmaxf(x, y); }, scratch);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
    const float v = score(j);
    sum += mx == -INFINITY || v == -INFINITY ? 0.f : __expf(v - mx);
  }
  sum = block_reduce(sum, [](float x, float y) { return x + y; }, scratch);
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  for (int64_t j = threadIdx.x; j < a.S; j += blockDim.x) {
    const float v = score(j);
    s[j] = from_compute<T>(mx == -INFINITY || v == -INFINITY ? 0.f : __expf(v - mx) * inv);
  }
}

// false when the chunk of scores would not fit (then the direct kernel runs).
bool attention_by_gemm(const AttnArgs& a, DType dt, CudaContext& cu) {
  const size_t es = dtype_size(dt);
  if (cu.workspace_bytes <= kAttnLtWorkspace) return false;
  const size_t room = cu.workspace_bytes - kAttnLtWorkspace;
  const int64_t per_row = a.B * a.Hkv * a.S * static_cast<int64_t>(es);
  if (per_row <= 0 || static_cast<size_t>(per_row) > room) return false;
  const int64_t rc = std::min<int64_t>(a.R, static_cast<int64_t>(room / static_cast<size_t>(per_row)));
  void* scores = static_cast<char*>(cu.workspace) + kAttnLtWorkspace;
  CudaContext lt = cu;
  lt.workspace_bytes = kAttnLtWorkspace;
  const int64_t batch = a.B * a.Hkv, D = a.D;
  for (int64_t r0 = 0; r0 < a.R; r0 += rc) {
    const int64_t n = std::min(rc, a.R - r0);
    GemmCall qk;  // scores[bk][r][j] = Q[bk][r0 + r] . K[bk][j]
    qk.dtype = dt;
    qk.tb = true;
    qk.m = n;
    qk.n = a.S;
    qk.k = D;
    qk.lda = D;
    qk.ldb = D;
    qk.ldd = a.S;
    qk.batch = batch;
    qk.stride_a = a.R * D;
    qk.stride_b = a.S * D;
    qk.stride_d = n * a.S;
    qk.a = static_cast<const char*>(a.q) + static_cast<size_t>(r0 * D) * es;
    qk.b = a.k;
    qk.d = scores;
    run_gemm(qk, lt, "Attention's scores");
    dispatch_float(dt, "Attention", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_kernel(attn_softmax_rows_kernel<T>, static_cast<unsigned>(batch * n), 256, 0, cu, static_cast<T*>(scores),
                    a, r0, n);
    });
    ONYX_CUDA_CHECK_LAUNCH("Attention (softmax)");
    GemmCall pv;  // Y[bk][r0 + r] = P[bk][r] . V[bk]
    pv.dtype = dt;
    pv.m = n;
    pv.n = D;
    pv.k = a.S;
    pv.lda = a.S;
    pv.ldb = D;
    pv.ldd = D;
    pv.batch = batch;
    pv.stride_a = n * a.S;
    pv.stride_b = a.S * D;
    pv.stride_d = a.R * D;
    pv.a = scores;
    pv.b = a.v;
    pv.d = static_cast<char*>(a.y) + static_cast<size_t>(r0 * D) * es;
    run_gemm(pv, lt, "Attention's values");
  }
  return true;
}

// The attention's arguments from Q, K, V, the mask (null: none) and the node's scale attribute;
// throws naming what does not fit.
AttnArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, const NodeView& n,
                        Tensor& y) {
  const Shape &qs = q.shape(), &ks = k.shape(), &vs = v.shape();
  ONYX_CHECK(qs.rank() == 4 && ks.rank() == 4 && vs.rank() == 4, "Attention on CUDA takes 4-D Q, K and V, got ",
             qs.str(), ", ", ks.str(), ", ", vs.str());
  ONYX_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "K and V must have Q's dtype ", dtype_name(q.dtype()));
  AttnArgs a{};
  a.B = qs[0];
  a.Hq = qs[1];
  a.L = qs[2];
  a.D = qs[3];
  a.Hkv = ks[1];
  a.S = ks[2];
  ONYX_CHECK(ks[0] == a.B && vs[0] == a.B, "Q, K and V have different batch sizes: ", qs.str(), ", ", ks.str(), ", ",
             vs.str());
  ONYX_CHECK(ks[3] == a.D && vs[3] == a.D && vs[1] == a.Hkv && vs[2] == a.S, "K ", ks.str(), " and V ", vs.str(),
             " do not match Q ", qs.str());
  ONYX_CHECK(a.Hkv > 0 && a.Hq % a.Hkv == 0, "Q's ", a.Hq, " heads are not a multiple of K's ", a.Hkv);
  ONYX_CHECK(a.D >= 1 && a.D <= kAttnMaxHead, "Attention on CUDA takes head sizes 1..", kAttnMaxHead, ", got ", a.D);
  a.G = a.Hq / a.Hkv;
  a.R = a.G * a.L;
  a.q = q.raw();
  a.k = k.raw();
  a.v = v.raw();
  a.y = y.raw();
  a.vec8 = a.D % 8 == 0 && reinterpret_cast<uintptr_t>(a.k) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0;
  a.mask_len = a.S;
  if (mask) {
    const Tensor& mt = *mask;
    const Shape& ms = mt.shape();
    ONYX_CHECK(mt.dtype() == DType::kBool || mt.dtype() == q.dtype(), "attn_mask must be bool or ",
               dtype_name(q.dtype()), ", got ", dtype_name(mt.dtype()));
    ONYX_CHECK(ms.rank() >= 1 && ms.rank() <= 4, "attn_mask must have rank 1 to 4, got ", ms.str());
    a.mask_len = ms[ms.rank() - 1];
    ONYX_CHECK(a.mask_len <= a.S, "attn_mask's last dimension ", a.mask_len, " exceeds the total sequence length ",
               a.S);
    const int64_t full[4] = {a.B, a.Hq, a.L, a.mask_len};
    int64_t acc = 1;
    for (size_t i = 0; i < ms.rank(); ++i) {
      const size_t ax = 4 - ms.rank() + (ms.rank() - 1 - i);
      const int64_t dim = ms[ms.rank() - 1 - i];
      ONYX_CHECK(dim == full[ax] || dim == 1, "attn_mask of shape ", ms.str(), " does not broadcast to [", a.B, ",",
                 a.Hq, ",", a.L, ",", a.mask_len, "]");
      a.mstride[ax] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
    a.mask = mt.numel() ? mt.raw() : nullptr;
    a.mask_bool = mt.dtype() == DType::kBool;
    a.mask_shared = a.mstride[1] == 0 && a.mstride[2] == 0 ? 1 : 0;
  }
  a.scale = static_cast<float>(n.has_attr("scale") ? n.attr_float("scale", 1.f)
                                                  : 1.0 / std::sqrt(static_cast<double>(a.D)));
  return a;
}

}  // namespace

void run_attention(KernelContext& ctx, CudaContext& cu) {
  const Tensor& q = ctx.input(0);
  AttnArgs a = attention_args(q, ctx.input(1), ctx.input(2), ctx.has_input(3) ? &ctx.input(3) : nullptr, ctx,
                              ctx.output(0));
  if (a.B == 0 || a.Hq == 0 || a.L == 0) return;
  if (a.R >= kAttnGemmRows && a.S >= 64 && attention_by_gemm(a, q.dtype(), cu)) return;
  if (attention_decode(a, q.dtype(), cu)) return;
  const int64_t per_warp = (a.R + kAttnWarps - 1) / kAttnWarps;
  a.rows_per_warp = per_warp <= 1 ? 1 : per_warp <= 2 ? 2 : 4;
  const int64_t rows_block = kAttnWarps * a.rows_per_warp;
  const int64_t tiles = (a.R + rows_block - 1) / rows_block;
  ONYX_CHECK(tiles * 64 <= INT32_MAX && a.Hkv <= 65535 && a.B <= 65535, "Attention on CUDA: ", a.B, " x ", a.Hkv,
             " x ", tiles, " blocks exceed a grid");
  a.tiles = static_cast<int>(tiles);
  // Split the keys (a cluster of at most 16 blocks per tile) when the grid would leave SMs
  // idle; at least 64 keys per split.
  const int64_t blocks = tiles * a.Hkv * a.B, want = 2 * static_cast<int64_t>(sm_count(cu.device));
  int64_t splits = 1;
  if (blocks < want && a.S > 64) splits = std::min<int64_t>({16, (want + blocks - 1) / blocks, (a.S + 63) / 64});
  a.chunk = (a.S + splits - 1) / splits;
  a.chunk = (a.chunk + kAttnKeys - 1) / kAttnKeys * kAttnKeys;
  a.splits = static_cast<int>(std::max<int64_t>(1, (a.S + a.chunk - 1) / std::max<int64_t>(1, a.chunk)));
  const size_t smem = static_cast<size_t>(rows_block * a.D + kAttnKeys * (a.D + 1) + kAttnKeys * a.D) * sizeof(float);
  dispatch_float(q.dtype(), "Attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto kernel) {
      launch_key_splits(kernel,
                        dim3(static_cast<unsigned>(tiles * a.splits), static_cast<unsigned>(a.Hkv),
                             static_cast<unsigned>(a.B)),
                        kAttnWarps * 32, smem, a.splits, cu, a);
    };
    auto by_rows = [&](auto lanes) {
      constexpr int L = decltype(lanes)::value;
      if (a.rows_per_warp == 1) launch(attn_kernel<T, L, 1>);
      else if (a.rows_per_warp == 2) launch(attn_kernel<T, L, 2>);
      else launch(attn_kernel<T, L, 4>);
    };
    if (a.D <= 32) by_rows(std::integral_constant<int, 1>{});
    else if (a.D <= 64) by_rows(std::integral_constant<int, 2>{});
    else if (a.D <= 128) by_rows(std::integral_constant<int, 4>{});
    else by_rows(std::integral_constant<int, 8>{});
  });
  ONYX_CUDA_CHECK_LAUNCH("Attention");
}

namespace {

// onyx::RotaryCacheAttention (ops/rotary_cache.cpp): inputs q, k, v, cos, sin, past_k, past_v,
// index[, attn_mask], outputs q_rot, present_k, present_v, y. One launch of the decode kernel with
// its rotary part where the presents are their caches, bound in place (the generator's step), the
// tensors 16-bit with head size 64 or 128 split in halves, rotary_attention_min_rows batch rows or
// more, and the decode kernel takes the shape; otherwise RotaryCache's kernel, then Attention's.
void run_rotary_cache_attention(KernelContext& ctx, CudaContext& cu) {
  ONYX_CHECK(ctx.num_inputs() >= 8 && ctx.has_input(7) && ctx.num_outputs() == 4,
             "RotaryCacheAttention takes q, k, v, cos, sin, past_k, past_v, index[, attn_mask] and makes q_rot, "
             "present_k, present_v, y");
  const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2), &cos = ctx.input(3), &sin = ctx.input(4);
  const Tensor &past_k = ctx.input(5), &past_v = ctx.input(6), &index = ctx.input(7);
  const Tensor* mask = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  Tensor &q_rot = ctx.output(0), &present_k = ctx.output(1), &present_v = ctx.output(2), &y = ctx.output(3);
  const DType dt = q.dtype();
  bool fused = (dt == DType::kFloat16 || dt == DType::kBFloat16) && q.rank() == 4 && k.rank() == 4 &&
               v.rank() == 4 && past_k.rank() == 4 && past_v.rank() == 4 && present_k.raw() == past_k.raw() &&
               present_v.raw() == past_v.raw() && index.dtype() == DType::kInt64 && cos.shape() == sin.shape();
  for (const Tensor* t : {&k, &v, &cos, &sin, &past_k, &past_v}) fused = fused && t->dtype() == dt;
  for (const void* p : {q.raw(), k.raw(), v.raw(), cos.raw(), sin.raw(), past_k.raw(), past_v.raw(), q_rot.raw()})
    fused = fused && is_aligned(p, 16);
  if (fused) {
    const int64_t D = q.shape()[3];
    fused = (D == 64 || D == 128) && k.shape()[3] == D && v.shape()[3] == D && ctx.attr_int("split", D / 2) == D / 2 &&
            (index.numel() == 1 || index.numel() == past_k.shape()[0]);
  }
  // Fewer batch rows take the two kernels: on an H200 (the 1.24B Llama's generation loop, past
  // 511, the fusion off and on in turn, docs/decode-speed.md), the fused kernel cost 6-9 us a step
  // at one row and 6-8 at two, was even at four and saved 14-20 at eight.
  fused = fused && q.rank() == 4 && q.shape()[0] >= rotary_attention_min_rows;
  if (fused) {
    AttnRope rope;
    rope.qr = rope_rows(q.shape(), cos.shape(), "q");
    rope.kr = rope_rows(k.shape(), cos.shape(), "k");
    cache_rows(past_k.shape(), k.shape(), present_k.shape(), true, true, "k");
    cache_rows(past_v.shape(), v.shape(), present_v.shape(), true, true, "v");
    ONYX_CHECK(k.shape()[2] == v.shape()[2] && past_k.shape()[2] == past_v.shape()[2], "past_k ",
               past_k.shape().str(), " and past_v ", past_v.shape().str(), " must hold one capacity, and k ",
               k.shape().str(), " and v ", v.shape().str(), " one length");
    AttnArgs a = attention_args(q, past_k, past_v, mask, ctx, y);
    rope.k_new = k.raw();
    rope.v_new = v.raw();
    rope.cos = cos.raw();
    rope.sin = sin.raw();
    rope.q_rot = q_rot.raw();
    rope.index = index.data<int64_t>();
    rope.per_row = index.numel() > 1 ? 1 : 0;
    rope.S_new = k.shape()[2];
    rope.err = cu.error_word;
    a.rope = rope;
    if (a.B == 0 || a.Hq == 0 || a.L == 0) return;
    if (attention_decode(a, dt, cu)) return;
  }
  // The two kernels in turn, over the fused node's inputs and outputs.
  Node rotary;
  rotary.name = ctx.node().name;
  rotary.op_type = "RotaryCache";
  rotary.domain = "onyx";
  rotary.opset = 1;
  rotary.inputs = {0, 1, 2, 3, 4, 5, 6, 7};
  rotary.outputs = {0, 1, 2};
  Node attention;
  attention.name = ctx.node().name;
  attention.op_type = "Attention";
  attention.opset = 23;
  attention.inputs = {0, 1, 2};
  if (mask) attention.inputs.push_back(3);
  attention.outputs = {0};
  for (const Attribute& at : ctx.node().attributes)
    (at.name == "scale" ? attention : rotary).attributes.push_back(at);
  std::vector<const Tensor*> rin;
  for (size_t i = 0; i < 8; ++i) rin.push_back(&ctx.input(i));
  Tensor routs[3] = {q_rot, present_k, present_v};  // sharing the outputs' storage
  KernelContext rc(rotary, std::move(rin), routs, ctx.allocator(), nullptr);
  run_rotary_cache(rc, cu);
  std::vector<const Tensor*> ain{&routs[0], &routs[1], &routs[2]};
  if (mask) ain.push_back(mask);
  Tensor aout[1] = {y};
  KernelContext at(attention, std::move(ain), aout, ctx.allocator(), nullptr);
  run_attention(at, cu);
}

std::string attention_support(const Node& node, const std::vector<ValueType>& in) {
  NodeView n(node);
  if (in.size() < 3 || !is_cuda_float(in[0].dtype)) return "Attention on CUDA takes float32/float16/bfloat16";
  for (size_t i = 0; i < 3; ++i)
    if (in[i].shape.rank_known && in[i].shape.dims.size() != 4) return "Attention on CUDA takes 4-D Q, K and V";
  for (size_t i = 4; i < in.size(); ++i)
    if (n.has_input(i)) return "Attention on CUDA does not take past_key, past_value or nonpad_kv_seqlen";
  for (size_t o = 1; o < node.outputs.size(); ++o)
    if (node.outputs[o] >= 0) return "Attention on CUDA gives only Y (no present_key, present_value or qk output)";
  if (n.attr_int("is_causal", 0) != 0) return "Attention on CUDA does not take is_causal=1";
  if (n.attr_float("softcap", 0.f) != 0.f) return "Attention on CUDA does not take softcap";
  if (in[0].shape.rank_known && in[0].shape.dims[3] > kAttnMaxHead)
    return cat("Attention on CUDA takes head sizes up to ", kAttnMaxHead);
  if (in.size() > 2 && in[2].shape.rank_known && in[0].shape.rank_known && in[2].shape.dims[3] >= 0 &&
      in[2].shape.dims[3] != in[0].shape.dims[3])
    return "Attention on CUDA takes V's head size equal to Q's";
  return "";
}

std::string rotary_cache_attention_support(const Node& node, const std::vector<ValueType>& in) {
  NodeView n(node);
  if (in.size() < 8 || !n.has_input(7)) return "RotaryCacheAttention takes 8 or 9 inputs, the index among them";
  for (size_t i = 0; i < 7; ++i)
    if (!is_cuda_float(in[i].dtype)) return "RotaryCacheAttention on CUDA takes float32/float16/bfloat16";
  if (in[7].dtype != DType::kInt64) return "RotaryCacheAttention takes an int64 index";
  if (in[0].shape.rank_known && in[0].shape.dims.size() == 4 && in[0].shape.dims[3] > kAttnMaxHead)
    return cat("RotaryCacheAttention on CUDA takes head sizes up to ", kAttnMaxHead);
  if (in[2].shape.rank_known && in[0].shape.rank_known && in[2].shape.dims.size() == 4 &&
      in[0].shape.dims.size() == 4 && in[2].shape.dims[3] >= 0 && in[2].shape.dims[3] != in[0].shape.dims[3])
    return "RotaryCacheAttention on CUDA takes V's head size equal to Q's";
  return "";
}

}  // namespace

void register_attention_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("Attention", 23, run_attention, attention_support));
  r.add(domain_kernel("onyx", "RotaryCacheAttention", 1, run_rotary_cache_attention, rotary_cache_attention_support));
}

}  // namespace onyx::cuda
