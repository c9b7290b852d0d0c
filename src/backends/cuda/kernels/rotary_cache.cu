// onyx::RotaryCache (its definition and CPU reference: src/ops/rotary_cache.cpp): a layer's
// rotary embedding of q and k and its cache writes in one launch, where the unfused graph takes
// four (two RotaryHalf, two Concat or CacheUpdate). The launch's work is one flat range of units
// over the outputs, in segments: q_rot's rows, k_rot's (when asked for), present_k's, present_v's.
// A present row is either a past row copied (Concat; a CacheUpdate not bound to its cache) or a
// new one, rotated (k) or copied (v); bound in place, only the new rows are written.
//
// With 16-byte-aligned tensors, split = D / 2 and both halves a whole number of 16-byte vectors,
// a unit of a q or k row is a pair of vectors, one from each half (the two halves of rotate_half
// read each other); otherwise a unit is one element, computed as RotaryHalf's kernel computes it.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/rotary_cache.h"

namespace onyx::cuda {

namespace {

template <class T>
struct RotaryCacheArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* cos;
  const T* sin;
  const T* past_k;
  const T* past_v;
  T* q_rot;
  T* present_k;
  T* present_v;
  T* k_rot;              // null unless asked for
  const int64_t* index;  // null: Concat
  int per_row;           // the index holds one position per batch row
  unsigned int* err;
  int64_t D, h, Dv;
  RopeRows qr, kr;
  CacheRows kc, vc;
  int64_t upr_qk, upr_v;          // units per row
  int64_t n_q, n_kr, n_k, n_v;  // units per segment
};

template <class T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <class T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// Unit c of a rotated row: x's row at `xo`, cos/sin's at `co`, y's at `yo` (element offsets).
template <class T, bool VEC, class I>
__device__ __forceinline__ void rotate_unit(const RotaryCacheArgs<T>& a, const T* x, T* y, I xo, I co, I yo, I c) {
  if constexpr (VEC) {
    constexpr int N = vec_width<T>();
    const I lo = c * N, hi = static_cast<I>(a.h) + c * N;
    const Vec<T, N> xl = load_vec<T, N>(x + xo + lo), xh = load_vec<T, N>(x + xo + hi);
    const Vec<T, N> cl = load_vec<T, N>(a.cos + co + lo), ch = load_vec<T, N>(a.cos + co + hi);
    const Vec<T, N> sl = load_vec<T, N>(a.sin + co + lo), sh = load_vec<T, N>(a.sin + co + hi);
    Vec<T, N> yl, yh;
    ONYX_UNROLL
    for (int i = 0; i < N; ++i) {
      const float l = to_compute(xl.v[i]), u = to_compute(xh.v[i]);
      yl.v[i] = from_compute<T>(l * to_compute(cl.v[i]) + (-u) * to_compute(sl.v[i]));
      yh.v[i] = from_compute<T>(u * to_compute(ch.v[i]) + l * to_compute(sh.v[i]));
    }
    store_vec<T, N>(y + yo + lo, yl);
    store_vec<T, N>(y + yo + hi, yh);
  } else {
    const I D = static_cast<I>(a.D), h = static_cast<I>(a.h);
    const float r = c < D - h ? -to_compute(x[xo + c + h]) : to_compute(x[xo + c - (D - h)]);
    y[yo + c] = from_compute<T>(to_compute(x[xo + c]) * to_compute(a.cos[co + c]) + r * to_compute(a.sin[co + c]));
  }
}

// Unit c of a copied q/k-shaped row (a pair of vectors, or an element).
template <class T, bool VEC, class I>
__device__ __forceinline__ void copy_pair_unit(const RotaryCacheArgs<T>& a, const T* x, T* y, I xo, I yo, I c) {
  if constexpr (VEC) {
    constexpr int N = vec_width<T>();
    const I lo = c * N, hi = static_cast<I>(a.h) + c * N;
    store_vec<T, N>(y + yo + lo, load_vec<T, N>(x + xo + lo));
    store_vec<T, N>(y + yo + hi, load_vec<T, N>(x + xo + hi));
  } else {
    y[yo + c] = x[xo + c];
  }
}

// Unit c of a copied v row (a vector, or an element).
template <class T, bool VEC, class I>
__device__ __forceinline__ void copy_unit(T* y, const T* x, I xo, I yo, I c) {
  if constexpr (VEC) {
    constexpr int N = vec_width<T>();
    store_vec<T, N>(y + yo + c * N, load_vec<T, N>(x + xo + c * N));
  } else {
    y[yo + c] = x[xo + c];
  }
}

template <class I>
__device__ __forceinline__ I rope_offset(const RopeRows& g, I row) {
  const I s = row % static_cast<I>(g.S), bh = row / static_cast<I>(g.S);
  const I hh = bh % static_cast<I>(g.H), b = bh / static_cast<I>(g.H);
  return b * static_cast<I>(g.cb) + hh * static_cast<I>(g.ch) + s * static_cast<I>(g.cs);
}

// Where row `row` of a present comes from: the past (returns false, `src` its past row) or the
// new entries (returns true, `src` the new row); `dst` is its present row; -1: write nothing.
template <class I>
__device__ __forceinline__ bool cache_source(const CacheRows& c, const int64_t* index, int per_row, unsigned int* err,
                                             I row, bool first_unit, I& src, I& dst) {
  const I written = static_cast<I>(c.written), S = static_cast<I>(c.S), past = static_cast<I>(c.past);
  const I bh = row / written, t = row % written;
  if (!index) {  // Concat: the past's rows, then the new
    dst = bh * static_cast<I>(c.out_len) + t;
    if (t < past) {
      src = bh * past + t;
      return false;
    }
    src = bh * S + (t - past);
    return true;
  }
  const int64_t at = index[per_row ? static_cast<int64_t>(bh / static_cast<I>(c.H)) : 0];
  if (at < 0 || at + c.S > c.past) {  // CacheUpdate's rule: nothing new is written
    if (first_unit && t == 0) atomicOr(err, kDeviceErrorCachePosition);
    if (c.aliased) {
      dst = static_cast<I>(-1);
      return false;
    }
    src = dst = bh * past + t;
    return false;
  }
  const I at_i = static_cast<I>(at);
  if (c.aliased) {
    dst = bh * past + at_i + t;
    src = bh * S + t;
    return true;
  }
  dst = bh * past + t;
  if (t >= at_i && t < at_i + S) {
    src = bh * S + (t - at_i);
    return true;
  }
  src = dst;
  return false;
}

template <class T, bool VEC, class I>
__global__ void __launch_bounds__(kThreads) rotary_cache_kernel(const RotaryCacheArgs<T> a) {
  ONYX_KERNEL_PROLOGUE();
  const I n_q = static_cast<I>(a.n_q), n_kr = static_cast<I>(a.n_kr), n_k = static_cast<I>(a.n_k);
  const I total = n_q + n_kr + n_k + static_cast<I>(a.n_v);
  const I upr_qk = static_cast<I>(a.upr_qk), upr_v = static_cast<I>(a.upr_v);
  const I D = static_cast<I>(a.D), Dv = static_cast<I>(a.Dv);
  for (I u = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; u < total;
       u += static_cast<I>(gridDim.x) * blockDim.x) {
    if (u < n_q + n_kr) {  // q_rot, then k_rot: rotated rows
      const bool is_q = u < n_q;
      const I w = is_q ? u : u - n_q;
      const I row = w / upr_qk, c = w % upr_qk;
      rotate_unit<T, VEC, I>(a, is_q ? a.q : a.k, is_q ? a.q_rot : a.k_rot, row * D,
                             rope_offset<I>(is_q ? a.qr : a.kr, row), row * D, c);
    } else if (u < n_q + n_kr + n_k) {  // present_k
      const I w = u - n_q - n_kr;
      const I row = w / upr_qk, c = w % upr_qk;
      I src = 0, dst = 0;
      const bool fresh = cache_source<I>(a.kc, a.index, a.per_row, a.err, row, c == 0, src, dst);
      if (dst == static_cast<I>(-1)) continue;
      if (fresh) rotate_unit<T, VEC, I>(a, a.k, a.present_k, src * D, rope_offset<I>(a.kr, src), dst * D, c);
      else copy_pair_unit<T, VEC, I>(a, a.past_k, a.present_k, src * D, dst * D, c);
    } else {  // present_v
      const I w = u - n_q - n_kr - n_k;
      const I row = w / upr_v, c = w % upr_v;
      I src = 0, dst = 0;
      const bool fresh = cache_source<I>(a.vc, a.index, a.per_row, a.err, row, c == 0, src, dst);
      if (dst == static_cast<I>(-1)) continue;
      copy_unit<T, VEC, I>(a.present_v, fresh ? a.v : a.past_v, src * Dv, dst * Dv, c);
    }
  }
}

}  // namespace

// cos/sin's strides onto x [B, H, S, D] (the tables broadcast onto x, ending in its D).
RopeRows rope_rows(const Shape& x, const Shape& tab, const char* what) {
  ONYX_CHECK(tab.rank() >= 1 && tab.rank() <= 4 && tab[tab.rank() - 1] == x[3], "cos ", tab.str(), " must end in ",
             what, "'s last dimension ", x[3], " and have at most its rank (", what, " is ", x.str(), ")");
  int64_t t[4] = {1, 1, 1, 1};
  for (size_t i = 0; i < tab.rank(); ++i) t[4 - tab.rank() + i] = tab[i];
  for (int i = 0; i < 3; ++i)
    ONYX_CHECK(t[i] == 1 || t[i] == x[i], "cos ", tab.str(), " does not broadcast to ", what, " ", x.str());
  RopeRows r;
  r.H = x[1];
  r.S = x[2];
  r.cs = t[2] == 1 ? 0 : x[3];
  r.ch = t[1] == 1 ? 0 : t[2] * x[3];
  r.cb = t[0] == 1 ? 0 : t[1] * t[2] * x[3];
  return r;
}

CacheRows cache_rows(const Shape& past, const Shape& fresh, const Shape& present, bool indexed, bool aliased,
                     const char* what) {
  for (int a : {0, 1, 3})
    ONYX_CHECK(past[a] == fresh[a] && present[a] == fresh[a], what, " ", fresh.str(), " does not fit its cache ",
               past.str(), " (present ", present.str(), ")");
  CacheRows c;
  c.H = fresh[1];
  c.S = fresh[2];
  c.past = past[2];
  c.out_len = present[2];
  ONYX_CHECK(c.out_len == (indexed ? c.past : c.past + c.S), "present ", present.str(), " does not hold past ",
             past.str(), " and the new ", fresh.str());
  c.aliased = aliased ? 1 : 0;
  c.written = aliased ? c.S : c.out_len;
  return c;
}

namespace {
bool rank4(const Tensor& t) { return t.rank() == 4; }
}  // namespace

void rotary_cache(const RotaryCacheTensors& t, std::optional<int64_t> split, CudaContext& cu) {
  const Tensor &q = *t.q, &k = *t.k, &v = *t.v, &cos = *t.cos, &sin = *t.sin, &past_k = *t.past_k, &past_v = *t.past_v;
  const Tensor* index = t.index;
  Tensor &q_rot = *t.q_rot, &present_k = *t.present_k, &present_v = *t.present_v;
  Tensor* k_rot = t.k_rot;
  ONYX_CHECK(rank4(q) && rank4(k) && rank4(v) && rank4(past_k) && rank4(past_v),
             "RotaryCache takes 4-D q, k, v and caches, got q ", q.shape().str(), ", k ", k.shape().str(), ", v ",
             v.shape().str());
  ONYX_CHECK(cos.shape() == sin.shape(), "cos ", cos.shape().str(), " and sin ", sin.shape().str(),
             " must have one shape");
  for (const Tensor* t : {&k, &v, &cos, &sin, &past_k, &past_v})
    ONYX_CHECK(t->dtype() == q.dtype(), "RotaryCache's inputs have one dtype, got ", t->type_str(), " beside q ",
               q.type_str());
  const bool indexed = index != nullptr;
  if (indexed)
    ONYX_CHECK(index->dtype() == DType::kInt64 &&
                   (index->numel() == 1 || (index->numel() == past_k.shape()[0] && index->numel() == past_v.shape()[0])),
               "RotaryCache: the index must be int64, one position or one per row, got ", index->type_str());
  const int64_t D = q.shape()[3], Dv = v.shape()[3];
  ONYX_CHECK(k.shape()[3] == D, "q ", q.shape().str(), " and k ", k.shape().str(), " must share a head size");
  const int64_t h = std::min<int64_t>(std::max<int64_t>(split.value_or(D / 2), 0), D);
  const RopeRows qr = rope_rows(q.shape(), cos.shape(), "q"), kr = rope_rows(k.shape(), cos.shape(), "k");
  const CacheRows kc = cache_rows(past_k.shape(), k.shape(), present_k.shape(), indexed,
                                  indexed && present_k.raw() == past_k.raw(), "k");
  const CacheRows vc = cache_rows(past_v.shape(), v.shape(), present_v.shape(), indexed,
                                  indexed && present_v.raw() == past_v.raw(), "v");
  dispatch_float(q.dtype(), "RotaryCache", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_width<T>();
    RotaryCacheArgs<T> a{};
    a.q = static_cast<const T*>(q.raw());
    a.k = static_cast<const T*>(k.raw());
    a.v = static_cast<const T*>(v.raw());
    a.cos = static_cast<const T*>(cos.raw());
    a.sin = static_cast<const T*>(sin.raw());
    a.past_k = static_cast<const T*>(past_k.raw());
    a.past_v = static_cast<const T*>(past_v.raw());
    a.q_rot = static_cast<T*>(q_rot.raw());
    a.present_k = static_cast<T*>(present_k.raw());
    a.present_v = static_cast<T*>(present_v.raw());
    a.k_rot = k_rot ? static_cast<T*>(k_rot->raw()) : nullptr;
    a.index = indexed ? index->data<int64_t>() : nullptr;
    a.per_row = indexed && index->numel() > 1 ? 1 : 0;
    a.err = cu.error_word;
    a.D = D;
    a.h = h;
    a.Dv = Dv;
    a.qr = qr;
    a.kr = kr;
    a.kc = kc;
    a.vc = vc;
    bool vec = 2 * h == D && h % N == 0 && Dv % N == 0;
    for (const void* p : {q.raw(), k.raw(), v.raw(), cos.raw(), sin.raw(), past_k.raw(), past_v.raw(), q_rot.raw(),
                          present_k.raw(), present_v.raw(), k_rot ? k_rot->raw() : nullptr})
      vec = vec && is_aligned(p, 16);
    a.upr_qk = vec ? h / N : D;
    a.upr_v = vec ? Dv / N : Dv;
    a.n_q = q.numel() / std::max<int64_t>(D, 1) * a.upr_qk;
    a.n_kr = k_rot ? k.numel() / std::max<int64_t>(D, 1) * a.upr_qk : 0;
    a.n_k = k.shape()[0] * kc.H * kc.written * a.upr_qk;
    a.n_v = v.shape()[0] * vc.H * vc.written * a.upr_v;
    const int64_t units = a.n_q + a.n_kr + a.n_k + a.n_v;
    if (units == 0 || D == 0) return;
    // 32-bit indexing when every element offset fits (the common case: cheaper division).
    int64_t widest = units;
    for (int64_t n : {q.numel(), k.numel(), v.numel(), cos.numel(), past_k.numel(), past_v.numel(), present_k.numel(),
                      present_v.numel()})
      widest = std::max(widest, n);
    const bool small = fits_index32(2 * widest + static_cast<int64_t>(sm_count(cu.device)) * 8 * kThreads);
    const unsigned blocks = resident_blocks_for(units, cu.device);
    if (vec && small) launch_kernel(rotary_cache_kernel<T, true, uint32_t>, blocks, kThreads, 0, cu, a);
    else if (vec) launch_kernel(rotary_cache_kernel<T, true, int64_t>, blocks, kThreads, 0, cu, a);
    else if (small) launch_kernel(rotary_cache_kernel<T, false, uint32_t>, blocks, kThreads, 0, cu, a);
    else launch_kernel(rotary_cache_kernel<T, false, int64_t>, blocks, kThreads, 0, cu, a);
  });
  ONYX_CUDA_CHECK_LAUNCH("RotaryCache");
}

void run_rotary_cache(KernelContext& ctx, CudaContext& cu) {
  RotaryCacheTensors t;
  t.q = &ctx.input(0), t.k = &ctx.input(1), t.v = &ctx.input(2), t.cos = &ctx.input(3), t.sin = &ctx.input(4);
  t.past_k = &ctx.input(5), t.past_v = &ctx.input(6);
  t.index = ctx.has_input(7) ? &ctx.input(7) : nullptr;
  t.q_rot = &ctx.output(0), t.present_k = &ctx.output(1), t.present_v = &ctx.output(2);
  t.k_rot = ctx.has_output(3) ? &ctx.output(3) : nullptr;
  rotary_cache(t, ctx.has_attr("split") ? std::optional<int64_t>(ctx.attr_int("split", 0)) : std::nullopt, cu);
}

namespace {

std::string rotary_cache_support(const Node& node, const std::vector<ValueType>& in) {
  if (in.size() < 7) return "RotaryCache takes 7 or 8 inputs";
  for (size_t i = 0; i < 7; ++i)
    if (!is_cuda_float(in[i].dtype)) return "RotaryCache on CUDA takes float32/float16/bfloat16";
  if (NodeView(node).has_input(7) && (in.size() < 8 || in[7].dtype != DType::kInt64))
    return "RotaryCache takes an int64 index";
  return "";
}

}  // namespace

void register_rotary_cache_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("onyx", "RotaryCache", 1, run_rotary_cache, rotary_cache_support));
}

}  // namespace onyx::cuda
