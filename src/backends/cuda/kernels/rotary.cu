// Rotary position embeddings: ONNX RotaryEmbedding (opset 23) and
// com.microsoft RotaryEmbedding, the same functions as src/ops/attention.cpp.
// Registered from data.cu.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"

namespace onyx::cuda {

namespace {

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
    rotary_kernel<T><<<blocks_for(a.total, 256), 256, 0, cu.stream>>>(static_cast<const T*>(x.raw()),
                                                                     static_cast<T*>(ctx.output(0).raw()), a);
  });
  ONYX_CUDA_CHECK_LAUNCH("RotaryEmbedding");
}

// ONNX RotaryEmbedding-23: X [B, H, S, D] or [B, S, H*D], cos/sin caches, and
// optional position_ids (input 3).
void run_onnx_rotary(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& cosc = ctx.input(1);
  const Tensor& sinc = ctx.input(2);
  const Shape& xs = x.shape();
  ONYX_CHECK(xs.rank() == 3 || xs.rank() == 4, "X must be 3-D or 4-D, got ", xs.str());
  ONYX_CHECK(cosc.shape() == sinc.shape() && cosc.dtype() == sinc.dtype(), "cos_cache ", cosc.type_str(),
             " and sin_cache ", sinc.type_str(), " differ");
  RotaryArgs a;
  a.err = cu.error_word;
  a.B = xs[0];
  if (xs.rank() == 4) {
    a.H = xs[1];
    a.S = xs[2];
    a.D = xs[3];
    a.bhsd = 1;
  } else {
    a.H = ctx.attr_int("num_heads", 0);
    ONYX_CHECK(a.H > 0 && xs[2] % a.H == 0, "3-D X needs num_heads dividing its hidden size ", xs[2]);
    a.S = xs[1];
    a.D = xs[2] / a.H;
  }
  a.rot = ctx.attr_int("rotary_embedding_dim", 0);
  if (a.rot == 0) a.rot = a.D;
  ONYX_CHECK(a.rot <= a.D && a.rot % 2 == 0, "rotary_embedding_dim ", a.rot,
             " must be even and at most the head size ", a.D);
  a.half = a.rot / 2;
  const Shape& cs = cosc.shape();
  ONYX_CHECK(cs.rank() >= 2 && cs[cs.rank() - 1] == a.half, "cos_cache's last dimension must be ", a.half,
             " (rotary_embedding_dim / 2), got shape ", cs.str());
  if (ctx.has_input(3)) {
    const Tensor& p = ctx.input(3);
    ONYX_CHECK(p.numel() == a.B * a.S, "position_ids must be [", a.B, ", ", a.S, "], got ", p.shape().str());
    ONYX_CHECK(cs.rank() == 2, "with position_ids the caches must be 2-D, got ", cs.str());
    a.pos = p.numel() ? p.raw() : nullptr;
    a.pos64 = p.dtype() == DType::kInt64;
    a.cache_rows = cs[0];
  } else {
    ONYX_CHECK(cs.rank() == 3 && (cs[0] == a.B || cs[0] == 1) && cs[1] == a.S, "without position_ids the caches must be [",
               a.B, ", ", a.S, ", ", a.half, "], got ", cs.str());
    a.cache_batch1 = cs[0] == 1 ? 1 : 0;
    a.cache_rows = cs[0] * cs[1];
  }
  a.cosc = cosc.raw();
  a.sinc = sinc.raw();
  a.cache_code = fcode(cosc.dtype());
  a.interleaved = ctx.attr_int("interleaved", 0) != 0;
  launch(ctx, cu, a);
}

// com.microsoft RotaryEmbedding: input [B, S, hidden] or [B, S, H, D],
// position_ids [B, S] or [1] (an offset), cos_cache/sin_cache [max_pos, rot/2].
void run_ms_rotary(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& pids = ctx.input(1);
  const Tensor& cosc = ctx.input(2);
  const Tensor& sinc = ctx.input(3);
  const Shape& xs = x.shape();
  ONYX_CHECK(xs.rank() == 3 || xs.rank() == 4, "input must be 3-D or 4-D, got ", xs.str());
  ONYX_CHECK(cosc.rank() == 2 && cosc.shape() == sinc.shape() && cosc.dtype() == sinc.dtype(),
             "cos_cache and sin_cache must be equal 2-D tensors, got ", cosc.type_str(), " and ", sinc.type_str());
  RotaryArgs a;
  a.err = cu.error_word;
  a.B = xs[0];
  a.S = xs[1];
  a.half = cosc.shape()[1];
  if (xs.rank() == 4) {
    a.H = xs[2];
    a.D = xs[3];
  } else {
    const int64_t rot_attr = ctx.attr_int("rotary_embedding_dim", 0);
    a.H = ctx.attr_int("num_heads", 0);
    if (a.H == 0 && (rot_attr > 0 || a.half > 0)) a.H = xs[2] / (rot_attr > 0 ? rot_attr : 2 * a.half);
    ONYX_CHECK(a.H > 0 && xs[2] % a.H == 0, "cannot split hidden size ", xs[2], " into heads");
    a.D = xs[2] / a.H;
  }
  a.rot = ctx.attr_int("rotary_embedding_dim", 0);
  if (a.rot == 0) a.rot = 2 * a.half;
  ONYX_CHECK(a.rot == 2 * a.half && a.rot <= a.D, "rotary_embedding_dim ", a.rot, " does not match the cache width ",
             a.half, " or head size ", a.D);
  ONYX_CHECK(pids.numel() == 1 || pids.numel() == a.B * a.S, "position_ids must be [", a.B, ", ", a.S,
             "] or [1], got ", pids.shape().str());
  a.pos = pids.raw();
  a.pos64 = pids.dtype() == DType::kInt64;
  a.pos_offset = pids.numel() == 1 ? 1 : 0;
  a.cache_rows = cosc.shape()[0];
  a.cosc = cosc.raw();
  a.sinc = sinc.raw();
  a.cache_code = fcode(cosc.dtype());
  a.interleaved = ctx.attr_int("interleaved", 0) != 0;
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

}  // namespace

void register_rotary_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("RotaryEmbedding", 23, run_onnx_rotary, rotary_support(3, 1)));
  r.add(domain_kernel("com.microsoft", "RotaryEmbedding", 1, run_ms_rotary, rotary_support(1, 2)));
}

}  // namespace onyx::cuda
