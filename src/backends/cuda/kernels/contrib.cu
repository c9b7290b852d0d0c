// CUDA kernels of the com.microsoft ops that onnxruntime-genai's builder emits:
// GroupQueryAttention and GatherBlockQuantized (tied int4 embeddings; MatMulNBits is in
// matmul_nbits.cu), and MultiHeadAttention (Optimum's BERT, T5 and Whisper exports). The
// semantics are the CPU kernels' (ops/gqa.h, ops/group_query_attention.cpp, ops/mha.h,
// ops/multi_head_attention.cpp), which the harness compares these with.
//
// GroupQueryAttention reads seqlens_k and total_sequence_length on the device, so a captured
// decode step serves every length: each block works out its row's lengths itself, and lengths
// that do not fit the buffers set the device error word (the CPU kernel's checks) and leave the
// row's output zero. Two launches: the new keys (rotated) and values into present at their
// positions, then one block per (query, head, batch row) with an online softmax over its keys,
// its warps taking keys in turn and merging at the end, in float. A window cache
// (sliding_window_cache=1, onnxruntime-genai's Gemma 2) runs them the other way round: the
// attention reads the held past positions from past and the new keys from the inputs (rotated
// as it reads them), then one block per (KV head, batch row) moves the positions the window
// keeps to the front of present, in place where present is past's own storage. Not on CUDA
// (the CPU kernel runs them): query_seqlens, head sizes above 256, an absent present.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "ops/block_quant.h"
#include "ops/gqa.h"
#include "ops/mha.h"

namespace onyx::cuda {

namespace {

// ================================ GroupQueryAttention ================================

constexpr int kGqaThreads = 256;
constexpr int kGqaWarps = kGqaThreads / 32;
constexpr int kGqaMaxHead = 256;
constexpr int kGqaPerLane = kGqaMaxHead / 32;

struct GqaArgs {
  const void* q;  // [B, S, qw]: the queries, and for a packed query the keys and values after them
  const void* k;  // [B, S, kvN * H] (null: packed)
  const void* v;
  void* present_k;  // [B, kvN, L, H]
  void* present_v;
  const void* past_k;  // [B, kvN, L, H], read by a window cache (may be present's own storage)
  const void* past_v;
  void* y;  // [B, S, N * H]
  const int32_t* seqlens_k;
  const int32_t* total;  // total_sequence_length, one value
  const void* cosc;      // [cache_rows, half] (null: no rotary)
  const void* sinc;
  const int64_t* pos_ids;  // [B, S] (null: none)
  const void* bias;        // attention_bias [b0, b1, S, bias_len] (null: none)
  const void* sink;        // head_sink [N] (null: none)
  int64_t B, S, N, kvN, H, L, past_len, qw;
  int64_t half, cache_rows;
  int64_t bias_b, bias_h, bias_len;
  int64_t window;  // -1: none
  float scale, softcap;
  int interleaved, causal, smooth;
  int window_cache;  // sliding_window_cache=1: L is the capacity, rows hold the last positions
  unsigned int* err;
};

// Row b's lengths for this step, as gqa_step works them out; false (the error word set) when
// they do not fit, as the CPU kernel's checks would have thrown.
// held_before / held_after: the rows of past / present holding positions, the last ones
// (ops/gqa.h's GqaRow); without a window cache row p holds position p.
struct GqaRowDev {
  int64_t total, past;
  int64_t held_before, held_after;
  bool first_prompt;
};

// ops/gqa.h's window_cache_held: the rows a window cache of `capacity` holds after T positions.
__device__ __forceinline__ int64_t gqa_window_held(int64_t T, int64_t capacity, int64_t window) {
  if (T <= capacity) return T;
  const int64_t gap = capacity - window + 1;
  return T - gap * ((T - capacity + gap - 1) / gap);
}

__device__ __forceinline__ bool gqa_row(const GqaArgs& a, int64_t b, GqaRowDev& r) {
  const int64_t total = *a.total;
  const int32_t sk = a.seqlens_k[b];
  r.first_prompt = a.S == total;
  r.total = int64_t{sk} + 1;
  bool ok = total >= 1 && sk >= 0 && (a.S == 1 || r.first_prompt || a.B == 1) && (!a.bias || r.total <= a.bias_len);
  if (a.window_cache) {  // positions are absolute and the cache holds the last ones
    r.past = r.total - a.S;
    ok = ok && r.past >= 0;
    r.held_before = ok ? gqa_window_held(r.past, a.L, a.window) : 0;
    r.held_after = ok ? gqa_window_held(r.total, a.L, a.window) : 0;
  } else {
    r.past = r.first_prompt ? 0 : r.total - a.S;
    ok = ok && r.total <= a.L && r.past >= 0 && r.past <= a.past_len && r.past + a.S <= a.L;
    r.held_before = r.past;
    r.held_after = r.past + a.S;
  }
  if (!ok) atomicOr(a.err, kDeviceErrorAttentionLengths);
  return ok;
}

// The rotary position of token s of row b (false, the error word set: outside the caches).
__device__ __forceinline__ bool gqa_position(const GqaArgs& a, int64_t b, int64_t s, const GqaRowDev& r,
                                             int64_t& p) {
  p = r.first_prompt ? s : r.past + s;
  if (a.pos_ids) p = r.first_prompt ? a.pos_ids[0] + s : a.pos_ids[b * a.S + s];
  if (p < 0 || p >= a.cache_rows) {
    atomicOr(a.err, kDeviceErrorRotaryPosition);
    return false;
  }
  return true;
}

// Element d of a rotated head vector x (its first 2 * half values rotated, in halves or pairs).
template <class T>
__device__ __forceinline__ float rotated(const GqaArgs& a, const T* x, int64_t d, int64_t p) {
  if (!a.cosc || d >= 2 * a.half) return to_compute(x[d]);
  int64_t j, i1, i2;
  bool first;
  if (a.interleaved) {
    j = d / 2;
    first = (d & 1) == 0;
    i1 = 2 * j;
    i2 = i1 + 1;
  } else {
    first = d < a.half;
    j = first ? d : d - a.half;
    i1 = j;
    i2 = j + a.half;
  }
  const float c = to_compute(static_cast<const T*>(a.cosc)[p * a.half + j]);
  const float sn = to_compute(static_cast<const T*>(a.sinc)[p * a.half + j]);
  const float x1 = to_compute(x[i1]), x2 = to_compute(x[i2]);
  // Rounded to T, as the CPU kernel stores rotated values.
  return to_compute(from_compute<T>(first ? c * x1 - sn * x2 : sn * x1 + c * x2));
}

// Token s of row b's keys (or values), all KV heads: in key (value), or after the queries of a
// packed query.
template <class T>
__device__ __forceinline__ const T* gqa_fresh_row(const GqaArgs& a, int64_t b, int64_t s, bool value) {
  if (a.k) return static_cast<const T*>(value ? a.v : a.k) + (b * a.S + s) * a.kvN * a.H;
  return static_cast<const T*>(a.q) + (b * a.S + s) * a.qw + (a.N + (value ? a.kvN : 0)) * a.H;
}

// One block per (token s, batch row b): the token's keys (rotated) and values into present.
template <class T>
__global__ void __launch_bounds__(kGqaThreads) gqa_store_kernel(GqaArgs a) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t s = blockIdx.x, b = blockIdx.y;
  GqaRowDev r;
  if (!gqa_row(a, b, r)) return;
  int64_t p = 0;
  if (a.cosc && !gqa_position(a, b, s, r, p)) return;
  const T* krow = gqa_fresh_row<T>(a, b, s, false);
  const T* vrow = gqa_fresh_row<T>(a, b, s, true);
  T* pk = static_cast<T*>(a.present_k);
  T* pv = static_cast<T*>(a.present_v);
  for (int64_t e = threadIdx.x; e < a.kvN * a.H; e += blockDim.x) {
    const int64_t h = e / a.H, d = e % a.H;
    const int64_t at = ((b * a.kvN + h) * a.L + r.past + s) * a.H + d;
    pk[at] = from_compute<T>(rotated(a, krow + h * a.H, d, p));
    pv[at] = vrow[e];
  }
}

// A window cache, after the attention: one block per (KV head, batch row b). Present's rows
// [0, held_after) take the window's rows [keep, keep + held_after), the window being past's held
// rows followed by the step's tokens (keys rotated); the rows after them keep past's bytes (the
// CPU kernel's layout). Where no position leaves the window (keep 0) only the new rows are
// written. Otherwise the kept rows move to the front in chunks, each read whole before it is
// written: a chunk's writes land on rows before its reads, and on none a later chunk reads, so
// present may be past's own storage.
template <class T>
__global__ void __launch_bounds__(kGqaThreads) gqa_window_store_kernel(GqaArgs a) {
  ONYX_KERNEL_PROLOGUE();
  constexpr int kPer = 8;  // elements of K and of V a thread holds per chunk
  const int64_t kvh = blockIdx.x, b = blockIdx.y, H = a.H;
  GqaRowDev r;
  if (!gqa_row(a, b, r)) return;
  const int64_t keep = a.S + r.held_before - r.held_after;
  const int64_t chunk_rows = max(int64_t{1}, kPer * kGqaThreads / H);
  const int64_t head = (b * a.kvN + kvh) * a.L * H;
  const T* past_k = static_cast<const T*>(a.past_k) + head;
  const T* past_v = static_cast<const T*>(a.past_v) + head;
  T* pk = static_cast<T*>(a.present_k) + head;
  T* pv = static_cast<T*>(a.present_v) + head;
  for (int64_t i0 = keep == 0 ? r.held_before : 0; i0 < r.held_after; i0 += chunk_rows) {
    const int64_t n = min(chunk_rows, r.held_after - i0) * H;
    T kt[kPer], vt[kPer];
    ONYX_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int64_t e = threadIdx.x + static_cast<int64_t>(t) * kGqaThreads;
      if (e >= n) break;
      const int64_t j = keep + i0 + e / H, d = e % H;  // the window's row j
      if (j < r.held_before) {
        kt[t] = past_k[j * H + d];
        vt[t] = past_v[j * H + d];
        continue;
      }
      const int64_t s = j - r.held_before;
      int64_t p = 0;
      const bool pos_ok = !a.cosc || gqa_position(a, b, s, r, p);
      kt[t] = from_compute<T>(pos_ok ? rotated(a, gqa_fresh_row<T>(a, b, s, false) + kvh * H, d, p) : 0.f);
      vt[t] = gqa_fresh_row<T>(a, b, s, true)[kvh * H + d];
    }
    __syncthreads();  // the chunk read whole before any of it is written
    ONYX_UNROLL
    for (int t = 0; t < kPer; ++t) {
      const int64_t e = threadIdx.x + static_cast<int64_t>(t) * kGqaThreads;
      if (e >= n) break;
      pk[i0 * H + e] = kt[t];
      pv[i0 * H + e] = vt[t];
    }
    __syncthreads();
  }
}

// One block per (query token s, query head h, batch row b).
template <class T>
__global__ void __launch_bounds__(kGqaThreads) gqa_attend_kernel(GqaArgs a) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float qs[kGqaMaxHead];
  __shared__ float wm[kGqaWarps], wl[kGqaWarps];
  __shared__ float wacc[kGqaWarps][kGqaMaxHead];
  const int64_t s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, H = a.H;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* ys = static_cast<T*>(a.y) + (b * a.S + s) * a.N * H + h * H;
  GqaRowDev r;
  const bool ok = gqa_row(a, b, r);
  int64_t p = 0;
  const bool pos_ok = ok && (!a.cosc || gqa_position(a, b, s, r, p));
  if (!pos_ok) {  // the error word is set; the output is zeros
    for (int64_t d = threadIdx.x; d < H; d += blockDim.x) ys[d] = from_compute<T>(0.f);
    return;
  }
  const T* qrow = static_cast<const T*>(a.q) + (b * a.S + s) * a.qw + h * H;
  for (int64_t d = threadIdx.x; d < H; d += blockDim.x) qs[d] = rotated(a, qrow, d, p);
  __syncthreads();

  const int64_t causal_end = r.past + s + 1;
  const int64_t hi = a.causal ? min(causal_end, r.total) : r.total;
  const int64_t lo = min(hi, a.window > 0 ? max(int64_t{0}, causal_end - a.window) : int64_t{0});
  const int64_t kvh = h / (a.N / a.kvN);
  // Key position j is row j - base of kh and vh: present's (with the new keys written) or, for
  // a window cache, past's held rows, the step's own keys coming from the inputs.
  const int64_t base = r.past - r.held_before;
  const T* kh = static_cast<const T*>(a.window_cache ? a.past_k : a.present_k) + (b * a.kvN + kvh) * a.L * H;
  const T* vh = static_cast<const T*>(a.window_cache ? a.past_v : a.present_v) + (b * a.kvN + kvh) * a.L * H;
  if (a.window_cache && lo < base) {  // the window reaches positions the cache no longer holds
    atomicOr(a.err, kDeviceErrorAttentionLengths);
    for (int64_t d = threadIdx.x; d < H; d += blockDim.x) ys[d] = from_compute<T>(0.f);
    return;
  }
  const int per_lane = static_cast<int>((H + 31) / 32);
  float qreg[kGqaPerLane], acc[kGqaPerLane];
  ONYX_UNROLL
  for (int i = 0; i < kGqaPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qreg[i] = i < per_lane && d < H ? qs[d] : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j = lo + warp; j < hi; j += kGqaWarps) {
    const T* kj = kh + (j - base) * H;
    const T* vj = vh + (j - base) * H;
    const bool fresh = a.window_cache && j >= r.past;  // a new key: rotated here, as the store rotates it
    int64_t pj = 0;
    if (fresh) {
      const int64_t sj = j - r.past;
      kj = gqa_fresh_row<T>(a, b, sj, false) + kvh * H;
      vj = gqa_fresh_row<T>(a, b, sj, true) + kvh * H;
      if (a.cosc && !gqa_position(a, b, sj, r, pj)) continue;  // the error word is set
    }
    float dot = 0.f;
    ONYX_UNROLL
    for (int i = 0; i < kGqaPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per_lane && d < H) dot += qreg[i] * (fresh ? rotated(a, kj, d, pj) : to_compute(kj[d]));
    }
    dot = warp_reduce(dot, [](float x, float y) { return x + y; });
    float sc = dot * a.scale;
    if (a.softcap > 0.f) sc = a.softcap * tanhf(sc / a.softcap);
    if (a.bias) {
      const int64_t bi = (((a.bias_b == 1 ? 0 : b) * a.bias_h + (a.bias_h == 1 ? 0 : h)) * a.S + s) * a.bias_len + j;
      sc += to_compute(static_cast<const T*>(a.bias)[bi]);
    }
    if (sc == -INFINITY) continue;  // a masked key
    const float mn = fmaxf(m, sc);
    const float corr = expf(m - mn), w = expf(sc - mn);
    l = l * corr + w;
    ONYX_UNROLL
    for (int i = 0; i < kGqaPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per_lane && d < H) acc[i] = acc[i] * corr + w * to_compute(vj[d]);
    }
    m = mn;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
  ONYX_UNROLL
  for (int i = 0; i < kGqaPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (i < per_lane && d < H) wacc[warp][d] = acc[i];
  }
  __syncthreads();
  // A sink is one more logit in the softmax that carries no value (none for an empty range).
  float mx = -INFINITY;
  for (int w = 0; w < kGqaWarps; ++w) mx = fmaxf(mx, wm[w]);
  const bool any = mx != -INFINITY;
  const bool has_sink = hi > lo && (a.sink || a.smooth);
  const float sink = a.sink ? to_compute(static_cast<const T*>(a.sink)[h]) : 0.f;
  if (has_sink) mx = fmaxf(mx, sink);
  float den = has_sink ? expf(sink - mx) : 0.f;
  for (int w = 0; w < kGqaWarps; ++w)
    if (wm[w] != -INFINITY) den += wl[w] * expf(wm[w] - mx);
  for (int64_t d = threadIdx.x; d < H; d += blockDim.x) {
    float out = 0.f;
    if (any) {
      for (int w = 0; w < kGqaWarps; ++w)
        if (wm[w] != -INFINITY) out += wacc[w][d] * expf(wm[w] - mx);
      out /= den;
    }
    ys[d] = from_compute<T>(out);
  }
}

using namespace gqa;

void run_gqa(KernelContext& ctx, CudaContext& cu) {
  const GqaAttrs at = gqa_attrs(ctx);
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  std::vector<DType> dts(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      in[i] = &ctx.input(i).shape();
      dts[i] = ctx.input(i).dtype();
    }
  check_gqa_dtypes(dts);
  const GqaGeometry g = gqa_geometry(at, in);
  Tensor& y = ctx.output(0);
  Tensor& pk = ctx.output(1);
  Tensor& pv = ctx.output(2);
  const int64_t L = pk.shape()[2];
  ONYX_CHECK(pk.shape() == Shape({g.B, g.kvN, L, g.H}) && pv.shape() == pk.shape(), "present outputs ",
             pk.shape().str(), " and ", pv.shape().str(), " are not [", g.B, ", ", g.kvN, ", L, ", g.H, "]");
  const size_t es = dtype_size(y.dtype());
  // present starts as past's positions and zeros, unless it is past's own storage.
  for (int i = 0; i < 2; ++i) {
    Tensor& pt = i == 0 ? pk : pv;
    const size_t past_in = i == 0 ? kPastKey : kPastValue;
    const Tensor* past = ctx.has_input(past_in) ? &ctx.input(past_in) : nullptr;
    if (past && past->raw() == pt.raw()) {
      ONYX_CHECK(past->shape() == pt.shape(), i == 0 ? "present_key" : "present_value",
                 " shares past's buffer but has shape ", pt.shape().str(), " instead of past's ", past->shape().str());
      continue;
    }
    const int64_t P = past ? g.past_len : 0;
    ONYX_CHECK(P <= L, "past holds ", P, " positions, more than present's ", L);
    char* dst = static_cast<char*>(pt.raw());
    const size_t pitch = static_cast<size_t>(L * g.H) * es, rows = static_cast<size_t>(g.B * g.kvN);
    if (rows == 0 || pitch == 0) continue;
    if (P > 0)
      ONYX_CUDA_CHECK(cudaMemcpy2DAsync(dst, pitch, past->raw(), static_cast<size_t>(P * g.H) * es,
                                        static_cast<size_t>(P * g.H) * es, rows, cudaMemcpyDeviceToDevice, cu.stream));
    if (P < L)
      ONYX_CUDA_CHECK(cudaMemset2DAsync(dst + P * g.H * es, pitch, 0, static_cast<size_t>((L - P) * g.H) * es, rows,
                                        cu.stream));
  }
  if (g.B == 0 || g.S == 0) return;
  GqaArgs a{};
  a.q = ctx.input(kQuery).raw();
  a.k = g.packed ? nullptr : ctx.input(kKey).raw();
  a.v = g.packed ? nullptr : ctx.input(kValue).raw();
  a.present_k = pk.raw();
  a.present_v = pv.raw();
  if (at.window_cache) {  // gqa_geometry checked that past is there, with the capacity
    a.past_k = ctx.input(kPastKey).raw();
    a.past_v = ctx.input(kPastValue).raw();
  }
  a.y = y.raw();
  a.seqlens_k = ctx.input(kSeqlensK).data<int32_t>();
  a.total = ctx.input(kTotalSeqLen).data<int32_t>();
  if (at.rotary) {
    a.cosc = ctx.input(kCosCache).raw();
    a.sinc = ctx.input(kSinCache).raw();
    a.half = g.half;
    a.cache_rows = g.cache_rows;
  }
  a.pos_ids = ctx.has_input(kPositionIds) ? ctx.input(kPositionIds).data<int64_t>() : nullptr;
  if (ctx.has_input(kAttentionBias)) {
    const Tensor& bt = ctx.input(kAttentionBias);
    a.bias = bt.raw();
    a.bias_b = bt.shape()[0];
    a.bias_h = bt.shape()[1];
    a.bias_len = bt.shape()[3];
  }
  a.sink = ctx.has_input(kHeadSink) ? ctx.input(kHeadSink).raw() : nullptr;
  a.B = g.B;
  a.S = g.S;
  a.N = g.N;
  a.kvN = g.kvN;
  a.H = g.H;
  a.L = L;
  a.past_len = ctx.has_input(kPastKey) ? g.past_len : 0;
  a.qw = g.packed ? (g.N + 2 * g.kvN) * g.H : g.N * g.H;
  a.window = at.window;
  a.window_cache = at.window_cache ? 1 : 0;
  a.scale = static_cast<float>(at.scale != 0 ? at.scale : 1.0 / std::sqrt(static_cast<double>(g.H)));
  a.softcap = static_cast<float>(at.softcap);
  a.interleaved = at.interleaved;
  a.causal = at.causal;
  a.smooth = at.smooth;
  a.err = cu.error_word;
  ONYX_CHECK(g.S <= 65535 && g.N <= 65535 && g.B <= 65535, "GroupQueryAttention on CUDA: batch ", g.B, ", sequence ",
             g.S, " or heads ", g.N, " exceed a grid dimension");
  dispatch_float(y.dtype(), "GroupQueryAttention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 attend(static_cast<unsigned>(g.S), static_cast<unsigned>(g.N), static_cast<unsigned>(g.B));
    if (at.window_cache) {  // the attention reads past before the store moves its rows
      launch_kernel(gqa_attend_kernel<T>, attend, kGqaThreads, 0, cu, a);
      launch_kernel(gqa_window_store_kernel<T>, dim3(static_cast<unsigned>(g.kvN), static_cast<unsigned>(g.B)),
                    kGqaThreads, 0, cu, a);
      return;
    }
    launch_kernel(gqa_store_kernel<T>, dim3(static_cast<unsigned>(g.S), static_cast<unsigned>(g.B)), kGqaThreads, 0, cu,
                  a);
    launch_kernel(gqa_attend_kernel<T>, attend, kGqaThreads, 0, cu, a);
  });
  ONYX_CUDA_CHECK_LAUNCH("GroupQueryAttention");
}

std::string gqa_support(const Node& node, const std::vector<ValueType>& in) {
  GqaAttrs at;
  try {
    at = gqa_attrs(NodeView(node));
  } catch (const Error& e) {
    return e.what();
  }
  auto has = [&](size_t i) { return i < node.inputs.size() && node.inputs[i] >= 0; };
  if (has(kQuerySeqlens)) return "GroupQueryAttention on CUDA does not take query_seqlens";
  for (size_t o : {1, 2})
    if (o >= node.outputs.size() || node.outputs[o] < 0)
      return "GroupQueryAttention on CUDA needs the present_key and present_value outputs";
  if (node.outputs.size() > 3 && node.outputs[3] >= 0) return "output 'output_qk' is not supported by onyx";
  if (in.empty() || !is_cuda_float(in[kQuery].dtype))
    return "GroupQueryAttention on CUDA takes float32/float16/bfloat16";
  const PartialShape& q = in[kQuery].shape;
  if (q.rank_known && q.dims.size() == 3 && q.dims[2] >= 0) {
    const int64_t heads = has(kKey) ? at.num_heads : at.num_heads + 2 * at.kv_num_heads;
    if (q.dims[2] % heads == 0 && q.dims[2] / heads > kGqaMaxHead)
      return cat("GroupQueryAttention on CUDA takes head sizes up to ", kGqaMaxHead);
  }
  return "";
}

// ================================ MultiHeadAttention ================================
// The CPU kernel's semantics (ops/multi_head_attention.cpp, geometry in ops/mha.h). Keys and
// values are read where they are: position j < P from past, the others from the new key/value
// (3-D [B, L, N*H] with their bias slice added, or 4-D [B, N, L, H] without), in float and
// unrounded as the CPU kernel uses them; present, when asked for, gets them rounded to T. Two
// launches: present (one thread per element), then one block per (query s, head h, batch row
// b), its warps taking keys in turn with an online softmax and merging at the end. No lengths
// are read on the device (a 1-D key_padding_mask is compared, never indexed), so no error word.

constexpr int kMhaThreads = 256;
constexpr int kMhaWarps = kMhaThreads / 32;
constexpr int kMhaMaxHead = 256;
constexpr int kMhaPerLane = kMhaMaxHead / 32;

struct MhaArgs {
  const void* q;  // [B, S, N * H]
  const void* k;  // [B, L, N * H] or [B, N, L, H]
  const void* v;  // [B, L, N * Hv] or [B, N, L, Hv]
  const void* bias;  // [2 * N * H + N * Hv] (null: none)
  const void* past_k;  // [B, N, P, H] (null: P = 0)
  const void* past_v;
  const int32_t* mask;  // key_padding_mask [B], [B, T] or [B, S, T] (null: none)
  const void* ab;       // attention_bias [ab_b, ab_h, S, T] (null: none)
  void* present_k;      // [B, N, T, H] (null: not asked for)
  void* present_v;
  void* y;  // [B, S, N * Hv]
  int64_t B, S, L, N, H, Hv, P, T;
  int64_t ab_b, ab_h;
  int kv_bnsh, mask_rank, causal;
  float scale;
  double filter;  // mask_filter_value
};

// Element d (of `width`) of key or value position j of head h in row b, in float; `x` is the
// new key or value, `past` its past, `bias_off` where its bias slice starts.
template <class T>
__device__ __forceinline__ float mha_kv(const MhaArgs& a, const void* x, const void* past, int64_t bias_off,
                                        int64_t width, int64_t b, int64_t h, int64_t j, int64_t d) {
  if (j < a.P) return to_compute(static_cast<const T*>(past)[((b * a.N + h) * a.P + j) * width + d]);
  const int64_t l = j - a.P;
  if (a.kv_bnsh) return to_compute(static_cast<const T*>(x)[((b * a.N + h) * a.L + l) * width + d]);
  float val = to_compute(static_cast<const T*>(x)[(b * a.L + l) * a.N * width + h * width + d]);
  if (a.bias) val += to_compute(static_cast<const T*>(a.bias)[bias_off + h * width + d]);
  return val;
}

// present_key (is_value 0) or present_value: concat(past, new (+ bias)), one thread per element.
template <class T>
__global__ void mha_present_kernel(MhaArgs a, int is_value) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t width = is_value ? a.Hv : a.H, total = a.B * a.N * a.T * width;
  const void* x = is_value ? a.v : a.k;
  const void* past = is_value ? a.past_v : a.past_k;
  const int64_t bias_off = is_value ? 2 * a.N * a.H : a.N * a.H;
  T* dst = static_cast<T*>(is_value ? a.present_v : a.present_k);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % width, j = (e / width) % a.T, bh = e / (width * a.T);
    dst[e] = from_compute<T>(mha_kv<T>(a, x, past, bias_off, width, bh / a.N, bh % a.N, j, d));
  }
}

// One block per (query token s, head h, batch row b).
template <class T>
__global__ void __launch_bounds__(kMhaThreads) mha_attend_kernel(MhaArgs a) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float qs[kMhaMaxHead];
  __shared__ double wm[kMhaWarps];
  __shared__ float wl[kMhaWarps];
  __shared__ float wacc[kMhaWarps][kMhaMaxHead];
  const int64_t s = blockIdx.x, h = blockIdx.y, b = blockIdx.z, H = a.H, Hv = a.Hv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* qrow = static_cast<const T*>(a.q) + (b * a.S + s) * a.N * H + h * H;
  for (int64_t d = threadIdx.x; d < H; d += blockDim.x) {
    float x = to_compute(qrow[d]);
    if (a.bias) x += to_compute(static_cast<const T*>(a.bias)[h * H + d]);
    qs[d] = x;
  }
  __syncthreads();

  // unidirectional: query s sees keys j <= P + s; the others leave the softmax.
  const int64_t hi = a.causal ? min(a.P + s + 1, a.T) : a.T;
  const int per_lane = static_cast<int>((H + 31) / 32), per_lane_v = static_cast<int>((Hv + 31) / 32);
  float qreg[kMhaPerLane], acc[kMhaPerLane];
  ONYX_UNROLL
  for (int i = 0; i < kMhaPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    qreg[i] = i < per_lane && d < H ? qs[d] : 0.f;
    acc[i] = 0.f;
  }
  const int32_t* mrow = nullptr;
  if (a.mask) mrow = a.mask_rank == 2 ? a.mask + b * a.T : a.mask_rank == 3 ? a.mask + (b * a.S + s) * a.T : a.mask + b;
  const T* abrow = a.ab ? static_cast<const T*>(a.ab) +
                              (((a.ab_b == 1 ? 0 : b) * a.ab_h + (a.ab_h == 1 ? 0 : h)) * a.S + s) * a.T
                        : nullptr;
  // Scores in double, as the CPU kernel has them: a mask_filter_value of -10000 then cancels
  // exactly where every key is masked, and one as large as the float range absorbs the scores
  // where the CPU's does. Weights and sums in float.
  double m = -INFINITY;
  float l = 0.f;
  for (int64_t j = warp; j < hi; j += kMhaWarps) {
    float dot = 0.f;
    ONYX_UNROLL
    for (int i = 0; i < kMhaPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per_lane && d < H) dot += qreg[i] * mha_kv<T>(a, a.k, a.past_k, a.N * H, H, b, h, j, d);
    }
    dot = warp_reduce(dot, [](float x, float y) { return x + y; });
    double sc = static_cast<double>(dot * a.scale);
    if (mrow && (a.mask_rank == 1 ? j >= *mrow : mrow[j] == 0)) sc += a.filter;
    if (abrow) sc += static_cast<double>(to_compute(abrow[j]));
    if (sc == -INFINITY) continue;  // a key left out
    float corr = 1.f, w = 1.f;
    if (sc > m) {
      corr = m == -INFINITY ? 0.f : expf(static_cast<float>(m - sc));
      m = sc;
    } else {
      w = expf(static_cast<float>(sc - m));
    }
    l = l * corr + w;
    ONYX_UNROLL
    for (int i = 0; i < kMhaPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (i < per_lane_v && d < Hv)
        acc[i] = acc[i] * corr + w * mha_kv<T>(a, a.v, a.past_v, 2 * a.N * H, Hv, b, h, j, d);
    }
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
  ONYX_UNROLL
  for (int i = 0; i < kMhaPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (i < per_lane_v && d < Hv) wacc[warp][d] = acc[i];
  }
  __syncthreads();
  double mx = -INFINITY;
  for (int w = 0; w < kMhaWarps; ++w) mx = fmax(mx, wm[w]);
  const bool any = mx != -INFINITY;
  float factor[kMhaWarps];
  float den = 0.f;
  ONYX_UNROLL
  for (int w = 0; w < kMhaWarps; ++w) {
    factor[w] = wm[w] == -INFINITY ? 0.f : expf(static_cast<float>(wm[w] - mx));
    den += wl[w] * factor[w];
  }
  T* ys = static_cast<T*>(a.y) + (b * a.S + s) * a.N * Hv + h * Hv;
  for (int64_t d = threadIdx.x; d < Hv; d += blockDim.x) {
    float out = 0.f;  // every key left out: zeros, as on the CPU
    if (any) {
      ONYX_UNROLL
      for (int w = 0; w < kMhaWarps; ++w) out += wacc[w][d] * factor[w];
      out /= den;
    }
    ys[d] = from_compute<T>(out);
  }
}

void run_mha(KernelContext& ctx, CudaContext& cu) {
  ONYX_CHECK(!ctx.has_output(3), "output 'qk' is not supported by onyx");
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  std::vector<DType> dts(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      in[i] = &ctx.input(i).shape();
      dts[i] = ctx.input(i).dtype();
    }
  check_mha_dtypes(dts);
  const MhaAttrs at = mha_attrs(ctx);
  const MhaGeometry g = mha_geometry(at, in);
  ONYX_CHECK(g.H <= kMhaMaxHead && g.Hv <= kMhaMaxHead, "MultiHeadAttention on CUDA takes head sizes up to ",
             kMhaMaxHead, ", got ", g.H, " (key) and ", g.Hv, " (value)");
  auto ptr = [&](size_t i) -> const void* { return ctx.has_input(i) ? ctx.input(i).raw() : nullptr; };
  MhaArgs a{};
  a.q = ptr(mha::kQuery);
  a.k = ptr(mha::kKey);
  a.v = ptr(mha::kValue);
  a.bias = ptr(mha::kBias);
  a.past_k = ptr(mha::kPastKey);
  a.past_v = ptr(mha::kPastValue);
  if (ctx.has_input(mha::kKeyPaddingMask)) {
    a.mask = ctx.input(mha::kKeyPaddingMask).data<int32_t>();
    a.mask_rank = static_cast<int>(ctx.input(mha::kKeyPaddingMask).rank());
  }
  if (ctx.has_input(mha::kAttentionBias)) {
    const Tensor& bt = ctx.input(mha::kAttentionBias);
    a.ab = bt.raw();
    a.ab_b = bt.shape()[0];
    a.ab_h = bt.shape()[1];
  }
  a.present_k = ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
  a.present_v = ctx.has_output(2) ? ctx.output(2).raw() : nullptr;
  Tensor& y = ctx.output(0);
  a.y = y.raw();
  a.B = g.B;
  a.S = g.S;
  a.L = g.L;
  a.N = g.N;
  a.H = g.H;
  a.Hv = g.Hv;
  a.P = g.P;
  a.T = g.T();
  a.kv_bnsh = g.kv_bnsh;
  a.causal = at.unidirectional;
  a.scale = static_cast<float>(at.scale != 0 ? at.scale : 1.0 / std::sqrt(static_cast<double>(g.H)));
  a.filter = at.mask_filter_value;
  ONYX_CHECK(g.S <= 0x7fffffff && g.N <= 65535 && g.B <= 65535, "MultiHeadAttention on CUDA: batch ", g.B,
             ", sequence ", g.S, " or heads ", g.N, " exceed a grid dimension");
  dispatch_float(y.dtype(), "MultiHeadAttention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int is_value = 0; is_value < 2; ++is_value) {
      const int64_t n = g.B * g.N * g.T() * (is_value ? g.Hv : g.H);
      if ((is_value ? a.present_v : a.present_k) && n > 0)
        launch_kernel(mha_present_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu, a, is_value);
    }
    if (y.numel() > 0)
      launch_kernel(mha_attend_kernel<T>,
                    dim3(static_cast<unsigned>(g.S), static_cast<unsigned>(g.N), static_cast<unsigned>(g.B)),
                    kMhaThreads, 0, cu, a);
  });
  ONYX_CUDA_CHECK_LAUNCH("MultiHeadAttention");
}

std::string mha_support(const Node& node, const std::vector<ValueType>& in) {
  auto has = [&](size_t i) { return i < node.inputs.size() && node.inputs[i] >= 0 && i < in.size(); };
  if (node.outputs.size() > 3 && node.outputs[3] >= 0) return "output 'qk' is not supported by onyx";
  if (!has(mha::kQuery) || !is_cuda_float(in[mha::kQuery].dtype))
    return "MultiHeadAttention on CUDA takes float32/float16/bfloat16";
  try {
    const MhaAttrs at = mha_attrs(NodeView(node));
    std::vector<DType> dts(in.size(), DType::kUndefined);
    bool known = true;
    for (size_t i = 0; i < in.size(); ++i)
      if (has(i)) {
        dts[i] = in[i].dtype;
        known &= in[i].shape.fully_known();
      }
    check_mha_dtypes(dts);
    // The forms the CPU kernel refuses are refused here with its words (the node then stays on
    // the CPU, which says the same when it runs).
    std::vector<Shape> shapes(in.size());
    std::vector<const Shape*> sp(in.size(), nullptr);
    for (size_t i = 0; i < in.size(); ++i)
      if (has(i)) {
        if (known) shapes[i] = in[i].shape.to_shape();
        sp[i] = &shapes[i];
      }
    if (known) {
      const MhaGeometry g = mha_geometry(at, sp);
      if (g.H > kMhaMaxHead || g.Hv > kMhaMaxHead)
        return cat("MultiHeadAttention on CUDA takes head sizes up to ", kMhaMaxHead, ", got ", g.H, " (key) and ",
                   g.Hv, " (value)");
      return "";
    }
    for (size_t i : {mha::kPastSequenceLength, mha::kCacheIndirection})
      if (has(i))
        return cat("input '", mha::input_name(i), "' (decoder-masked attention with beam search) is not supported by ",
                   "onyx");
    // Shapes not all known yet: the head sizes that are known must fit (the kernel checks again).
    const PartialShape& q = in[mha::kQuery].shape;
    const int64_t N = at.num_heads;
    int64_t H = -1, Hv = -1;
    if (q.rank_known && q.dims.size() == 3 && q.dims[2] >= 0 && q.dims[2] % N == 0) H = q.dims[2] / N;
    if (has(mha::kValue)) {
      const PartialShape& v = in[mha::kValue].shape;
      if (v.rank_known && v.dims.size() == 3 && v.dims[2] >= 0 && v.dims[2] % N == 0) Hv = v.dims[2] / N;
      if (v.rank_known && v.dims.size() == 4) Hv = v.dims[3];
    }
    if (H > kMhaMaxHead || Hv > kMhaMaxHead)
      return cat("MultiHeadAttention on CUDA takes head sizes up to ", kMhaMaxHead);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ================================ GatherBlockQuantized ================================
// uint8 data (gather_axis 0, quantize_axis last), as the CPU kernel takes it: one thread per
// output value; an index outside [-rows, rows) gives zeros, as the op defines.

struct GbqArgs {
  const uint8_t* data;
  const void* indices;
  int idx64;
  const void* scales;
  const uint8_t* zp;  // null: 2^(bits-1)
  void* y;
  int64_t rows, inner, cols, col_bytes, col_blocks, zp_row, bits, block, total;
};

template <class T>
__global__ void gbq_kernel(GbqArgs a) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t row_out = a.inner * a.cols, mask = (1 << a.bits) - 1, per_byte = 8 / a.bits;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < a.total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / row_out, rem = e % row_out, in = rem / a.cols, c = rem % a.cols;
    int64_t row = load_index(a.indices, a.idx64 != 0, i);
    if (row < 0) row += a.rows;
    if (row < 0 || row >= a.rows) {
      static_cast<T*>(a.y)[e] = from_compute<T>(0.f);
      continue;
    }
    const int64_t line = row * a.inner + in, blk = c / a.block;
    const int q = (a.data[line * a.col_bytes + c / per_byte] >> ((c % per_byte) * a.bits)) & mask;
    const int zero = a.zp ? (a.zp[line * a.zp_row + blk / per_byte] >> ((blk % per_byte) * a.bits)) & mask
                          : 1 << (a.bits - 1);
    const float scale = to_compute(static_cast<const T*>(a.scales)[line * a.col_blocks + blk]);
    static_cast<T*>(a.y)[e] = from_compute<T>(static_cast<float>(q - zero) * scale);
  }
}

void run_gbq(KernelContext& ctx, CudaContext& cu) {
  const Tensor& data = ctx.input(0);
  const Tensor& indices = ctx.input(1);
  const Tensor& scales = ctx.input(2);
  GbqArgs a{};
  a.bits = ctx.attr_int("bits", 4);
  a.block = ctx.attr_int("block_size", 128);
  check_quant_bits(a.bits);
  check_quant_block_size(a.block);
  const int64_t r = static_cast<int64_t>(data.rank());
  ONYX_CHECK(r >= 2 && data.dtype() == DType::kUInt8, "GatherBlockQuantized on CUDA: data ", data.type_str());
  a.rows = data.shape()[0];
  a.col_bytes = data.shape()[r - 1];
  a.cols = a.col_bytes * (8 / a.bits);
  a.inner = 1;
  for (int64_t i = 1; i < r - 1; ++i) a.inner *= data.shape()[i];
  a.col_blocks = (a.cols + a.block - 1) / a.block;
  a.zp_row = packed_bytes(a.col_blocks, a.bits);
  a.data = data.data<uint8_t>();
  a.indices = indices.raw();
  a.idx64 = indices.dtype() == DType::kInt64;
  a.scales = scales.raw();
  a.zp = ctx.has_input(3) ? ctx.input(3).data<uint8_t>() : nullptr;
  Tensor& y = ctx.output(0);
  a.y = y.raw();
  a.total = y.numel();
  if (a.total == 0) return;
  dispatch_float(y.dtype(), "GatherBlockQuantized", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(gbq_kernel<T>, resident_blocks_for(a.total, cu.device), kThreads, 0, cu, a);
  });
  ONYX_CUDA_CHECK_LAUNCH("GatherBlockQuantized");
}

std::string gbq_support(const Node& node, const std::vector<ValueType>& in) {
  NodeView n(node);
  if (in.size() < 3 || in[0].dtype != DType::kUInt8) return "GatherBlockQuantized on CUDA takes uint8 data";
  if (!is_cuda_float(in[2].dtype)) return "GatherBlockQuantized on CUDA takes float32/float16/bfloat16 scales";
  if (in[1].dtype != DType::kInt32 && in[1].dtype != DType::kInt64) return "indices must be int32 or int64";
  const PartialShape& d = in[0].shape;
  if (!d.rank_known || d.dims.size() < 2) return "GatherBlockQuantized on CUDA needs data of known rank >= 2";
  const int64_t r = static_cast<int64_t>(d.dims.size());
  int64_t g = n.attr_int("gather_axis", 0), q = n.attr_int("quantize_axis", 1);
  if (g < 0) g += r;
  if (q < 0) q += r;
  if (g != 0 || q != r - 1) return "GatherBlockQuantized on CUDA takes gather_axis 0 and the last quantize_axis";
  return "";
}


}  // namespace

void register_contrib_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("com.microsoft", "GatherBlockQuantized", 1, run_gbq, gbq_support));
  r.add(domain_kernel("com.microsoft", "GroupQueryAttention", 1, run_gqa, gqa_support));
  r.add(domain_kernel("com.microsoft", "MultiHeadAttention", 1, run_mha, mha_support));
}

}  // namespace onyx::cuda
