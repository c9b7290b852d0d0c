// The kernels of generation's own ops (onyx.genai). CacheUpdate writes a step's new keys or
// values into a static cache at a position read on the device, so a captured step serves
// every position; a position outside the cache sets the device error word and writes nothing.
// Sample chooses each sequence's next token on the device (the rules and the CPU kernel that
// is their specification: ops/sampling.h, ops/sampling.cpp), so only token ids leave it.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "ops/sampling.h"

#include <cooperative_groups.h>

#include <mutex>

namespace onyx::cuda {

namespace {

namespace cg = cooperative_groups;

// dst[b, index + p, i] = src[b, p, i] over [outer, length, inner] views of `new`, in units U;
// the index is one position for all, or one per batch row (`per_row` outer rows each).
template <class U>
__global__ void __launch_bounds__(kThreads)
    cache_update_kernel(const U* __restrict__ src, U* __restrict__ dst, const int64_t* __restrict__ index,
                        int64_t per_row, int64_t outer, int64_t capacity, int64_t length, int64_t inner,
                        unsigned int* err) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = outer * length * inner;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, p = (e / inner) % length, b = e / (inner * length);
    const int64_t at = index[per_row ? b / per_row : 0];
    if (at < 0 || at + length > capacity) {
      if (p == 0 && i == 0) atomicOr(err, kDeviceErrorCachePosition);
      continue;
    }
    dst[(b * capacity + at + p) * inner + i] = src[e];
  }
}

void run_cache_update(KernelContext& ctx, CudaContext& cu) {
  const Tensor& cache = ctx.input(0);
  const Tensor& fresh = ctx.input(1);
  const Tensor& index = ctx.input(2);
  Tensor& out = ctx.output(0);
  const auto& cd = cache.shape().dims();
  const int64_t rank = static_cast<int64_t>(cd.size());
  const int64_t axis = norm_axis(ctx.attr_int("axis", 2), rank);
  const int64_t outer = prod(cd, 0, axis), inner = prod(cd, axis + 1, cd.size()) * dtype_size(cache.dtype());
  ONYX_CHECK(fresh.rank() == cache.rank() && index.dtype() == DType::kInt64 &&
                 (index.numel() == 1 || (axis > 0 && index.numel() == cd[0] && outer % cd[0] == 0)),
             "CacheUpdate: cache ", cache.type_str(), ", new ", fresh.type_str(), ", index ", index.type_str());
  const int64_t per_row = index.numel() > 1 ? outer / cd[0] : 0;  // 0: one index for every row
  if (out.raw() != cache.raw() && out.bytes())  // not bound to the cache itself: carry the old entries over
    ONYX_CUDA_CHECK(cudaMemcpyAsync(out.raw(), cache.raw(), out.bytes(), cudaMemcpyDeviceToDevice, cu.stream));
  const int64_t total = outer * fresh.shape()[axis] * inner;
  if (total == 0) return;
  // Bytes move in the widest unit that divides a position's bytes (4 or 1).
  const bool words = inner % 4 == 0;
  const int64_t unit_inner = words ? inner / 4 : inner;
  const unsigned blocks = resident_blocks_for(total / (words ? 4 : 1), cu.device);
  if (words)
    launch_kernel(cache_update_kernel<uint32_t>, blocks, kThreads, 0, cu, static_cast<const uint32_t*>(fresh.raw()),
                  static_cast<uint32_t*>(out.raw()), index.data<int64_t>(), per_row, outer, cd[axis],
                  fresh.shape()[axis], unit_inner, cu.error_word);
  else
    launch_kernel(cache_update_kernel<uint8_t>, blocks, kThreads, 0, cu, static_cast<const uint8_t*>(fresh.raw()),
                  static_cast<uint8_t*>(out.raw()), index.data<int64_t>(), per_row, outer, cd[axis],
                  fresh.shape()[axis], unit_inner, cu.error_word);
  ONYX_CUDA_CHECK_LAUNCH("CacheUpdate");
}


// ---- Sample: one cluster of blocks per sequence ----
//
// A row of logits (128,256 for Llama 3) is split over the blocks of a cluster (up to
// kSampleCluster, each a contiguous slice of the row): each pass over the row (the largest z,
// the threshold probes, the draw's masses) is one pass over each block's slice, and the blocks
// agree on its result through distributed shared memory. One block per row left the passes bound
// by one SM's instructions (an exp in double per token and 15 probes).

constexpr int kSampleThreads = 512;
constexpr int kSampleCluster = 16;  // Hopper's largest (non-portable: asked for, 8 where refused)

// Floats as unsigned keys in the same order (for bisection over values).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}

struct SampleArgs {
  const void* logits;
  int code;  // FCode of the logits
  int64_t S, V, H;
  const float* options;
  const int64_t* rng;
  const int64_t* history;          // null: no penalty input
  const int64_t* position;         // null: the last position
  const int64_t* generated_start;  // null: every history entry is a generated one
  int64_t* out;
  float* read;                     // null: the logits read are not an output
};

// The dynamic shared memory of a row with a history: a bitmap of the ids the penalties touch
// (a bit per token), per bitmap word the number of bits set before it (so that each id set has
// a dense rank), and per rank the count of the id among the generated entries.
struct SampleShared {
  int64_t words, counts;
  __host__ __device__ static SampleShared of(int64_t V, int64_t H) { return {(V + 31) / 32, H < V ? H : V}; }
  size_t bytes() const { return static_cast<size_t>(2 * words + counts) * sizeof(uint32_t); }
};

struct SampleRow {
  const SampleArgs& a;
  int64_t base;             // element offset of the row's position
  int64_t begin, end;       // this block's slice of the row's tokens
  const uint32_t* seen;     // bitmap of the history ids penalized (null: no penalty)
  const uint32_t* before;   // per bitmap word: the bits set before it
  const uint32_t* counts;   // per rank: generated entries of that id (null: no count penalty)
  float opt[sampling::kOptionCount];
  float inv_t;
  // z of token j from its logit l: penalized, then divided by the temperature.
  __device__ __forceinline__ float z_of(float l, int64_t j) const {
    if (seen) {
      const uint32_t word = seen[j >> 5], bit = 1u << (j & 31);
      if (word & bit) l = sampling::penalized(l, opt, counts ? counts[before[j >> 5] + __popc(word & (bit - 1))] : 0);
    }
    return l * inv_t;
  }
  __device__ float z(int64_t j) const { return z_of(load_f(a.logits, a.code, base + j), j); }
};

// The row passes are bound by the latency of their loads, not by bandwidth: one block reads a
// whole row (128,256 logits for Llama 3). So each thread has kInFlight 16-byte packs loading
// before it uses the first (a strided pass), or 8 logits of its chunk (a chunk pass).
constexpr int kInFlight = 4;

// f(l, j) for every logit l = row[j] of this thread's share: 16-byte packs strided over the
// block, the elements before the first aligned pack and after the last one singly.
template <class T, class F>
__device__ __forceinline__ void visit_typed(const T* row, int64_t V, F& f) {
  constexpr int E = 16 / sizeof(T);
  const int64_t step = blockDim.x;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row);
  int64_t head = addr % sizeof(T) ? V : static_cast<int64_t>(((16 - addr % 16) % 16) / sizeof(T));
  if (head > V) head = V;
  for (int64_t j = threadIdx.x; j < head; j += step) f(static_cast<float>(to_compute(row[j])), j);
  const int64_t packs = (V - head) / E;
  const uint4* p = reinterpret_cast<const uint4*>(row + head);
  int64_t q = threadIdx.x;
  for (; q + (kInFlight - 1) * step < packs; q += kInFlight * step) {
    uint4 w[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) w[u] = __ldcg(p + q + u * step);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      float l[E];
      pack_to_floats<T>(w[u], l);
      const int64_t j0 = head + (q + u * step) * E;
#pragma unroll
      for (int e = 0; e < E; ++e) f(l[e], j0 + e);
    }
  }
  for (; q < packs; q += step) {
    float l[E];
    pack_to_floats<T>(__ldcg(p + q), l);
#pragma unroll
    for (int e = 0; e < E; ++e) f(l[e], head + q * E + e);
  }
  for (int64_t j = head + packs * E + threadIdx.x; j < V; j += step) f(static_cast<float>(to_compute(row[j])), j);
}

// f(l, j) for every logit l = row[j] of this block's slice of the row.
template <class F>
__device__ __forceinline__ void visit_row(const SampleRow& row, F&& f) {
  const SampleArgs& a = row.a;
  const int64_t at = row.base + row.begin, n = row.end - row.begin, first = row.begin;
  auto g = [&](float l, int64_t j) { f(l, first + j); };
  if (a.code == kF32) visit_typed(static_cast<const float*>(a.logits) + at, n, g);
  else if (a.code == kF16) visit_typed(static_cast<const __half*>(a.logits) + at, n, g);
  else visit_typed(static_cast<const __nv_bfloat16*>(a.logits) + at, n, g);
}

// The blocks of a row's cluster agree on sums and maxima through distributed shared memory:
// each block leaves its part in its own exchange buffer, and after the cluster's barrier each
// reads every block's in rank order, so that every block computes the same result to the bit
// and takes the same branches. The buffers alternate: a block writes one again only after the
// barrier that follows every read of it.
constexpr int kExchange = 16;  // values per exchange (kProbes and one)

struct RowCluster {
  cg::cluster_group g;
  double* buffers;  // this block's: 2 x kExchange
  unsigned blocks, rank;
  int phase;
  // This block's buffer for the next exchange (written by its threads, then share()).
  __device__ double* mine() const { return buffers + phase * kExchange; }
  // Every block's values visible; returns the buffer to read with part().
  __device__ int share() {
    g.sync();
    const int p = phase;
    phase ^= 1;
    return p;
  }
  __device__ const double* part(unsigned r, int p) const { return g.map_shared_rank(buffers, r) + p * kExchange; }
  // The sum over the blocks (in rank order) of value i, and that of the blocks before this one.
  __device__ double sum(int p, int i) const {
    double t = 0;
    for (unsigned r = 0; r < blocks; ++r) t += part(r, p)[i];
    return t;
  }
};

// The logits [j, j + n) (n <= 8) into l, loaded before any is used.
__device__ __forceinline__ void load_run(const SampleArgs& a, int64_t at, int n, float (&l)[8]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) l[k] = k < n ? load_f(a.logits, a.code, at + k) : 0.f;
}

struct MaxIdx {  // the larger value; the smaller index among equals
  float v;
  int64_t i;
};
__device__ __forceinline__ MaxIdx better(MaxIdx x, MaxIdx y) {
  return (y.v > x.v || (y.v == x.v && y.i < x.i)) ? y : x;
}

// The sum of v over the threads before this one in the block (blockDim.x <= 32 * 32).
__device__ uint32_t exclusive_scan(uint32_t v, uint32_t* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t inclusive = v;
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  uint32_t base = 0;
  for (int w = 0; w < warp; ++w) base += scratch[w];
  return base + inclusive - v;
}

// The thresholds of top-k and top-p: the largest key K in [lo, hi) whose tokens at or above it
// weigh at least `want` (the weight of a token 1 for a count, exp(z - m) for a mass), given that
// K = lo qualifies and no key at or above hi does. Each pass weighs kProbes keys spread over the
// range at once (one accumulator each per thread), so the range shrinks 16-fold a pass: 8
// passes for 32-bit keys, where a bisection takes 32. After the second pass (and again after
// the fourth) the tokens still inside the range are gathered into shared memory, when there
// are at most kPool of them (the weight of those above it summed once): the passes after that
// read the pool, not the row.
constexpr int kProbes = 15;
constexpr int kProbeScratch = (kSampleThreads / 32) * kProbes + kProbes;
constexpr int kPool = 4096;

struct SamplePool {
  float* z;  // kPool
  int* n;
};

template <class Acc>
__device__ Acc block_sum(Acc v, Acc* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  Acc t = 0;
  for (int w = 0; w < warps; ++w) t += scratch[w];
  __syncthreads();
  return t;
}

template <class Acc, class Weight>
__device__ float largest_at_least(const SampleRow& row, RowCluster& cl, uint32_t lo, uint32_t hi, double want,
                                  Weight weight, Acc* scratch, double* totals, SamplePool pool) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  bool pooled = false;  // the pool holds this block's tokens inside the range
  int pool_n = 0;
  double above = 0;     // the weight of the row's tokens above the pool's range
  for (int pass = 0; hi - lo > 1; ++pass) {
    const float lo_v = key_value(lo), hi_v = key_value(hi);
    if (!pooled && (pass == 2 || pass == 4) && !isnan(lo_v)) {
      if (threadIdx.x == 0) *pool.n = 0;
      __syncthreads();
      Acc up = 0;
      visit_row(row, [&](float l, int64_t j) {
        const float z = row.z_of(l, j);
        const bool over = z >= hi_v;  // (false for every z where hi is a NaN key: none is above)
        const bool in = !over && z >= lo_v;
        if (over) up += weight(z);
        // One atomic per warp for the slots of its lanes' tokens.
        const unsigned active = __activemask();
        const unsigned ins = __ballot_sync(active, in);
        if (ins) {
          const int leader = __ffs(active) - 1;
          int base = 0;
          if (lane == leader) base = atomicAdd(pool.n, __popc(ins));
          base = __shfl_sync(active, base, leader);
          const int at = base + __popc(ins & ((1u << lane) - 1u));
          if (in && at < kPool) pool.z[at] = z;
        }
      });
      up = block_sum(up, scratch);
      const int n = *pool.n;
      if (threadIdx.x == 0) {
        cl.mine()[0] = static_cast<double>(up);
        cl.mine()[1] = n;
      }
      const int p = cl.share();
      // Every block pools, or none does (so that each reads what the others count).
      double most = 0, sum_up = 0;
      for (unsigned r = 0; r < cl.blocks; ++r) {
        const double* q = cl.part(r, p);
        sum_up += q[0];
        most = fmax(most, q[1]);
      }
      if (most <= kPool) {
        pooled = true;
        pool_n = n;
        above = sum_up;
      }
    }
    const uint64_t width = hi - lo;
    auto probe = [&](int i) { return lo + static_cast<uint32_t>(width * (i + 1) / (kProbes + 1)); };
    float at[kProbes];
#pragma unroll
    for (int i = 0; i < kProbes; ++i) at[i] = key_value(probe(i));
    // The keys below every float's (negative NaNs) compare false: the first real probe bounds
    // the tokens worth weighing.
    float least = INFINITY;
#pragma unroll
    for (int i = kProbes - 1; i >= 0; --i)
      if (!isnan(at[i])) least = at[i];
    Acc acc[kProbes];
#pragma unroll
    for (int i = 0; i < kProbes; ++i) acc[i] = Acc(0);
    auto weigh = [&](float z) {
      if (!(z >= least)) return;
      const Acc w = weight(z);
#pragma unroll
      for (int i = 0; i < kProbes; ++i)
        if (z >= at[i]) acc[i] += w;
    };
    if (pooled)
      for (int i = threadIdx.x; i < pool_n; i += blockDim.x) weigh(pool.z[i]);
    else
      visit_row(row, [&](float l, int64_t j) { weigh(row.z_of(l, j)); });
#pragma unroll
    for (int i = 0; i < kProbes; ++i)
      for (int o = 16; o > 0; o >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], o);
    __syncthreads();  // the last pass's block sums may still be read
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < kProbes; ++i) scratch[warp * kProbes + i] = acc[i];
    __syncthreads();
    if (threadIdx.x < kProbes) {
      Acc t = 0;
      for (int w = 0; w < warps; ++w) t += scratch[w * kProbes + threadIdx.x];
      cl.mine()[threadIdx.x] = static_cast<double>(t);
    }
    const int p = cl.share();
    if (threadIdx.x < kProbes) totals[threadIdx.x] = (pooled ? above : 0.0) + cl.sum(p, threadIdx.x);
    __syncthreads();
    // The weights fall as the key rises (each probe's tokens are a subset of the one before's,
    // summed in the same order), so the probes that qualify are a prefix.
    int last = -1;
    for (int i = 0; i < kProbes; ++i)
      if (totals[i] >= want) last = i;
    const uint32_t next_lo = last >= 0 ? probe(last) : lo;
    if (last + 1 < kProbes) hi = probe(last + 1);
    lo = next_lo;
  }
  return key_value(lo);
}

// One cluster of `gridDim.x / B` blocks per row (blockIdx.x / blocks is the row).
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(SampleArgs a) {
  ONYX_KERNEL_PROLOGUE();
  extern __shared__ uint32_t shared[];
  __shared__ double dscratch[32];
  __shared__ float fscratch[32];
  __shared__ int64_t iscratch[32];
  __shared__ uint32_t uscratch[32];
  __shared__ double probe_scratch[kProbeScratch];
  __shared__ double totals[kProbes];
  __shared__ double exchange[2 * kExchange];
  __shared__ float pool_z[kPool];
  __shared__ int pool_n;
  RowCluster cl{cg::this_cluster(), exchange, 0, 0, 0};
  cl.blocks = cl.g.num_blocks();
  cl.rank = cl.g.block_rank();
  const int64_t b = blockIdx.x / cl.blocks, V = a.V;
  SampleRow row{a, 0, 0, 0, nullptr, nullptr, nullptr, {}, 1.f};
  {
    // Slices of whole 16-byte packs of 16-bit logits where the row allows.
    const int64_t per = ((V + cl.blocks - 1) / cl.blocks + 7) / 8 * 8;
    row.begin = min(V, per * cl.rank);
    row.end = min(V, row.begin + per);
  }
  for (int o = 0; o < sampling::kOptionCount; ++o) row.opt[o] = a.options[b * sampling::kOptionCount + o];
  const float t = row.opt[sampling::kTemperature];
  const bool repetition = sampling::repetition_applies(row.opt), counted = sampling::counts_apply(row.opt);
  if (a.history && (repetition || counted)) {
    // The bitmap of the ids penalized (every entry for the repetition penalty, else the
    // generated ones), then, for the count penalties, each id's rank among the bits set and
    // the count of its generated entries by rank. Each block of the row makes its own.
    const SampleShared sh = SampleShared::of(V, a.H);
    uint32_t* seen = shared;
    uint32_t* before = shared + sh.words;
    uint32_t* counts = before + sh.words;
    const int64_t* history = a.history + b * a.H;
    const int64_t gen = a.generated_start ? a.generated_start[b] : 0;
    for (int64_t w = threadIdx.x; w < sh.words; w += blockDim.x) seen[w] = 0;
    if (counted)
      for (int64_t c = threadIdx.x; c < sh.counts; c += blockDim.x) counts[c] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < a.H; i += blockDim.x) {
      const int64_t id = history[i];
      if (id >= 0 && id < V && (repetition || i >= gen)) atomicOr(&seen[id >> 5], 1u << (id & 31));
    }
    __syncthreads();
    if (counted) {
      // An exclusive scan of the words' popcounts: each thread one contiguous chunk of words.
      const int64_t chunk = (sh.words + blockDim.x - 1) / blockDim.x;
      const int64_t begin = threadIdx.x * chunk, end = min(sh.words, begin + chunk);
      uint32_t own = 0;
      for (int64_t w = begin; w < end; ++w) own += __popc(seen[w]);
      uint32_t at = exclusive_scan(own, uscratch);
      for (int64_t w = begin; w < end; ++w) {
        before[w] = at;
        at += __popc(seen[w]);
      }
      __syncthreads();
      for (int64_t i = max(int64_t{0}, min(gen, a.H)) + threadIdx.x; i < a.H; i += blockDim.x) {
        const int64_t id = history[i];
        if (id < 0 || id >= V) continue;
        const uint32_t word = seen[id >> 5], bit = 1u << (id & 31);
        atomicAdd(&counts[before[id >> 5] + __popc(word & (bit - 1))], 1u);
      }
      __syncthreads();
      row.counts = counts;
    }
    row.seen = seen;
    row.before = before;
  }
  int64_t s = a.position ? a.position[b] : a.S - 1;
  if (s < 0 || s >= a.S) s = a.S - 1;  // checked on the host where positions are known; never read outside
  row.base = (b * a.S + s) * V;
  row.inv_t = t == 0.f ? 1.f : 1.f / t;
  // The largest z (and, for greedy, its first index); the logits read are kept where asked.
  MaxIdx best{-INFINITY, V};
  float* read = a.read ? a.read + b * V : nullptr;
  visit_row(row, [&](float l, int64_t j) {
    if (read) read[j] = l;
    best = better(best, MaxIdx{row.z_of(l, j), j});
  });
  for (int o = 16; o > 0; o >>= 1) {
    MaxIdx other{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.i, o)};
    best = better(best, other);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  if (lane == 0) {
    fscratch[warp] = best.v;
    iscratch[warp] = best.i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    best = MaxIdx{fscratch[0], iscratch[0]};
    for (int w = 1; w < warps; ++w) best = better(best, MaxIdx{fscratch[w], iscratch[w]});
    cl.mine()[0] = best.v;  // (a float and an index below 2^53: exact in a double)
    cl.mine()[1] = static_cast<double>(best.i);
  }
  {
    const int p = cl.share();
    if (threadIdx.x == 0) {
      best = MaxIdx{-INFINITY, V};
      for (unsigned r = 0; r < cl.blocks; ++r) {
        const double* q = cl.part(r, p);
        best = better(best, MaxIdx{static_cast<float>(q[0]), static_cast<int64_t>(q[1])});
      }
      fscratch[0] = best.v;
      iscratch[0] = best.i;
    }
    __syncthreads();
    best = MaxIdx{fscratch[0], iscratch[0]};
  }
  if (t == 0.f) {
    if (cl.rank == 0 && threadIdx.x == 0) a.out[b] = best.i;
    cl.g.sync();  // no block leaves while another may still read its exchange buffer
    return;
  }
  const float m = best.v;
  auto mass_at_least = [&](float tau) {
    double s = 0;
    visit_row(row, [&](float l, int64_t j) {
      const float v = row.z_of(l, j);
      if (v >= tau) s += exp(double(v) - m);
    });
    s = block_reduce(s, [](double x, double y) { return x + y; }, dscratch);
    if (threadIdx.x == 0) cl.mine()[0] = s;
    const int p = cl.share();
    return cl.sum(p, 0);
  };
  float tau = -INFINITY;
  const uint32_t top = order_key(m) + 1;  // no z reaches key_value(top)
  const float* opt = row.opt;
  const int64_t k = static_cast<int64_t>(opt[sampling::kTopK]);
  if (k > 0 && k < V)
    tau = largest_at_least<uint32_t>(row, cl, 0u, top, static_cast<double>(k), [](float) { return 1u; },
                                     reinterpret_cast<uint32_t*>(probe_scratch), totals, SamplePool{pool_z, &pool_n});
  if (opt[sampling::kTopP] < 1.f) {
    const double want = double(opt[sampling::kTopP]) * mass_at_least(tau);
    tau = largest_at_least<double>(row, cl, order_key(tau), top, want, [m](float z) { return exp(double(z) - m); },
                                   probe_scratch, totals, SamplePool{pool_z, &pool_n});
  }
  if (opt[sampling::kMinP] > 0.f) tau = fmaxf(tau, m + logf(opt[sampling::kMinP]));
  // Draw: the first kept token whose running mass passes u * total, in index order. Each
  // thread takes one contiguous chunk of its block's slice; the chunk holding the target walks
  // it. The chunks' ranges [before, after) of running mass are computed so that each one's end
  // is, to the bit, the next one's start (and the last one's end the total), so exactly one
  // chunk holds a target below the total.
  const int64_t chunk = (row.end - row.begin + blockDim.x - 1) / blockDim.x;
  const int64_t begin = min(row.end, row.begin + threadIdx.x * chunk), end = min(row.end, begin + chunk);
  double own = 0;
  for (int64_t j = begin; j < end; j += 8) {
    const int n = static_cast<int>(min(int64_t{8}, end - j));
    float l[8];
    load_run(a, row.base + j, n, l);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float v = k < n ? row.z_of(l[k], j + k) : -INFINITY;
      if (v >= tau) own += exp(double(v) - m);
    }
  }
  // An inclusive scan of the chunk masses over the warp, then over the warps (blockDim.x <= 32 * 32).
  double inclusive = own;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  double previous = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) previous = 0;
  __syncthreads();  // the last reduction may still be reading dscratch
  if (lane == 31) dscratch[warp] = inclusive;
  __syncthreads();
  double warp_base = 0;
  for (int w = 0; w < warp; ++w) warp_base += dscratch[w];
  if (threadIdx.x == 0) {
    double block_total = 0;
    for (int w = 0; w < warps; ++w) block_total += dscratch[w];
    cl.mine()[0] = block_total;
  }
  const int p = cl.share();
  double block_base = 0, total = 0;
  for (unsigned r = 0; r < cl.blocks; ++r) {
    const double q = cl.part(r, p)[0];
    if (r < cl.rank) block_base += q;
    total += q;
  }
  const double before = (previous + warp_base) + block_base, after = (inclusive + warp_base) + block_base;
  const int64_t* r = a.rng + b * 2;
  const double target = sampling::uniform(static_cast<uint64_t>(r[0]), static_cast<uint64_t>(r[1])) * total;
  if (before <= target && target < after) {
    double cum = before;
    int64_t last = begin;
    bool found = false;
    for (int64_t j = begin; j < end && !found; j += 8) {
      const int n = static_cast<int>(min(int64_t{8}, end - j));
      float l[8];
      load_run(a, row.base + j, n, l);
      for (int k = 0; k < n; ++k) {
        const float v = row.z_of(l[k], j + k);
        if (v < tau) continue;
        last = j + k;
        cum += exp(double(v) - m);
        if (cum > target) {
          found = true;
          break;
        }
      }
    }
    a.out[b] = last;
  }
  // Rounding can leave the target at the very end: the last kept token then.
  if (cl.rank + 1 == cl.blocks && threadIdx.x == blockDim.x - 1 && target >= total) {
    int64_t last = 0;
    for (int64_t j = V - 1; j >= 0; --j)
      if (row.z(j) >= tau) {
        last = j;
        break;
      }
    a.out[b] = last;
  }
  cl.g.sync();  // no block leaves while another may still read its exchange buffer
}

// The dynamic shared memory a Sample block may have on `device`: without asking (48 KiB less
// the kernel's static shared memory) and at most (the device's opt-in limit less the same).
// Asked once per device (not stream operations, so harmless during graph capture); where the
// device cannot say (known false), 46 KiB for both.
struct SampleLimits {
  size_t by_default = 0, at_most = 0;
  bool known = true;
};
SampleLimits sample_shared_limits(int device) {
  static std::atomic<int64_t> cache[64][2] = {};
  const SampleLimits unknown{46 * 1024, 46 * 1024, false};
  if (device < 0 || device >= 64) return unknown;
  if (cache[device][1].load(std::memory_order_acquire) == 0) {
    int optin = 0;
    cudaFuncAttributes attr{};
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
        cudaFuncGetAttributes(&attr, sample_kernel) != cudaSuccess) {
      (void)cudaGetLastError();  // clear it so that the next launch check does not report it
      return unknown;
    }
    const int64_t own = static_cast<int64_t>(attr.sharedSizeBytes);
    cache[device][0].store(std::max<int64_t>(0, 48 * 1024 - own), std::memory_order_relaxed);
    cache[device][1].store(std::max<int64_t>(1, optin - own), std::memory_order_release);
  }
  return {static_cast<size_t>(cache[device][0].load(std::memory_order_relaxed)),
          static_cast<size_t>(cache[device][1].load(std::memory_order_acquire))};
}

// Lets Sample blocks on `device` have up to `limits.at_most` bytes of dynamic shared memory
// (once per device).
void allow_sample_shared(int device, const SampleLimits& limits) {
  static std::atomic<bool> done[64] = {};
  if (device < 0 || device >= 64 || done[device].load(std::memory_order_acquire)) return;
  ONYX_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(limits.at_most)));
  done[device].store(true, std::memory_order_release);
}

// The blocks of a row's cluster: `want` at most, at most kSampleCluster, and no more than the
// device holds at once with `shared` bytes of dynamic shared memory per block (asked once per
// device and size; not a stream operation, so harmless during graph capture).
int sample_cluster(int device, size_t shared, int64_t want) {
  int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kSampleCluster, want)));
  if (blocks == 1 || device < 0 || device >= 64) return blocks;
  // Per device and cluster size: one more than the largest shared memory known to fit (0: none).
  static std::atomic<int64_t> fits[64][kSampleCluster + 1] = {};
  static std::once_flag non_portable[64];
  std::call_once(non_portable[device], [] {
    if (cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
      (void)cudaGetLastError();  // then the size query below refuses more than 8
  });
  for (; blocks > 1; blocks /= 2) {
    const int slot = blocks;
    if (static_cast<size_t>(fits[device][slot].load(std::memory_order_acquire)) >= shared + 1) return blocks;
    const ClusterLaunch query(dim3(static_cast<unsigned>(blocks)), dim3(kSampleThreads), shared,
                              static_cast<unsigned>(blocks), nullptr, false);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, sample_kernel, &query.cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // clear it so that the next launch check does not report it
      clusters = 0;
    }
    if (clusters > 0) {
      int64_t known = fits[device][slot].load(std::memory_order_relaxed);
      const int64_t now = static_cast<int64_t>(shared) + 1;
      while (known < now && !fits[device][slot].compare_exchange_weak(known, now)) {
      }
      return blocks;
    }
  }
  return 1;
}

std::string sample_shared_refusal(int64_t V, int64_t H, size_t shared, size_t limit) {
  return cat("Sample on CUDA: the penalties of ", V, " tokens over a history of ", H, " ids need ", shared,
             " bytes of shared memory, more than the ", limit, " a block can have");
}

void run_sample(KernelContext& ctx, CudaContext& cu) {
  const Tensor& logits = ctx.input(0);
  SampleArgs a;
  a.logits = logits.raw();
  a.code = fcode(logits.dtype());
  a.S = logits.shape()[1];
  a.V = logits.shape()[2];
  a.options = ctx.input(1).data<float>();
  a.rng = ctx.input(2).data<int64_t>();
  a.history = ctx.has_input(3) ? ctx.input(3).data<int64_t>() : nullptr;
  a.H = ctx.has_input(3) ? ctx.input(3).shape()[1] : 0;
  a.position = ctx.has_input(4) ? ctx.input(4).data<int64_t>() : nullptr;
  a.generated_start = ctx.has_input(5) ? ctx.input(5).data<int64_t>() : nullptr;
  a.out = ctx.output(0).data<int64_t>();
  a.read = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
  const int64_t B = logits.shape()[0];
  if (B == 0) return;
  ONYX_CHECK(a.S > 0 && a.V > 0, "logits ", logits.type_str(), " have no position or no token to sample from");
  const size_t shared = a.history ? SampleShared::of(a.V, a.H).bytes() : 0;
  const SampleLimits limits = sample_shared_limits(cu.device);
  if (shared > limits.by_default) {
    ONYX_CHECK(shared <= limits.at_most, sample_shared_refusal(a.V, a.H, shared, limits.at_most));
    allow_sample_shared(cu.device, limits);
  }
  // A cluster of up to 16 blocks per row, each a slice of at least 1,024 tokens; fewer where the
  // device cannot hold the cluster with this much shared memory per block. (A cluster of 16 needs
  // 16 free SMs of one GPC, which not every GPC of an H200 has: at 8 rows some clusters may wait
  // for others, which still took less than clusters of 8 there.)
  const int blocks = sample_cluster(cu.device, shared, (a.V + 1023) / 1024);
  ONYX_CHECK(B <= INT32_MAX / blocks, "Sample on CUDA: ", B, " rows are more than one launch takes");
  launch_clusters(sample_kernel, dim3(static_cast<unsigned>(B * blocks)), dim3(kSampleThreads), shared,
                  static_cast<unsigned>(blocks), cu, a);
  ONYX_CUDA_CHECK_LAUNCH("Sample");
}

}  // namespace

void register_genai_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel(
      "onyx.genai", "Sample", 1, run_sample, [](const Node&, const std::vector<ValueType>& in) -> std::string {
        if (in.empty() || !is_cuda_float(in[0].dtype)) return "Sample on CUDA takes float32/float16/bfloat16 logits";
        // The penalties' bitmap, ranks and counts live in shared memory (SampleShared): a history
        // too long for it, with this vocabulary, runs on the CPU.
        const PartialShape& l = in[0].shape;
        if (in.size() > 3 && in[3].dtype != DType::kUndefined && l.rank_known && l.dims.size() == 3 && l.dims[2] > 0 &&
            in[3].shape.rank_known && in[3].shape.dims.size() == 2 && in[3].shape.dims[1] >= 0) {
          const size_t shared = SampleShared::of(l.dims[2], in[3].shape.dims[1]).bytes();
          int device = 0;
          if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
          // (A device that cannot say declines nothing here: the launch finds out.)
          const SampleLimits limits = sample_shared_limits(device);
          if (limits.known && shared > limits.at_most)
            return sample_shared_refusal(l.dims[2], in[3].shape.dims[1], shared, limits.at_most);
        }
        return "";
      }));
  r.add(domain_kernel("onyx.genai", "CacheUpdate", 1, run_cache_update,
                      [](const Node&, const std::vector<ValueType>& in) -> std::string {
                        if (in.size() < 3 || in[2].dtype != DType::kInt64) return "CacheUpdate takes an int64 index";
                        const DType t = in[0].dtype;
                        return t == DType::kString || t == DType::kUndefined
                                   ? "CacheUpdate on CUDA moves fixed-size types"
                                   : "";
                      }));
}

}  // namespace onyx::cuda
