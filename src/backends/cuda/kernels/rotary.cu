// Rotary position embeddings: ONNX RotaryEmbedding (opset 23) and
// com.microsoft RotaryEmbedding, the same functions as src/ops/attention.cpp; and the fused
// elementwise ops of the load-time fusions (src/ops/fused_ops.cpp): onyx::RotaryHalf and
// onyx::SiluMul, one thread per output element, computed in float.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "ops/rotary.h"

namespace onyx::cuda {

namespace {

std::string rank_limit_reason(const std::vector<ValueType>& in) {
  for (const ValueType& v : in)
    if (v.shape.rank_known && v.shape.dims.size() > static_cast<size_t>(kMaxRank))
      return cat("the fused op on CUDA supports tensors of rank at most ", kMaxRank);
  return "";
}

struct RotaryArgs {
  unsigned int* err = nullptr;  // the device error word
  const void* cosc = nullptr;
  const void* sinc = nullptr;
  int cache_code = 0;
  const void* pos = nullptr;  // null: the cache row is (b or 0) * S + s
  int pos64 = 1;
  int pos_offset = 0;  // com.microsoft position_ids of one value: a start offset
  int cache_batch1 = 0;  // no position ids and a cache of batch 1
  int64_t B = 0, S = 0, H = 0, D = 0, rot = 0, half = 0;
  int64_t cache_rows = 0;  // valid cache rows
  int bhsd = 0;            // x is [B, H, S, D]; else [B, S, H, D] (or [B, S, H*D])
  int interleaved = 0;
  int64_t total = 0;
};

// One thread per output element: the first `rot` values of each head are
// rotated in pairs (halves, or interleaved neighbours), the rest copied.
template <class T>
__global__ void rotary_kernel(const T* __restrict__ x, T* __restrict__ y, RotaryArgs a) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < a.total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % a.D;
    if (d >= a.rot) {
      y[e] = x[e];
      continue;
    }
    int64_t t = e / a.D, b, s;
    if (a.bhsd) {
      s = t % a.S;
      b = t / a.S / a.H;
    } else {
      t /= a.H;
      s = t % a.S;
      b = t / a.S;
    }
    int64_t row;
    if (!a.pos) row = (a.cache_batch1 ? 0 : b) * a.S + s;
    else if (a.pos_offset) row = load_index(a.pos, a.pos64 != 0, 0) + s;
    else row = load_index(a.pos, a.pos64 != 0, b * a.S + s);
    if (row < 0 || row >= a.cache_rows) {
      // The CPU op rejects such positions: here the device error word reports it.
      if (a.err) atomicOr(a.err, kDeviceErrorRotaryPosition);
      y[e] = x[e];
      continue;
    }
    const int64_t o = e - d;
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
    const float c = load_f(a.cosc, a.cache_code, row * a.half + j);
    const float sn = load_f(a.sinc, a.cache_code, row * a.half + j);
    const float x1 = to_compute(x[o + i1]), x2 = to_compute(x[o + i2]);
    y[e] = from_compute<T>(first ? c * x1 - sn * x2 : sn * x1 + c * x2);
  }
}

void launch(KernelContext& ctx, CudaContext& cu, RotaryArgs& a) {
  const Tensor& x = ctx.input(0);
  a.total = x.numel();
  if (a.total == 0) return;
  dispatch_float(x.dtype(), "RotaryEmbedding", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(rotary_kernel<T>, blocks_for(a.total, 256), 256, 0, cu, static_cast<const T*>(x.raw()),
                                                                     static_cast<T*>(ctx.output(0).raw()), a);
  });
  ONYX_CUDA_CHECK_LAUNCH("RotaryEmbedding");
}

// ONNX RotaryEmbedding-23: X [B, H, S, D] or [B, S, H*D], cos/sin caches, and
// optional position_ids (input 3).
// The geometry of ops/rotary.h, as the kernel takes it.
RotaryArgs args_of(const RotaryGeometry& g, CudaContext& cu) {
  RotaryArgs a;
  a.err = cu.error_word;
  a.B = g.B;
  a.S = g.S;
  a.H = g.H;
  a.D = g.D;
  a.rot = g.rot;
  a.half = g.half;
  a.bhsd = g.bhsd ? 1 : 0;
  a.interleaved = g.interleaved ? 1 : 0;
  a.cache_rows = g.cache_rows;
  a.cache_batch1 = g.cache_batch1 ? 1 : 0;
  a.pos_offset = g.rows == RotaryGeometry::Rows::kPositionOffset ? 1 : 0;
  return a;
}

void set_caches(RotaryArgs& a, const Tensor& cosc, const Tensor& sinc) {
  ONYX_CHECK(cosc.dtype() == sinc.dtype(), "cos_cache ", cosc.type_str(), " and sin_cache ", sinc.type_str(),
             " differ");
  a.cosc = cosc.raw();
  a.sinc = sinc.raw();
  a.cache_code = fcode(cosc.dtype());
}

void run_onnx_rotary(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor* pids = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const RotaryGeometry g =
      onnx_rotary_geometry(ctx, x.shape(), ctx.input(1).shape(), ctx.input(2).shape(), pids ? &pids->shape() : nullptr);
  RotaryArgs a = args_of(g, cu);
  if (pids) {
    a.pos = pids->numel() ? pids->raw() : nullptr;
    a.pos64 = pids->dtype() == DType::kInt64;
  }
  set_caches(a, ctx.input(1), ctx.input(2));
  launch(ctx, cu, a);
}

void run_ms_rotary(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& pids = ctx.input(1);
  const RotaryGeometry g = ms_rotary_geometry(ctx, x.shape(), pids.shape(), ctx.input(2).shape(), ctx.input(3).shape());
  RotaryArgs a = args_of(g, cu);
  a.pos = pids.raw();
  a.pos64 = pids.dtype() == DType::kInt64;
  set_caches(a, ctx.input(2), ctx.input(3));
  launch(ctx, cu, a);
}

// x and the caches float32/float16/bfloat16; position ids int32/int64.
CudaSupportFn rotary_support(size_t pos_input, size_t first_cache) {
  return [pos_input, first_cache](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    NodeView n(node);
    const char* why = "RotaryEmbedding on CUDA supports float32/float16/bfloat16 data and int32/int64 position ids";
    if (inputs.size() <= first_cache + 1 || !is_cuda_float(inputs[0].dtype) ||
        !is_cuda_float(inputs[first_cache].dtype) || !is_cuda_float(inputs[first_cache + 1].dtype))
      return why;
    if (n.has_input(pos_input) && pos_input < inputs.size() && inputs[pos_input].dtype != DType::kInt32 &&
        inputs[pos_input].dtype != DType::kInt64)
      return why;
    return "";
  };
}

// y = x * cos + rotate_half(x) * sin, rotate_half by `split` (h): element j of a row of D is
// -x[j + h] below D - h, else x[j - (D - h)]; cos and sin broadcast onto x.
template <class T>
__global__ void rotary_half_kernel(const T* __restrict__ x, const T* __restrict__ cosv, const T* __restrict__ sinv,
                                   T* __restrict__ y, int64_t n, int64_t D, int64_t h, Broadcast<1> g) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % D;
    const float r = j < D - h ? -to_compute(x[e + h]) : to_compute(x[e - (D - h)]);
    int64_t off[1];
    broadcast_offsets<int64_t, 1>(g, e, off);
    y[e] = from_compute<T>(to_compute(x[e]) * to_compute(cosv[off[0]]) + r * to_compute(sinv[off[0]]));
  }
}

void run_rotary_half(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& c = ctx.input(1);
  const Tensor& sn = ctx.input(2);
  ONYX_CHECK(x.rank() >= 1 && c.shape() == sn.shape() && c.dtype() == x.dtype() && sn.dtype() == x.dtype(),
             "RotaryHalf needs cos and sin of one shape and x's dtype, got x ", x.type_str(), ", cos ", c.type_str(),
             ", sin ", sn.type_str());
  const int64_t D = x.shape()[x.rank() - 1];
  ONYX_CHECK(c.rank() >= 1 && c.shape()[c.rank() - 1] == D, "cos ", c.shape().str(), " must end in x's last dimension ",
             D);
  const int64_t h = std::min<int64_t>(std::max<int64_t>(ctx.attr_int("split", D / 2), 0), D);
  const Broadcast<1> g = make_broadcast<1>(x.shape(), {&c.shape()});
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "RotaryHalf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_kernel(rotary_half_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu,
                  static_cast<const T*>(x.raw()), static_cast<const T*>(c.raw()), static_cast<const T*>(sn.raw()),
                  static_cast<T*>(ctx.output(0).raw()), n, D, h, g);
  });
  ONYX_CUDA_CHECK_LAUNCH("RotaryHalf");
}

// y = g * sigmoid(g) * u, g and u broadcast onto y; 16-byte accesses when neither broadcasts.
template <class T>
__global__ void silu_mul_kernel(const T* __restrict__ gate, const T* __restrict__ up, T* __restrict__ y, int64_t n,
                                bool flat, bool vec, Broadcast<2> g) {
  ONYX_KERNEL_PROLOGUE();
  constexpr int N = vec_width<T, T>();
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto f = [](float a, float u) { return a / (1.f + __expf(-a)) * u; };
  int64_t start = 0;
  if (flat && vec) {
    const int64_t nv = n / N;
    for (int64_t i = tid; i < nv; i += stride) {
      const Vec<T, N> a = reinterpret_cast<const Vec<T, N>*>(gate)[i];
      const Vec<T, N> u = reinterpret_cast<const Vec<T, N>*>(up)[i];
      Vec<T, N> o;
      ONYX_UNROLL
      for (int j = 0; j < N; ++j) o.v[j] = from_compute<T>(f(to_compute(a.v[j]), to_compute(u.v[j])));
      reinterpret_cast<Vec<T, N>*>(y)[i] = o;
    }
    start = nv * N;
  }
  for (int64_t e = start + tid; e < n; e += stride) {
    int64_t off[2] = {e, e};
    if (!flat) broadcast_offsets<int64_t, 2>(g, e, off);
    y[e] = from_compute<T>(f(to_compute(gate[off[0]]), to_compute(up[off[1]])));
  }
}

void run_silu_mul(KernelContext& ctx, CudaContext& cu) {
  const Tensor& a = ctx.input(0);
  const Tensor& u = ctx.input(1);
  Tensor& y = ctx.output(0);
  ONYX_CHECK(a.dtype() == u.dtype(), "SiluMul's inputs differ in dtype: ", a.type_str(), " and ", u.type_str());
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool flat = a.shape() == y.shape() && u.shape() == y.shape();
  const Broadcast<2> g = make_broadcast<2>(y.shape(), {&a.shape(), &u.shape()});
  dispatch_float(y.dtype(), "SiluMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_width<T, T>();
    const bool vec = flat && is_aligned(a.raw(), N * sizeof(T)) && is_aligned(u.raw(), N * sizeof(T)) &&
                     is_aligned(y.raw(), N * sizeof(T));
    launch_kernel(silu_mul_kernel<T>, resident_blocks_for(vec ? n / N + 1 : n, cu.device), kThreads, 0, cu,
                  static_cast<const T*>(a.raw()), static_cast<const T*>(u.raw()), static_cast<T*>(y.raw()), n, flat,
                  vec, g);
  });
  ONYX_CUDA_CHECK_LAUNCH("SiluMul");
}

std::string fused_float_support(const Node&, const std::vector<ValueType>& in) {
  for (const ValueType& v : in)
    if (!is_cuda_float(v.dtype)) return "the fused op on CUDA takes float32/float16/bfloat16";
  return rank_limit_reason(in);
}

}  // namespace

void register_rotary_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("onyx", "RotaryHalf", 1, run_rotary_half, fused_float_support));
  r.add(domain_kernel("onyx", "SiluMul", 1, run_silu_mul, fused_float_support));
  r.add(onnx_kernel("RotaryEmbedding", 23, run_onnx_rotary, rotary_support(3, 1)));
  r.add(domain_kernel("com.microsoft", "RotaryEmbedding", 1, run_ms_rotary, rotary_support(1, 2)));
}

}  // namespace onyx::cuda
