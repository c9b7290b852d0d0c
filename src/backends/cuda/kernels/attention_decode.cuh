// The decode attention for attention.cu, which includes this file once, after AttnArgs, AttnRope,
// load8 and launch_key_splits: few query rows per KV head (a decode step's), 16-bit, head size 64
// or 128, the keys split across the blocks of a cluster; with ROPE, onyx::RotaryCacheAttention's
// fused form (q rotated as it is loaded, the new rows written into the caches by the block whose
// keys hold them). Not a header to include elsewhere.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/attention_splits.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {
namespace {

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

// U: each lane's loads of K (and of V) in flight a step, 4, or 2 in the short form, whose blocks
// hold at most 128 registers a thread so that two fit an SM (where it runs: attention_splits.h).
template <class T, int D, int R, bool ROPE, int U = 4>
__global__ void __launch_bounds__(kDecodeWarps * 32, U == 2 ? 2 : 1) attn_decode_kernel(AttnArgs a) {
  constexpr int kLanesPerKey = D / 8, kKeysPerLoad = 32 / kLanesPerKey, kU = U;
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
    // All loads of the step first: K, V and, where one mask value serves every row (the decode
    // case, [B, 1, 1, T]), the mask's. A mask per row is read after the scores, one more round trip
    // in a rare case, so that its values do not hold R x kU registers across the loads.
    uint4 kr[kU], vr[kU];
    float mu[kU];  // the mask's addend: 0, -inf (bool false or past the keys), or the shared value
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
      mu[u] = in ? 0.f : -INFINITY;
      if (in && a.mask && a.mask_shared) {
        const int64_t mi = b * a.mstride[0] + key * a.mstride[3];
        mu[u] = a.mask_bool ? (static_cast<const bool*>(a.mask)[mi] ? 0.f : -INFINITY)
                            : to_compute(static_cast<const T*>(a.mask)[mi]);
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
    if (a.softcap > 0.f) {  // Gemma 2's soft cap, on the scaled scores before the mask
      ONYX_UNROLL
      for (int u = 0; u < kU; ++u) {
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) sc[u][r] = soft_capped(sc[u][r], a.softcap);
      }
    }
    // One rescale of each row's running softmax per step (by the step's largest score), then
    // the step's keys added in.
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      float mx = -INFINITY;
      ONYX_UNROLL
      for (int u = 0; u < kU; ++u) {
        float add = mu[u];
        if (a.mask && !a.mask_shared && add == 0.f && r < rows) {
          const int64_t key = t0 + u * kKeysPerLoad + sub;
          const int64_t h = kvh * a.G + r / a.L, l = r % a.L;
          const int64_t mi = b * a.mstride[0] + h * a.mstride[1] + l * a.mstride[2] + key * a.mstride[3];
          add = a.mask_bool ? (static_cast<const bool*>(a.mask)[mi] ? 0.f : -INFINITY)
                            : to_compute(static_cast<const T*>(a.mask)[mi]);
        }
        sc[u][r] += add;
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
template <class T, int D, int R, bool ROPE, int U = 4>
void set_decode_gather_limit() {
  const size_t most = decode_gather_bytes(kMaxClusterBlocks, R, D);
  if (most + sizeof(DecodeShared<R, D>) > 48 * 1024)
    ONYX_CUDA_CHECK(cudaFuncSetAttribute(attn_decode_kernel<T, D, R, ROPE, U>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most)));
}

// How many blocks of the decode kernel an SM holds at once (its registers decide), asked once.
template <class T, int D, int R, bool ROPE, int U = 4>
int decode_blocks_per_sm() {
  static const int n = [] {
    int blocks = 1;
    set_decode_gather_limit<T, D, R, ROPE, U>();
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attn_decode_kernel<T, D, R, ROPE, U>, kDecodeWarps * 32,
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
  const int64_t sms = sm_count(cu.device);
  auto default_splits = [&](int per_sm) {
    const int64_t slots = sms * per_sm, half_sms = std::max<int64_t>(1, sms / 2);
    return std::min<int64_t>({per_sm >= 2 ? 16 : 8, slots / heads, (a.S + 63) / 64, std::max<int64_t>(2, half_sms / heads)});
  };
  auto launch = [&](auto kernel, int64_t splits, int rows) {
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
      auto form = [&](auto u_tag, int64_t splits) {
        constexpr int U = decltype(u_tag)::value;
        if (a.rope.index) {
          set_decode_gather_limit<T, Dc, R, true, U>();  // (on this device too)
          launch(attn_decode_kernel<T, Dc, R, true, U>,
                 splits > 0 ? splits : default_splits(decode_blocks_per_sm<T, Dc, R, true, U>()), R);
        } else {
          set_decode_gather_limit<T, Dc, R, false, U>();
          launch(attn_decode_kernel<T, Dc, R, false, U>,
                 splits > 0 ? splits : default_splits(decode_blocks_per_sm<T, Dc, R, false, U>()), R);
        }
      };
      if constexpr (R == 4) {
        // The short form where attention_splits.h's rule gives it splits (measurements there).
        if (const int64_t splits = decode_short_form_splits(a.S, heads, sms, Dc))
          return form(std::integral_constant<int, 2>{}, splits);
      }
      form(std::integral_constant<int, 4>{}, 0);
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

}  // namespace
}  // namespace onyx::cuda
