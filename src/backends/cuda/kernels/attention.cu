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
// And the decode kernel (attention_decode.cuh, up to 8 rows per KV head of 16-bit heads of 64 or
// 128), which onyx::RotaryCacheAttention's kernel (here) runs in its fused form.
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
  float softcap;  // > 0: the scaled scores become softcap * tanh(score / softcap) before the mask
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

// A scaled score, soft-capped where `cap` > 0 (Gemma 2's attention: cap * tanh(score / cap)).
__device__ __forceinline__ float soft_capped(float score, float cap) {
  return cap > 0.f ? cap * tanhf(score / cap) : score;
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
        s = soft_capped(dot, a.softcap);
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

}  // namespace

int attention_decode_splits_for_bench = 0;
int rotary_attention_min_rows = 4;

}  // namespace onyx::cuda

// The decode kernel (attention_decode.cuh): few query rows per KV head, and the fused
// rotary-attention form.
#include "backends/cuda/kernels/attention_decode.cuh"

namespace onyx::cuda {
namespace {

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
    float v = soft_capped(to_compute(s[j]) * a.scale, a.softcap);
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
AttnArgs attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                        std::optional<float> scale, float softcap, Tensor& y) {
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
  a.scale = scale ? *scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.D)));
  ONYX_CHECK(softcap >= 0.f, "Attention's softcap must be >= 0, got ", softcap);
  a.softcap = softcap;
  return a;
}

// The op's scale attribute, if it has one.
std::optional<float> scale_attr(const NodeView& n) {
  return n.has_attr("scale") ? std::optional<float>(n.attr_float("scale", 1.f)) : std::nullopt;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, std::optional<float> scale,
               Tensor& y, CudaContext& cu, float softcap) {
  AttnArgs a = attention_args(q, k, v, mask, scale, softcap, y);
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

void run_attention(KernelContext& ctx, CudaContext& cu) {
  attention(ctx.input(0), ctx.input(1), ctx.input(2), ctx.has_input(3) ? &ctx.input(3) : nullptr, scale_attr(ctx),
            ctx.output(0), cu, ctx.attr_float("softcap", 0.f));
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
    AttnArgs a = attention_args(q, past_k, past_v, mask, scale_attr(ctx), 0.f, y);
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
  // The two kernels in turn, over the fused node's inputs and outputs (q_rot, present_k and
  // present_v written by the first, read by the second).
  RotaryCacheTensors t;
  t.q = &q, t.k = &k, t.v = &v, t.cos = &cos, t.sin = &sin, t.past_k = &past_k, t.past_v = &past_v, t.index = &index;
  t.q_rot = &q_rot, t.present_k = &present_k, t.present_v = &present_v;
  rotary_cache(t, ctx.has_attr("split") ? std::optional<int64_t>(ctx.attr_int("split", 0)) : std::nullopt, cu);
  attention(q_rot, present_k, present_v, mask, scale_attr(ctx), y, cu);
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
