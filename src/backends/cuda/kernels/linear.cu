// onyx::Linear, SiluGateLinear and RmsNormLinear on CUDA (ops/linear_ops.cpp defines them; the
// linear fusions, passes/fuse_linear.h, make them).
//
// Which kernel runs a product:
// - one or two rows of 16-bit x (decode at batch 1 and 2): the streaming kernel. Each block (one
//   per SM) takes tiles of 16 weight rows in turn; the bulk-copy engine brings each row's chunk
//   into shared memory, three stages deep, and the warps dot the landed rows with x (in shared
//   memory, normalized there first for RmsNormLinear). The first chunks are asked for before
//   the kernel waits on the kernel before it (kernels/common/pdl.cuh), so that its weights
//   stream in while that kernel finishes.
// - up to 8 rows of float32 x: the few-row kernel, each warp streaming a few weight rows through
//   registers (16-byte loads, several in flight) and dotting them with x through L1.
// - everything else (16-bit x of 3 or more rows, where cuBLASLt's tensor-core kernels win; what
//   the kernels do not take): cuBLASLt with the weight as the transposed operand; for the gated
//   form both products into the workspace, then the gating; for RmsNormLinear the rows
//   normalized into the workspace first.
// The gating (SiLU, or GELU where the node's `activation` says so), the rounding and the split
// into outputs happen as each output is written.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/common/bulk_copy.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/gate.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/mma.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/linear.h"
#include "backends/cuda/kernels/norm.h"
#include "ops/gate_activation.h"

namespace onyx::cuda {

namespace {

constexpr int kMaxSplits = 8;
constexpr int kGemvMaxRows = 8;  // rows of x up to which the kernel beats cuBLASLt
constexpr int kGemvWarps = 4;    // per block

struct GemvArgs {
  const void* x;  // [m, k]
  const void* w;  // [n, k]; gated: [2n, k], the gate rows then the up rows
  int m;
  int k_packs;  // k in 16-byte packs
  int n;        // outputs per row of x
  int splits;
  int split_end[kMaxSplits];  // exclusive end column of each output
  void* out[kMaxSplits];
  // The norm before the product (kNorm): x is h = x + skip (skip may be null), normalized by
  // its root mean square and scaled by gamma into shared memory first; blocks of column 0
  // write h to sum (when not null).
  const void* skip;
  const void* gamma;
  void* sum;
  float eps;
  const void* bias;  // [n] or null (ungated): added to each output column's sum before its rounding
  int act;           // gated: the gate's activation (GateActivation: 0 SiLU, 1 GELU by tanh, 2 GELU by erf)
};

// 16 bytes of weight: read once, so not kept in L1 (x is).
__device__ __forceinline__ uint4 load_weight(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Where output column `col` goes: the output whose columns hold it, its first column and width
// (found with constant indices: a run-time index into the arguments would copy them to local
// memory).
template <class T>
__device__ __forceinline__ T* output_of(const GemvArgs& a, int col, int& start, int& width) {
  T* dst = nullptr;
  ONYX_UNROLL
  for (int s = 0; s < kMaxSplits; ++s) {
    const int lo = s == 0 ? 0 : a.split_end[s - 1];
    if (s < a.splits && col >= lo && col < a.split_end[s]) {
      dst = static_cast<T*>(a.out[s]);
      start = lo;
      width = a.split_end[s] - lo;
    }
  }
  return dst;
}

// Output column `col`'s bias (0 without one).
template <class T>
__device__ __forceinline__ float bias_of(const GemvArgs& a, int col) {
  return a.bias ? static_cast<float>(to_compute(static_cast<const T*>(a.bias)[col])) : 0.f;
}

template <class T>
__device__ __forceinline__ float dot_pack(const uint4& w, const float* x) {
  constexpr int P = 16 / sizeof(T);
  float f[P];
  pack_to_floats<T>(w, f);
  float s = 0.f;
  ONYX_UNROLL
  for (int i = 0; i < P; ++i) s = fmaf(f[i], x[i], s);
  return s;
}

// R rows of x (a compile-time bound; the launch's rows may be fewer), CPW weight rows per warp,
// G = 2 for the gated form, U packs per lane in flight per weight row. Each warp takes groups of
// CPW outputs in turn (the grid is what the SMs hold at once) and asks L2 for the next group's
// rows while it streams the current one.
// The packs of a row of h = x + skip as floats.
template <class T>
__device__ __forceinline__ void load_h(const GemvArgs& a, size_t pack, float* h) {
  constexpr int P = 16 / sizeof(T);
  pack_to_floats<T>(static_cast<const uint4*>(a.x)[pack], h);
  if (a.skip) {
    float s[P];
    pack_to_floats<T>(static_cast<const uint4*>(a.skip)[pack], s);
    ONYX_UNROLL
    for (int i = 0; i < P; ++i) h[i] += s[i];
  }
}

template <class T>
__device__ __forceinline__ uint4 pack_of(const float* f) {
  constexpr int P = 16 / sizeof(T);
  uint4 v;
  T* t = reinterpret_cast<T*>(&v);
  ONYX_UNROLL
  for (int i = 0; i < P; ++i) t[i] = from_compute<T>(f[i]);
  return v;
}

// The block's rows of x normalized into xs (rows x k_packs packs of T): the sums of squares of
// h reduced across the block, then h scaled. Where each row is at most one pack per thread (K up
// to 4096 16-bit values at 512 threads: the decode shapes), every row's pack is loaded at once
// and kept in registers for both passes (one row: h; more: the packs of x and skip): one round
// trip to L2 for all rows, where the general loop below makes two per row, one after another.
// `gamma_pack`: this thread's pack of gamma where the caller loaded it already (`have_gamma`; the
// fast path only). By value: a pointer to the caller's variable put it in local memory.
template <class T, int R>
__device__ void normalize_rows(const GemvArgs& a, int row0, int rows, uint4* xs, bool have_gamma = false,
                               uint4 gamma_pack = {}) {
  constexpr int P = 16 / sizeof(T);
  __shared__ float partial[32][R];  // per warp of the block (up to 32)
  __shared__ float inv_rms[R];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool write_sum = a.sum && blockIdx.x == 0;
  const uint4* gamma = static_cast<const uint4*>(a.gamma);
  // 1 / rms of each row from the threads' sums of squares: the warps' sums, then thread r adds up
  // row r's and shares the result. (Every thread adding up every row, with a division each, was
  // most of the 8-row kernel's instructions: 4-5 us a product on an H200, whatever the rows.)
  auto inverse_rms = [&](float (&sq)[R], float (&inv)[R]) {
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      ONYX_UNROLL
      for (int o = 16; o > 0; o >>= 1) sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], o);
      if (lane == 0) partial[warp][r] = sq[r];
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < rows) {
      float total = 0.f;
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += partial[w][threadIdx.x];
      inv_rms[threadIdx.x] = rsqrtf(total / static_cast<float>(a.k_packs * P) + a.eps);
    }
    __syncthreads();
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) inv[r] = r < rows ? inv_rms[r] : 0.f;
  };
  float sq[R], inv[R];
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) sq[r] = 0.f;
  if (a.k_packs <= static_cast<int>(blockDim.x) && R == 1) {
    // One row: h in registers from its two loads to the scaling (the form below, which keeps
    // the packs and converts them twice, was 0.4-1.5 us slower a product at one row).
    const int p = threadIdx.x;
    const bool mine = p < a.k_packs && rows > 0;
    float h[P];
    if (mine) {
      load_h<T>(a, static_cast<size_t>(row0) * a.k_packs + p, h);
    } else {
      ONYX_UNROLL
      for (int i = 0; i < P; ++i) h[i] = 0.f;
    }
    float g[P];
    if (mine) pack_to_floats<T>(have_gamma ? gamma_pack : gamma[p], g);
    if (write_sum && mine) static_cast<uint4*>(a.sum)[static_cast<size_t>(row0) * a.k_packs + p] = pack_of<T>(h);
    ONYX_UNROLL
    for (int i = 0; i < P; ++i) sq[0] = fmaf(h[i], h[i], sq[0]);
    inverse_rms(sq, inv);
    if (mine) {
      ONYX_UNROLL
      for (int i = 0; i < P; ++i) h[i] = h[i] * inv[0] * g[i];
      xs[p] = pack_of<T>(h);
    }
    __syncthreads();
    return;
  }
  if (a.k_packs <= static_cast<int>(blockDim.x)) {
    const int p = threadIdx.x;
    const bool mine = p < a.k_packs;
    // Every row's packs of x and skip asked for before any is used. Loaded row by row beside
    // their conversions, the compiler gave each row a round trip to L2 of its own, one after
    // another: at 8 rows the norm cost q,k,v's product 4.6 us and gate,up's 5.6 on an H200, 4.1
    // and 3.7 with the loads together (bench/cuda_bench.cpp's "norm" table, two machines).
    uint4 xr[R], sr[R];
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      xr[r] = sr[r] = make_uint4(0, 0, 0, 0);
      const size_t pack = static_cast<size_t>(row0 + r) * a.k_packs + p;
      if (mine && r < rows) xr[r] = static_cast<const uint4*>(a.x)[pack];
      if (mine && r < rows && a.skip) sr[r] = static_cast<const uint4*>(a.skip)[pack];
    }
    // h = x + skip of row r, from the packs (converted twice, before and after the reduction:
    // only the packs live across it, half the registers of h, so that the compiler has no reason
    // to hold a load back).
    auto h_of = [&](int r, float (&h)[P]) {
      pack_to_floats<T>(xr[r], h);
      if (a.skip) {
        float sk[P];
        pack_to_floats<T>(sr[r], sk);
        ONYX_UNROLL
        for (int i = 0; i < P; ++i) h[i] += sk[i];
      }
    };
    // gamma with the rows (in flight together), not after the reduction.
    float g[P];
    if (mine) pack_to_floats<T>(have_gamma ? gamma_pack : gamma[p], g);
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      float h[P];
      h_of(r, h);
      if (write_sum && mine) static_cast<uint4*>(a.sum)[static_cast<size_t>(row0 + r) * a.k_packs + p] = pack_of<T>(h);
      ONYX_UNROLL
      for (int i = 0; i < P; ++i) sq[r] = fmaf(h[i], h[i], sq[r]);
    }
    inverse_rms(sq, inv);
    if (mine) {
      ONYX_UNROLL
      for (int r = 0; r < R; ++r) {
        if (r >= rows) continue;
        float h[P];
        h_of(r, h);
        ONYX_UNROLL
        for (int i = 0; i < P; ++i) h[i] = h[i] * inv[r] * g[i];
        xs[r * a.k_packs + p] = pack_of<T>(h);
      }
    }
    __syncthreads();
    return;
  }
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r >= rows) continue;
    for (int p = threadIdx.x; p < a.k_packs; p += blockDim.x) {
      const size_t pack = static_cast<size_t>(row0 + r) * a.k_packs + p;
      float h[P];
      load_h<T>(a, pack, h);
      if (write_sum) static_cast<uint4*>(a.sum)[pack] = pack_of<T>(h);
      ONYX_UNROLL
      for (int i = 0; i < P; ++i) sq[r] = fmaf(h[i], h[i], sq[r]);
    }
  }
  inverse_rms(sq, inv);
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) {
    if (r >= rows) continue;
    for (int p = threadIdx.x; p < a.k_packs; p += blockDim.x) {
      float h[P], g[P];
      load_h<T>(a, static_cast<size_t>(row0 + r) * a.k_packs + p, h);
      pack_to_floats<T>(gamma[p], g);
      ONYX_UNROLL
      for (int i = 0; i < P; ++i) h[i] = h[i] * inv[r] * g[i];
      xs[r * a.k_packs + p] = pack_of<T>(h);
    }
  }
  __syncthreads();
}

template <class T, int R, int CPW, int G, int U, bool kNorm>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(GemvArgs a) {
  constexpr int P = 16 / sizeof(T);
  const int lane = threadIdx.x & 31;
  const int groups = (a.n + CPW - 1) / CPW;
  const int stride = gridDim.x * kGemvWarps;
  int group = blockIdx.x * kGemvWarps + (threadIdx.x >> 5);
  const uint4* w = static_cast<const uint4*>(a.w);
  auto row_of = [&](int grp, int c, int g) {
    const int col = min(grp * CPW + c, a.n - 1);  // past the end: the last row again, never written
    return w + (static_cast<size_t>(g) * a.n + col) * a.k_packs;
  };
  auto prefetch = [&](int grp) {
    if (lane == 0 && grp < groups)
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c)
        ONYX_UNROLL
        for (int g = 0; g < G; ++g) prefetch_l2(row_of(grp, c, g), static_cast<uint32_t>(a.k_packs) * 16u);
  };
  // The weights do not depend on the kernels before this one: ask for them now.
  prefetch(group);
  wait_for_prior_grids();
  allow_dependent_grids();
  const int row0 = blockIdx.y * R;
  const int rows = min(R, a.m - row0);
  extern __shared__ uint4 normed[];  // kNorm: [rows][k_packs]
  if constexpr (kNorm) normalize_rows<T, R>(a, row0, rows, normed);
  const uint4* x = kNorm ? normed : static_cast<const uint4*>(a.x) + static_cast<size_t>(row0) * a.k_packs;
  for (; group < groups; group += stride) {
    prefetch(group + stride);
    const uint4* wrow[CPW][G];
    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c)
      ONYX_UNROLL
      for (int g = 0; g < G; ++g) wrow[c][g] = row_of(group, c, g);
    float acc[CPW][G][R];
    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c)
      ONYX_UNROLL
      for (int g = 0; g < G; ++g)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) acc[c][g][r] = 0.f;

    auto step = [&](int p0, auto guard) {
      constexpr bool kGuard = decltype(guard)::value;
      uint4 wv[U][CPW][G];
      ONYX_UNROLL
      for (int u = 0; u < U; ++u) {
        const int p = p0 + u * 32 + lane;
        ONYX_UNROLL
        for (int c = 0; c < CPW; ++c)
          ONYX_UNROLL
          for (int g = 0; g < G; ++g)
            wv[u][c][g] = (!kGuard || p < a.k_packs) ? load_weight(wrow[c][g] + p) : make_uint4(0, 0, 0, 0);
      }
      ONYX_UNROLL
      for (int u = 0; u < U; ++u) {
        const int p = p0 + u * 32 + lane;
        if (kGuard && p >= a.k_packs) continue;
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) {
          if (r >= rows) continue;
          float xf[P];
          pack_to_floats<T>(kNorm ? x[r * a.k_packs + p] : __ldg(x + static_cast<size_t>(r) * a.k_packs + p), xf);
          ONYX_UNROLL
          for (int c = 0; c < CPW; ++c)
            ONYX_UNROLL
            for (int g = 0; g < G; ++g) acc[c][g][r] += dot_pack<T>(wv[u][c][g], xf);
        }
      }
    };
    int p0 = 0;
    for (; p0 + 32 * U <= a.k_packs; p0 += 32 * U) step(p0, std::false_type{});
    if (p0 < a.k_packs) step(p0, std::true_type{});

    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c)
      ONYX_UNROLL
      for (int g = 0; g < G; ++g)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r)
          ONYX_UNROLL
          for (int o = 16; o > 0; o >>= 1) acc[c][g][r] += __shfl_xor_sync(0xffffffffu, acc[c][g][r], o);

    // Every lane holds every sum; lane c * R + r writes output (row r, column c).
    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c) {
      const int col = group * CPW + c;
      ONYX_UNROLL
      for (int r = 0; r < R; ++r) {
        if (lane != c * R + r || col >= a.n || r >= rows) continue;
        float v = acc[c][0][r];
        if constexpr (G == 2) v = gated_value(v, acc[c][1][r], a.act);
        else v += bias_of<T>(a, col);
        int start = 0, width = 0;
        T* dst = output_of<T>(a, col, start, width);
        dst[static_cast<size_t>(row0 + r) * width + (col - start)] = from_compute<T>(v);
      }
    }
  }
}

// ---- the streaming kernel: weight tiles through shared memory by the bulk-copy engine ----
//
// Up to eight rows of x, 16-bit: each block (one per SM, as many as there are tiles) takes tiles
// of kTileRows weight rows in turn (the gated form: kTileRows / 2 outputs, their gate rows and
// their up rows), each in chunks of up to kChunkPacks 16-byte packs per row. Warp 0 asks the
// copy engine for a stage's chunks (bulk copies into shared memory, completing on the stage's
// barrier; a tile of whole rows as one copy per run of adjacent rows) stages - 1 chunks ahead,
// as many stages as the shared memory that x leaves holds. x sits in shared memory too
// (normalized there first for RmsNormLinear). One row (kMma false): each warp dots one
// landed row with x and leaves its sums in shared memory when the tile is done, where the tile's
// outputs (the gating) are made. More rows (kMma, R = 8): the tile's 16 rows are the rows of a
// tensor-core product (mma m16n8k16) whose 8 columns are the rows of x, each warp taking a
// sixteenth of the chunk's K; when the tile is done the warps' partial sums go to the stage just
// read (its refill waits for them) and are added up there, so 8 rows read the weights once at
// the cost of one. The first chunks are asked for before the kernel waits on the kernel before
// it: the weights stream in while it finishes.
constexpr int kTileRows = 16;
constexpr int kChunkPacks = 256;  // 4 KiB of a row per stage (1 and 2 KiB measured slower)
constexpr int kStreamWarps = kTileRows;  // one row of the tile each
constexpr int kMaxStages = 16;
constexpr size_t kStreamXBytes = 32 * 1024;  // x (all its rows) in shared memory at most
constexpr size_t kStreamSmem = 227 * 1024;   // a Hopper block's shared memory: stages fill what x leaves

template <class T, int R, int G, bool kNorm, bool kMma>
__global__ void __launch_bounds__(kStreamWarps * 32) stream_kernel(GemvArgs a, int stage_count, bool x_shared) {
  static_assert(!kMma || R == 8, "the tensor-core form takes up to 8 rows (the MMA's columns)");
  constexpr int P = 16 / sizeof(T);
  constexpr int kOuts = kTileRows / G;      // outputs per tile
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ uint64_t full[kMaxStages];
  uint4* stages = smem;                                          // [stage_count][kTileRows][kChunkPacks]
  uint4* xs = smem + stage_count * kTileRows * kChunkPacks;           // [rows][k_packs]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tiles = (a.n + kOuts - 1) / kOuts;
  const int chunks = (a.k_packs + kChunkPacks - 1) / kChunkPacks;
  const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int items = my_tiles * chunks;
  const uint4* w = static_cast<const uint4*>(a.w);
  // Item i: this block's tile i / chunks, chunk i % chunks, into stage i % stage_count.
  // By warp 0. A chunk that is a whole row (K within one chunk) comes as one copy per run of
  // rows that lie next to each other in memory and in the stage (the tile's rows; gated: its gate
  // rows, then its up rows); otherwise lane r asks for row r's chunk.
  auto issue = [&](int i) {
    const int tile = blockIdx.x + (i / chunks) * gridDim.x, chunk = i % chunks;
    const int first = chunk * kChunkPacks, packs = min(kChunkPacks, a.k_packs - first);
    uint4* stage = stages + (i % stage_count) * kTileRows * kChunkPacks;
    const int valid = min(kOuts, a.n - tile * kOuts);  // outputs of this tile
    uint64_t* bar = &full[i % stage_count];
    if (lane == 0) barrier_expect(bar, static_cast<uint32_t>(G * valid * packs * 16));
    __syncwarp();
    if (chunks == 1 && packs == kChunkPacks) {
      if (lane < G) {
        const size_t row = static_cast<size_t>(lane) * a.n + tile * kOuts;
        bulk_copy(stage + lane * kOuts * kChunkPacks, w + row * a.k_packs,
                  static_cast<uint32_t>(valid * packs * 16), bar);
      }
    } else if (lane < kTileRows && lane % kOuts < valid) {
      const size_t row = static_cast<size_t>(lane / kOuts) * a.n + tile * kOuts + (lane % kOuts);
      bulk_copy(stage + lane * kChunkPacks, w + row * a.k_packs + first, static_cast<uint32_t>(packs * 16), bar);
    }
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stage_count; ++s) barrier_init(&full[s]);
    fence_barrier_init();
  }
  __syncthreads();
  // The weights do not depend on the kernels before this one: start them now, and the norm's
  // gamma (a weight too) where each thread takes one pack of it.
  if (warp == 0)
    for (int i = 0; i < stage_count - 1 && i < items; ++i) issue(i);
  [[maybe_unused]] uint4 gamma_pack = make_uint4(0, 0, 0, 0);
  [[maybe_unused]] const bool gamma_early = kNorm && a.k_packs <= static_cast<int>(blockDim.x);
  if constexpr (kNorm)
    if (gamma_early && static_cast<int>(threadIdx.x) < a.k_packs)
      gamma_pack = __ldg(static_cast<const uint4*>(a.gamma) + threadIdx.x);
  wait_for_prior_grids();
  allow_dependent_grids();
  const int rows = min(R, a.m);
  const uint4* xg = static_cast<const uint4*>(a.x);
  if constexpr (kNorm) {
    normalize_rows<T, R>(a, 0, rows, xs, gamma_early, gamma_pack);
  } else if (x_shared) {  // x into shared memory: every load of a thread asked for before its stores
    constexpr int kPer = static_cast<int>(kStreamXBytes / 16 / (kStreamWarps * 32));
    const uint4* x = static_cast<const uint4*>(a.x);
    const int total = rows * a.k_packs;
    for (int e0 = threadIdx.x; e0 < total; e0 += kPer * blockDim.x) {
      uint4 v[kPer];
      ONYX_UNROLL
      for (int j = 0; j < kPer; ++j)
        if (e0 + j * static_cast<int>(blockDim.x) < total) v[j] = __ldg(x + e0 + j * blockDim.x);
      ONYX_UNROLL
      for (int j = 0; j < kPer; ++j)
        if (e0 + j * static_cast<int>(blockDim.x) < total) xs[e0 + j * blockDim.x] = v[j];
    }
    __syncthreads();
  }
  __shared__ float sums[kMma ? 1 : kTileRows][kMma ? 1 : R];
  float acc[R];
  ONYX_UNROLL
  for (int r = 0; r < R; ++r) acc[r] = 0.f;
  float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};  // kMma: two chains of MMAs
  for (int i = 0; i < items; ++i) {
    if (warp == 0 && i + stage_count - 1 < items) {
      fence_before_refill();  // the stage's reads before its refill
      issue(i + stage_count - 1);
    }
    const int tile = blockIdx.x + (i / chunks) * gridDim.x, chunk = i % chunks;
    const int first = chunk * kChunkPacks, packs = min(kChunkPacks, a.k_packs - first);
    const bool last = chunk == chunks - 1;
    // The tensor-core form: lane (g, t) takes pack p0 + t of weight rows g and g + 8 and of x's
    // row g, for p0 = warp * 4 + s * kStreamWarps * 4 (step s of the chunk). Where x is not in
    // shared memory, its packs for the chunk are asked for before the wait for the weights.
    constexpr int kSteps = kChunkPacks / (kStreamWarps * 4);
    [[maybe_unused]] const int g = lane >> 2, t = lane & 3;
    [[maybe_unused]] uint4 xpre[kMma ? kSteps : 1];
    if constexpr (kMma) {
      ONYX_UNROLL
      for (int st = 0; st < kSteps; ++st) {
        const int p = warp * 4 + st * kStreamWarps * 4 + t;
        xpre[st] = make_uint4(0, 0, 0, 0);
        if (!x_shared && p < packs && g < rows) xpre[st] = __ldg(xg + g * a.k_packs + first + p);
      }
    }
    barrier_wait(&full[i % stage_count], static_cast<uint32_t>((i / stage_count) & 1));
    if constexpr (kMma) {
      // Values 0-3 of each pack are one MMA's k, values 4-7 the other's (the same order for
      // weights and x, so the sum over the chunk is the dot product).
      uint4* stage = stages + (i % stage_count) * kTileRows * kChunkPacks;
      ONYX_UNROLL
      for (int st = 0; st < kSteps; ++st) {
        const int p = warp * 4 + st * kStreamWarps * 4 + t;
        if (p - t >= packs) break;
        uint4 wa = make_uint4(0, 0, 0, 0), wb = wa, xv = xpre[st];
        if (p < packs) {
          wa = stage[g * kChunkPacks + p];
          wb = stage[(g + 8) * kChunkPacks + p];
          if (x_shared && g < rows) xv = xs[g * a.k_packs + first + p];
        }
        mma_16816<T>(c0, wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
        mma_16816<T>(c1, wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
      }
      __syncthreads();  // every warp is done with this stage (before its refill, or its reuse below)
      if (last) {
        // The warps' sums for the tile into the stage's first 8 KiB ([warp][lane][4] floats), then
        // thread (j, r) adds up output j of x's row r (gated: the gate row j and the up row j + 8).
        float* part = reinterpret_cast<float*>(stage);
        reinterpret_cast<float4*>(part)[warp * 32 + lane] =
            make_float4(c0[0] + c1[0], c0[1] + c1[1], c0[2] + c1[2], c0[3] + c1[3]);
        ONYX_UNROLL
        for (int e = 0; e < 4; ++e) c0[e] = c1[e] = 0.f;
        __syncthreads();
        if (static_cast<int>(threadIdx.x) < kOuts * R) {
          const int j = threadIdx.x / R, r = threadIdx.x % R, col = tile * kOuts + j;
          auto total = [&](int f) {  // MMA row f (a weight row of the tile), column r
            const int at = ((f & 7) * 4 + (r >> 1)) * 4 + (f >= 8 ? 2 : 0) + (r & 1);
            float s = 0.f;
            ONYX_UNROLL
            for (int w = 0; w < kStreamWarps; ++w) s += part[w * 128 + at];
            return s;
          };
          if (col < a.n && r < rows) {
            float v = total(j);
            if constexpr (G == 2) v = gated_value(v, total(j + kOuts), a.act);
            else v += bias_of<T>(a, col);
            int start = 0, width = 0;
            T* dst = output_of<T>(a, col, start, width);
            dst[static_cast<size_t>(r) * width + (col - start)] = from_compute<T>(v);
          }
        }
        fence_before_refill();  // before the copy engine refills it
        __syncthreads();
      }
    } else {
      const uint4* row = stages + (i % stage_count) * kTileRows * kChunkPacks + warp * kChunkPacks;
      for (int p = lane; p < packs; p += 32) {
        const uint4 wv = row[p];
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) {
          if (r >= rows) continue;
          float xf[P];
          pack_to_floats<T>(x_shared ? xs[r * a.k_packs + first + p] : __ldg(xg + r * a.k_packs + first + p), xf);
          acc[r] += dot_pack<T>(wv, xf);
        }
      }
      if (last) {  // the tile's sums are complete: into shared memory, then the outputs
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) {
          ONYX_UNROLL
          for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
          if (lane == 0) sums[warp][r] = acc[r];
          acc[r] = 0.f;
        }
      }
      __syncthreads();  // every warp is done with this stage before it is refilled; the sums are in
      if (last && static_cast<int>(threadIdx.x) < kOuts * R) {
        const int j = threadIdx.x / R, r = threadIdx.x % R, col = tile * kOuts + j;
        if (col < a.n && r < rows) {
          float v = sums[j][r];
          if constexpr (G == 2) v = gated_value(v, sums[kOuts + j][r], a.act);
          else v += bias_of<T>(a, col);
          int start = 0, width = 0;
          T* dst = output_of<T>(a, col, start, width);
          dst[static_cast<size_t>(r) * width + (col - start)] = from_compute<T>(v);
        }
      }
      if (last) __syncthreads();  // the sums are read before the next tile's overwrite them
    }
  }
}

// Whether x sits in the streaming kernel's shared memory: where it fits, and always where the
// kernel normalizes it; else the warps read it from global memory as they go (batch 8's down
// projection: 8 rows of 8,192, one tile per block, so each block reads x once either way, and
// no block waits for all of it before its first product).
bool stream_x_shared(const GemvArgs& a) {
  return a.gamma != nullptr || static_cast<size_t>(a.m) * a.k_packs * 16 <= kStreamXBytes;
}

// Whether the streaming kernel takes the product: 16-bit, up to eight rows of x, which fit its
// shared memory where it normalizes them; the kernel's arguments otherwise as the few-row kernel's.
bool stream_fits(const GemvArgs& a, DType dt) {
  return (dt == DType::kBFloat16 || dt == DType::kFloat16) && a.m <= 8 &&
         (a.gamma == nullptr || static_cast<size_t>(a.m) * a.k_packs * 16 <= kStreamXBytes);
}

std::atomic<int> g_few_row_path{static_cast<int>(FewRowPath::kDefault)};

template <class T, int R, int G, bool kNorm, bool kMma>
void launch_stream(const GemvArgs& a, CudaContext& cu) {
  auto kernel = stream_kernel<T, R, G, kNorm, kMma>;
  constexpr size_t stage_bytes = static_cast<size_t>(kTileRows) * kChunkPacks * 16;
  const bool x_shared = stream_x_shared(a);
  const size_t x_bytes = x_shared ? static_cast<size_t>(a.m) * a.k_packs * 16 : 0;
  // The static part (the barriers, the tile's sums, the norm's partial sums) comes out of the
  // same 227 KiB.
  static size_t dynamic[64] = {};
  static std::once_flag once[64];
  std::call_once(once[cu.device & 63], [&] {
    cudaFuncAttributes attr{};
    ONYX_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    const size_t d = (kStreamSmem - attr.sharedSizeBytes) & ~size_t{127};
    ONYX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(d)));
    dynamic[cu.device & 63] = d;
  });
  const int stages = static_cast<int>(std::min<size_t>(kMaxStages, (dynamic[cu.device & 63] - x_bytes) / stage_bytes));
  const int64_t tiles = (a.n + kTileRows / G - 1) / (kTileRows / G);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tiles, sm_count(cu.device)));
  launch_kernel(kernel, dim3(blocks), dim3(kStreamWarps * 32), stages * stage_bytes + x_bytes, cu, a, stages, x_shared);
}

// One row: a warp per weight row; two to eight (or one under FewRowPath::kTensorCores): the
// tensor-core form (at two rows 0.81-0.89x the warp-per-row form's time on an H200 for the
// decode step's larger products, the same at one: bench/cuda_bench.cpp).
template <class T, int G, bool kNorm>
void run_stream(const GemvArgs& a, CudaContext& cu) {
  const bool mma = a.m > 1 || g_few_row_path.load(std::memory_order_relaxed) == static_cast<int>(FewRowPath::kTensorCores);
  if (mma) launch_stream<T, 8, G, kNorm, true>(a, cu);
  else launch_stream<T, 1, G, kNorm, false>(a, cu);
}

template <class T, int R, int CPW, int G, int U, bool kNorm>
void launch_gemv(const GemvArgs& a, CudaContext& cu) {
  auto kernel = gemv_kernel<T, R, CPW, G, U, kNorm>;
  const size_t smem = kNorm ? static_cast<size_t>(std::min(a.m, R)) * a.k_packs * 16 : 0;
  // As many blocks as the SMs hold at once (asked once per kernel, device and shared memory
  // size), or fewer.
  static std::mutex mutex;
  static std::map<std::pair<int, size_t>, int> resident;
  int per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = resident.find({cu.device, smem});
    if (it == resident.end()) {
      if (smem > 48 * 1024)
        ONYX_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      ONYX_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvWarps * 32, smem));
      it = resident.emplace(std::make_pair(cu.device, smem), std::max(per_sm, 1)).first;
    }
    per_sm = it->second;
  }
  const int64_t groups = (a.n + CPW - 1) / CPW, want = (groups + kGemvWarps - 1) / kGemvWarps;
  const int64_t blocks = std::min<int64_t>(want, static_cast<int64_t>(sm_count(cu.device)) * per_sm);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((a.m + R - 1) / R));
  launch_kernel(kernel, grid, dim3(kGemvWarps * 32), smem, cu, a);
}

// Rows of x at a time by the kernel's row bound: 1, 2, 4 or 8; sixteen 16-byte loads in flight
// per lane for one or two rows, eight past that, where four weight rows per warp share each
// x pack.
template <class T, int G, bool kNorm>
void run_gemv(const GemvArgs& a, CudaContext& cu) {
  if (a.m == 1) launch_gemv<T, 1, 2, G, 8 / G, kNorm>(a, cu);
  else if (a.m == 2) launch_gemv<T, 2, 2, G, 8 / G, kNorm>(a, cu);
  else if (a.m <= 4) launch_gemv<T, 4, 4 / G, G, 2, kNorm>(a, cu);
  else launch_gemv<T, 8, 4 / G, G, 2, kNorm>(a, cu);
}

std::string shapes(const char* op, const Tensor& x, const Tensor& w) {
  return cat(op, " x ", x.shape().str(), " by weight ", w.shape().str());
}

template <class T>
__global__ void gate_rows_kernel(const T* __restrict__ d, T* __restrict__ y, int64_t rows, int64_t f, int act) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = rows * f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const float g = to_compute(d[r * 2 * f + j]);
    y[i] = from_compute<T>(gated_value(g, to_compute(d[r * 2 * f + f + j]), act));
  }
}

// The workspace (32 MiB) as the library path uses it: cuBLASLt's part first, then room for the
// normalized rows (RmsNormLinear) and the gated form's two products, a chunk of rows at a time.
constexpr size_t kLtWorkspace = 8ull << 20;

// One product of the library path: x rows [0, m) by the weight, into the outputs (each a block
// of weight rows, written from `row0` on), or for the gated form both products into `scratch`
// and the gating into outputs[0].
struct Product {
  const Tensor& w;
  bool gated;
  std::vector<std::pair<char*, int64_t>> outputs;  // base pointer, columns
  std::string where;
  const char* bias = nullptr;  // [N] or null (not gated)
  GateActivation act = GateActivation::kSilu;  // gated: the gate's activation
};

// y[r, j] += b[j] over `rows` rows of `n` (the library path's bias where cuBLASLt's epilogue
// cannot take it: a bias pointer not 16-byte aligned).
template <class T>
__global__ void add_bias_rows_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t rows, int64_t n) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = rows * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = from_compute<T>(to_compute(y[i]) + to_compute(b[i % n]));
}

void library_rows(const Product& p, const void* x, int64_t m, int64_t row0, void* scratch, CudaContext& cu) {
  const int64_t k = p.w.shape()[1];
  const size_t es = dtype_size(p.w.dtype());
  CudaContext lt = cu;
  lt.workspace_bytes = kLtWorkspace;
  GemmCall g;
  g.dtype = p.w.dtype();
  g.tb = true;
  g.m = m;
  g.k = k;
  g.lda = k;
  g.ldb = k;
  g.a = x;
  if (p.gated) {
    const int64_t f = p.w.shape()[0] / 2;
    g.n = 2 * f;
    g.ldd = 2 * f;
    g.b = p.w.raw();
    g.d = scratch;
    run_gemm(g, lt, p.where);
    dispatch_float(p.w.dtype(), "SiluGateLinear", [&](auto tag) {
      using T = typename decltype(tag)::type;
      launch_kernel(gate_rows_kernel<T>, resident_blocks_for(m * f, cu.device), kThreads, 0, cu,
                    static_cast<const T*>(scratch), reinterpret_cast<T*>(p.outputs[0].first) + row0 * f, m, f,
                    static_cast<int>(p.act));
    });
    ONYX_CUDA_CHECK_LAUNCH("SiluGateLinear");
    return;
  }
  int64_t first = 0;
  for (const auto& [base, cols] : p.outputs) {
    g.n = cols;
    g.ldd = cols;
    g.b = static_cast<const char*>(p.w.raw()) + static_cast<size_t>(first * k) * es;
    g.d = base + static_cast<size_t>(row0 * cols) * es;
    const char* bias = p.bias ? p.bias + static_cast<size_t>(first) * es : nullptr;
    const bool epilogue = bias && is_aligned(bias, 16);
    g.bias = epilogue ? bias : nullptr;
    run_gemm(g, lt, p.where);
    if (bias && !epilogue) {
      dispatch_float(p.w.dtype(), "Linear", [&](auto tag) {
        using T = typename decltype(tag)::type;
        launch_kernel(add_bias_rows_kernel<T>, resident_blocks_for(m * cols, cu.device), kThreads, 0, cu,
                      reinterpret_cast<T*>(g.d), reinterpret_cast<const T*>(bias), m, cols);
      });
      ONYX_CUDA_CHECK_LAUNCH("Linear's bias");
    }
    first += cols;
  }
}

// The library path over all m rows: x as it is, or (norm) each chunk of rows normalized into the
// workspace first.
struct NormInputs {
  const void* skip = nullptr;
  const void* gamma = nullptr;
  void* sum = nullptr;
  float eps = 0.f;
};

void library_path(const Product& p, const void* x, int64_t m, const NormInputs* norm, CudaContext& cu) {
  const int64_t k = p.w.shape()[1];
  const size_t es = dtype_size(p.w.dtype());
  const size_t per_row = (norm ? static_cast<size_t>(k) * es : 0) +
                         (p.gated ? static_cast<size_t>(p.w.shape()[0]) * es : 0);
  if (per_row == 0) {
    library_rows(p, x, m, 0, nullptr, cu);
    return;
  }
  ONYX_CHECK(cu.workspace_bytes > kLtWorkspace + per_row, p.where, ": one row (", per_row,
             " bytes) does not fit the workspace of ", cu.workspace_bytes, " bytes");
  const int64_t chunk = static_cast<int64_t>((cu.workspace_bytes - kLtWorkspace) / per_row);
  char* room = static_cast<char*>(cu.workspace) + kLtWorkspace;
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    const char* xr = static_cast<const char*>(x) + static_cast<size_t>(r0 * k) * es;
    const void* in = xr;
    char* scratch = room;
    if (norm) {
      rms_norm_rows(p.w.dtype(), xr,
                    norm->skip ? static_cast<const char*>(norm->skip) + (xr - static_cast<const char*>(x)) : nullptr,
                    norm->gamma, room,
                    norm->sum ? static_cast<char*>(norm->sum) + (xr - static_cast<const char*>(x)) : nullptr, rows, k,
                    norm->eps, cu);
      in = room;
      scratch = room + static_cast<size_t>(rows * k) * es;
    }
    library_rows(p, in, rows, r0, scratch, cu);
  }
}

// The kernel's arguments for a product, or false when the kernel does not take it (16-byte
// packs along K, aligned operands, sizes in int, at most kMaxSplits outputs, the normalized
// rows within 96 KiB of shared memory).
bool gemv_args(const Product& p, const void* x, int64_t m, const NormInputs* norm, GemvArgs& a) {
  const int64_t k = p.w.shape()[1];
  const int64_t n = p.gated ? p.w.shape()[0] / 2 : p.w.shape()[0];
  const int64_t per_pack = 16 / static_cast<int64_t>(dtype_size(p.w.dtype()));
  auto aligned = [](const void* q) { return q == nullptr || is_aligned(q, 16); };
  if (m < 1 || m > kGemvMaxRows || k <= 0 || k % per_pack != 0 || !aligned(x) || !aligned(p.w.raw()) ||
      n > (int64_t{1} << 30) || k / per_pack > (int64_t{1} << 30) || p.outputs.size() > static_cast<size_t>(kMaxSplits))
    return false;
  if (norm && (!aligned(norm->skip) || !aligned(norm->gamma) || !aligned(norm->sum) ||
               std::min<int64_t>(m, kGemvMaxRows) * k * static_cast<int64_t>(dtype_size(p.w.dtype())) > 96 * 1024))
    return false;
  a = GemvArgs{};
  a.x = x;
  a.w = p.w.raw();
  a.m = static_cast<int>(m);
  a.n = static_cast<int>(n);
  a.k_packs = static_cast<int>(k / per_pack);
  a.splits = static_cast<int>(p.outputs.size());
  int64_t end = 0;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    end += p.outputs[i].second;
    a.split_end[i] = static_cast<int>(end);
    a.out[i] = p.outputs[i].first;
  }
  if (norm) {
    a.skip = norm->skip;
    a.gamma = norm->gamma;
    a.sum = norm->sum;
    a.eps = norm->eps;
  }
  a.bias = p.bias;
  a.act = static_cast<int>(p.act);
  return true;
}

// One product. Up to 8 rows of 16-bit x that fit shared memory: the streaming kernel; up to 8
// rows of float32: the few-row kernel; everything else, and what the kernels do not take:
// cuBLASLt. (At three to eight 16-bit rows the few-row kernel's arithmetic, not its reads,
// bounds it: bench/cuda_bench.cpp.)
void run_product(const Product& p, const void* x, int64_t m, const NormInputs* norm, CudaContext& cu) {
  GemvArgs a;
  if (!gemv_args(p, x, m, norm, a)) {
    library_path(p, x, m, norm, cu);
    return;
  }
  const DType dt = p.w.dtype();
  const bool stream =
      stream_fits(a, dt) && g_few_row_path.load(std::memory_order_relaxed) != static_cast<int>(FewRowPath::kLibrary);
  if (!stream && dt != DType::kFloat32) {
    library_path(p, x, m, norm, cu);
    return;
  }
  dispatch_float(dt, "Linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, float>) {
      if (stream) {
        if (p.gated) norm ? run_stream<T, 2, true>(a, cu) : run_stream<T, 2, false>(a, cu);
        else norm ? run_stream<T, 1, true>(a, cu) : run_stream<T, 1, false>(a, cu);
        return;
      }
    }
    if (p.gated) norm ? run_gemv<T, 2, true>(a, cu) : run_gemv<T, 2, false>(a, cu);
    else norm ? run_gemv<T, 1, true>(a, cu) : run_gemv<T, 1, false>(a, cu);
  });
  ONYX_CUDA_CHECK_LAUNCH(p.where.c_str());
}

Product product_of(KernelContext& ctx, const Tensor& x, const Tensor& w, bool gated, size_t first_output,
                   const char* op) {
  ONYX_CHECK(x.dtype() == w.dtype(), op, "'s x and weight differ in dtype");
  Product p{w, gated, {}, shapes(op, x, w)};
  for (size_t i = first_output; i < ctx.num_outputs(); ++i) {
    Tensor& y = ctx.output(i);
    p.outputs.emplace_back(static_cast<char*>(y.raw()), y.shape()[y.rank() - 1]);
  }
  return p;
}

// Products with no inputs to sum (K = 0): zeros (silu(0) * 0 for the gated form).
bool empty_product(KernelContext& ctx, int64_t m, int64_t n, int64_t k, size_t first_output, CudaContext& cu) {
  if (m == 0 || n == 0) return true;
  if (k != 0) return false;
  for (size_t i = first_output; i < ctx.num_outputs(); ++i)
    ONYX_CUDA_CHECK(cudaMemsetAsync(ctx.output(i).raw(), 0, ctx.output(i).bytes(), cu.stream));
  return true;
}

// The optional bias at input `i`: [N] of the weight's dtype.
const char* bias_input(KernelContext& ctx, size_t i, const Tensor& w) {
  if (!ctx.has_input(i)) return nullptr;
  const Tensor& b = ctx.input(i);
  ONYX_CHECK(b.dtype() == w.dtype() && b.rank() == 1 && b.shape()[0] == w.shape()[0], "the bias ", b.type_str(),
             " must be [", w.shape()[0], "] of ", dtype_name(w.dtype()));
  return static_cast<const char*>(b.raw());
}

void run_linear(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const int64_t k = w.shape()[1], m = k == 0 ? 0 : x.numel() / k;
  const char* bias = bias_input(ctx, 2, w);
  ONYX_CHECK(k != 0 || !bias || m == 0, "Linear with K = 0 and a bias is not taken on CUDA");
  if (empty_product(ctx, m, w.shape()[0], k, 0, cu)) return;
  Product p = product_of(ctx, x, w, false, 0, "Linear");
  p.bias = bias;
  run_product(p, x.raw(), m, nullptr, cu);
}

void run_silu_gate_linear(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const int64_t k = w.shape()[1], m = k == 0 ? 0 : x.numel() / k;
  if (empty_product(ctx, m, w.shape()[0] / 2, k, 0, cu)) return;
  Product p = product_of(ctx, x, w, true, 0, "SiluGateLinear");
  p.act = gate_activation_of(ctx.attr_string("activation", "silu"));
  run_product(p, x.raw(), m, nullptr, cu);
}

// RmsNormLinear: x, skip (optional), gamma, w -> sum (optional), y...
void run_rms_norm_linear(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& gamma = ctx.input(2);
  const Tensor& w = ctx.input(3);
  const bool gated = ctx.attr_int("gated", 0) != 0;
  const int64_t k = w.shape()[1], m = k == 0 ? 0 : x.numel() / k;
  ONYX_CHECK(gamma.dtype() == w.dtype() && gamma.numel() == k, "gamma ", gamma.type_str(), " must be [", k, "] of ",
             dtype_name(w.dtype()));
  NormInputs norm;
  if (ctx.has_input(1)) {
    const Tensor& skip = ctx.input(1);
    ONYX_CHECK(skip.dtype() == x.dtype() && skip.shape() == x.shape(), "skip ", skip.type_str(), " must have x's type ",
               x.type_str());
    norm.skip = skip.raw();
  }
  norm.gamma = gamma.raw();
  norm.sum = ctx.has_output(0) ? ctx.output(0).raw() : nullptr;
  norm.eps = ctx.attr_float("epsilon", 1e-5f);
  if (m == 0) return;
  ONYX_CHECK(k > 0, "RmsNormLinear needs K > 0");
  Product p = product_of(ctx, x, w, gated, 1, "RmsNormLinear");
  p.bias = bias_input(ctx, 4, w);
  ONYX_CHECK(!gated || !p.bias, "RmsNormLinear's gated form takes no bias");
  if (gated) p.act = gate_activation_of(ctx.attr_string("activation", "silu"));
  run_product(p, x.raw(), m, &norm, cu);
}

std::string linear_support(const Node&, const std::vector<ValueType>& in) {
  if (in.size() < 2 || !is_cuda_float(in[0].dtype) || in[1].dtype != in[0].dtype)
    return "the linear ops on CUDA take float32/float16/bfloat16 x and weight of one dtype";
  return "";
}

}  // namespace

void set_few_row_path(FewRowPath path) { g_few_row_path.store(static_cast<int>(path), std::memory_order_relaxed); }

void register_linear_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("onyx", "Linear", 1, run_linear, linear_support));
  r.add(domain_kernel("onyx", "SiluGateLinear", 1, run_silu_gate_linear, linear_support));
  r.add(
      domain_kernel("onyx", "RmsNormLinear", 1, run_rms_norm_linear, [](const Node&, const std::vector<ValueType>& in) {
        for (const ValueType& v : in)
          if (v.dtype != DType::kUndefined && (!is_cuda_float(v.dtype) || v.dtype != in[0].dtype))
            return std::string("RmsNormLinear on CUDA takes float32/float16/bfloat16 inputs of one dtype");
        return std::string();
      }));
}

}  // namespace onyx::cuda
