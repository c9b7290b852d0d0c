// Softmax, LogSoftmax and the row normalizations: LayerNormalization,
// RMSNormalization, SimplifiedLayerNormalization, SkipLayerNormalization and
// SkipSimplifiedLayerNormalization. Registered from reduce_norm.cu.
//
// Statistics are float32 (the CPU uses double; results are rounded to the
// output type once either way).
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/norm.h"

namespace onyx::cuda {

namespace {

struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// ---- Softmax / LogSoftmax ----
// One pass keeps a running maximum m and the sum s of exp(v - m); a second pass
// writes exp(v - m) / s or v - m - log(s).

__device__ __forceinline__ void online_add(float& m, float& s, float v) {
  // exp(-inf - m) adds nothing (and -inf - -inf would make a NaN before a finite m shows up).
  if (v == -__int_as_float(0x7f800000)) return;
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else {
    s += expf(v - m);  // NaN inputs make s NaN, as on the CPU
  }
}
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  // The equal case avoids (inf - inf) when both maxima are infinite.
  const float a = m == mx ? s : s * expf(m - mx);
  const float b = m2 == mx ? s2 : s2 * expf(m2 - mx);
  m = mx;
  s = a + b;
}

// Rows of `cols` contiguous values; `group` threads (32 or the block) per row.
template <class T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                                    int group, int log_out) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float sm[32], ss[32];
  const int rows_per_block = blockDim.x / group;
  const int lane = threadIdx.x % group;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * rows_per_block;
  const int64_t iters = (rows + row_stride - 1) / row_stride;  // uniform across the block
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = first + it * row_stride;
    const bool live = row < rows;
    const T* p = x + (live ? row : 0) * cols;
    float m = -__int_as_float(0x7f800000), s = 0.f;
    if (live)
      for (int64_t j = lane; j < cols; j += group) online_add(m, s, to_compute(p[j]));
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      online_merge(m, s, m2, s2);
    }
    if (group != 32) {
      __syncthreads();
      if ((threadIdx.x & 31) == 0) {
        sm[threadIdx.x >> 5] = m;
        ss[threadIdx.x >> 5] = s;
      }
      __syncthreads();
      m = sm[0];
      s = ss[0];
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) online_merge(m, s, sm[w], ss[w]);
    }
    if (!live) continue;
    T* q = y + row * cols;
    if (log_out) {
      const float shift = m + logf(s);
      for (int64_t j = lane; j < cols; j += group) q[j] = from_compute<T>(to_compute(p[j]) - shift);
    } else {
      const float inv = 1.f / s;
      for (int64_t j = lane; j < cols; j += group) q[j] = from_compute<T>(expf(to_compute(p[j]) - m) * inv);
    }
  }
}

// The axis is not innermost: one thread per (outer, inner) column.
template <class T>
__global__ void softmax_cols_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                                    int64_t inner, int log_out) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = outer * inner;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    float m = -__int_as_float(0x7f800000), s = 0.f;
    for (int64_t j = 0; j < n; ++j) online_add(m, s, to_compute(x[base + j * inner]));
    if (log_out) {
      const float shift = m + logf(s);
      for (int64_t j = 0; j < n; ++j) y[base + j * inner] = from_compute<T>(to_compute(x[base + j * inner]) - shift);
    } else {
      const float inv = 1.f / s;
      for (int64_t j = 0; j < n; ++j)
        y[base + j * inner] = from_compute<T>(expf(to_compute(x[base + j * inner]) - m) * inv);
    }
  }
}

template <class T>
void launch_softmax(KernelContext& ctx, CudaContext& cu, bool log_out) {
  const Tensor& xt = ctx.input(0);
  const auto& d = xt.shape().dims();
  const int64_t rank = static_cast<int64_t>(d.size());
  int64_t outer = 1, n = 1, inner = 1;
  if (ctx.opset() < 13) {
    // Before opset 13 the input is coerced to 2-D [prod(d[:axis]), prod(d[axis:])].
    const int64_t axis = rank == 0 ? 0 : norm_axis(ctx.attr_int("axis", 1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : n) *= d[i];
  } else {
    ONYX_CHECK(rank >= 1, "Softmax input must have rank >= 1");
    const int64_t axis = norm_axis(ctx.attr_int("axis", -1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : i == axis ? n : inner) *= d[i];
  }
  if (xt.numel() == 0) return;
  const T* x = static_cast<const T*>(xt.raw());
  T* y = static_cast<T*>(ctx.output(0).raw());
  if (inner == 1) {
    const int threads = n <= 1024 ? 256 : 1024;
    const int group = n <= 1024 ? 32 : threads;
    launch_kernel(softmax_rows_kernel<T>, blocks_for(outer, threads / group), threads, 0, cu, x, y, outer, n, group,
                                                                                          log_out ? 1 : 0);
    ONYX_CUDA_CHECK_LAUNCH("Softmax (rows)");
  } else {
    launch_kernel(softmax_cols_kernel<T>, blocks_for(outer * inner, 256), 256, 0, cu, x, y, outer, n, inner,
                                                                                 log_out ? 1 : 0);
    ONYX_CUDA_CHECK_LAUNCH("Softmax (columns)");
  }
}

// ---- row normalizations ----

struct NormArgs {
  const void* x = nullptr;
  const void* skip = nullptr;      // added to x (Skip*Norm), broadcast by skip_b over x's flat index
  const void* pre_bias = nullptr;  // added to x before normalizing (Skip*Norm's bias), per column
  const void* gamma = nullptr;     // per column
  const void* beta = nullptr;      // per column, after scaling
  void* y = nullptr;
  void* sum_out = nullptr;   // x + skip + bias (input_skip_bias_sum)
  void* mean_out = nullptr;  // per row
  void* inv_out = nullptr;   // per row: 1 / sqrt(var + eps)
  int skip_code = 0, pre_bias_code = 0, gamma_code = 0, beta_code = 0, sum_code = 0, mean_code = 0, inv_code = 0;
  OperandBroadcast skip_b, pre_bias_b, gamma_b, beta_b;
  int64_t rows = 0, cols = 0;
  float eps = 0.f;
  int center = 1;  // 0: RMS normalization (nothing subtracted)
  int cached = 0;  // the row fits in dynamic shared memory
};

// One block per row. Two passes over the row (mean, then squared deviations),
// read from shared memory when the row fits there; each thread only touches its
// own columns of the cache, so the passes need no barrier between them.
template <class T>
__global__ void norm_rows_kernel(NormArgs a) {
  ONYX_KERNEL_PROLOGUE();
  extern __shared__ float rowbuf[];
  __shared__ float scratch[32];
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const float fcols = static_cast<float>(a.cols);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t base = row * a.cols;
    auto value = [&](int64_t j) {
      float v = to_compute(x[base + j]);
      if (a.skip) v += load_f(a.skip, a.skip_code, operand_index(a.skip_b, base + j));
      if (a.pre_bias) v += load_f(a.pre_bias, a.pre_bias_code, operand_index(a.pre_bias_b, j));
      return v;
    };
    float sum = 0.f;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float v = value(j);
      if (a.cached) rowbuf[j] = v;
      if (a.sum_out) store_f(a.sum_out, a.sum_code, base + j, v);
      sum += v;
    }
    const float mean = block_reduce(sum, AddF{}, scratch) / fcols;
    const float shift = a.center ? mean : 0.f;
    float sq = 0.f;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float dv = (a.cached ? rowbuf[j] : value(j)) - shift;
      sq += dv * dv;
    }
    const float inv = 1.f / sqrtf(block_reduce(sq, AddF{}, scratch) / fcols + a.eps);
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float v = ((a.cached ? rowbuf[j] : value(j)) - shift) * inv;
      float out = v * load_f(a.gamma, a.gamma_code, operand_index(a.gamma_b, j));
      if (a.beta) out += load_f(a.beta, a.beta_code, operand_index(a.beta_b, j));
      y[base + j] = from_compute<T>(out);
    }
    if (threadIdx.x == 0) {
      if (a.mean_out) store_f(a.mean_out, a.mean_code, row, shift);  // RMS forms write 0, as the CPU op
      if (a.inv_out) store_f(a.inv_out, a.inv_code, row, inv);
    }
  }
}

// The common case, memory-bound: x rows contiguous, scale (and bias) one value per
// column of x's own dtype, nothing added first but a skip of x's layout (whose sum with x
// is written out when asked). Each thread holds its slice of the
// row in registers (16-byte loads), so the row is read once and written once.
template <class T, int kVec>
struct alignas(16) Pack {
  T v[kVec];
};

template <class T, int kVec, int kMaxPacks>
__global__ void norm_rows_fast_kernel(NormArgs a) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float scratch[32];
  using P = Pack<T, kVec>;
  const int packs = static_cast<int>(a.cols / kVec);
  const float fcols = static_cast<float>(a.cols);
  const P* gamma = static_cast<const P*>(a.gamma);
  const P* beta = static_cast<const P*>(a.beta);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const P* x = static_cast<const P*>(a.x) + row * packs;
    const P* skip = a.skip ? static_cast<const P*>(a.skip) + row * packs : nullptr;
    P* sum_out = a.sum_out ? static_cast<P*>(a.sum_out) + row * packs : nullptr;
    P* y = static_cast<P*>(a.y) + row * packs;
    float v[kMaxPacks][kVec];
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
        const P p = x[j];
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[k][e] = to_compute(p.v[e]);
        if (skip) {  // Skip*Norm: x + skip, also written out (input_skip_bias_sum)
          const P q = skip[j];
#pragma unroll
          for (int e = 0; e < kVec; ++e) v[k][e] += to_compute(q.v[e]);
        }
        if (sum_out) {
          P o;
#pragma unroll
          for (int e = 0; e < kVec; ++e) o.v[e] = from_compute<T>(v[k][e]);
          sum_out[j] = o;
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum += v[k][e];
      }
    }
    // RMS norms skip the mean (their mean output, SkipSimplifiedLayerNormalization's, is 0).
    const float mean = a.center ? block_reduce(sum, AddF{}, scratch) / fcols : 0.f;
    const float shift = a.center ? mean : 0.f;
    float sq = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k)
      if (threadIdx.x + k * blockDim.x < packs)
#pragma unroll
        for (int e = 0; e < kVec; ++e) sq += (v[k][e] - shift) * (v[k][e] - shift);
    const float inv = rsqrtf(block_reduce(sq, AddF{}, scratch) / fcols + a.eps);
#pragma unroll
    for (int k = 0; k < kMaxPacks; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < packs) {
        const P g = gamma[j];
        P out;
        if (beta) {
          const P b = beta[j];
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            out.v[e] = from_compute<T>((v[k][e] - shift) * inv * to_compute(g.v[e]) + to_compute(b.v[e]));
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) out.v[e] = from_compute<T>((v[k][e] - shift) * inv * to_compute(g.v[e]));
        }
        y[j] = out;
      }
    }
    if (threadIdx.x == 0) {
      if (a.mean_out) store_f(a.mean_out, a.mean_code, row, shift);  // RMS forms write 0, as the CPU op
      if (a.inv_out) store_f(a.inv_out, a.inv_code, row, inv);
    }
  }
}

// Launches the fast kernel when the arguments fit it; returns false otherwise.
template <class T>
bool launch_norm_fast(const NormArgs& a, CudaContext& cu, const char* what) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kMaxPacks = 4;
  const int code =
      fcode(dtype_of<std::conditional_t<std::is_same_v<T, float>, float,
                                        std::conditional_t<std::is_same_v<T, __half>, Float16, BFloat16>>>);
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (a.pre_bias || a.gamma_b.mode != 0 || a.gamma_code != code) return false;
  // A skip of x's own layout and dtype (Skip*Norm), and the sum written in x's dtype.
  if (a.skip && (a.skip_b.mode != 0 || a.skip_code != code || !aligned(a.skip))) return false;
  if (a.sum_out && (a.sum_code != code || !aligned(a.sum_out))) return false;
  if (a.beta && (a.beta_b.mode != 0 || a.beta_code != code || !aligned(a.beta))) return false;
  if (a.cols % kVec != 0 || a.cols / kVec > int64_t{1024} * kMaxPacks) return false;
  if (!aligned(a.x) || !aligned(a.y) || !aligned(a.gamma)) return false;
  const int64_t packs = a.cols / kVec;
  int64_t threads = ((packs + kMaxPacks - 1) / kMaxPacks + 31) / 32 * 32;
  threads = std::min<int64_t>(1024, std::max<int64_t>(64, threads));
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, int64_t{1} << 20));
  launch_kernel(norm_rows_fast_kernel<T, kVec, kMaxPacks>, blocks, static_cast<unsigned>(threads), 0, cu, a);
  ONYX_CUDA_CHECK_LAUNCH(what);
  return true;
}

template <class T>
void launch_norm(NormArgs& a, CudaContext& cu, const char* what) {
  if (a.rows == 0 || a.cols == 0) return;
  if (launch_norm_fast<T>(a, cu, what)) return;
  int64_t threads = ((a.cols + 3) / 4 + 31) / 32 * 32;
  threads = std::min<int64_t>(1024, std::max<int64_t>(32, threads));
  const size_t smem = static_cast<size_t>(a.cols) * sizeof(float);
  a.cached = smem <= 48 * 1024 ? 1 : 0;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(a.rows, int64_t{1} << 20));
  launch_kernel(norm_rows_kernel<T>, blocks, static_cast<unsigned>(threads), a.cached ? smem : 0, cu, a);
  ONYX_CUDA_CHECK_LAUNCH(what);
}

// Optional statistics outputs, in whatever float dtype each output has.
void set_stat(KernelContext& ctx, int index, void*& ptr, int& code) {
  if (index < 0 || !ctx.has_output(static_cast<size_t>(index))) return;
  Tensor& t = ctx.output(static_cast<size_t>(index));
  if (t.numel() == 0) return;
  ptr = t.raw();
  code = fcode(t.dtype());
}

// LayerNormalization (center, bias input 2, stats 1 and 2), RMSNormalization
// (no stats) and SimplifiedLayerNormalization (1/std at output 1).
void run_layer_norm(KernelContext& ctx, CudaContext& cu, bool center, bool bias_input, int mean_out, int inv_out) {
  const Tensor& x = ctx.input(0);
  const auto& d = x.shape().dims();
  const int64_t rank = static_cast<int64_t>(d.size());
  const int64_t axis = norm_axis(ctx.attr_int("axis", -1), rank);
  const Shape norm_shape(std::vector<int64_t>(d.begin() + axis, d.end()));
  NormArgs a;
  a.cols = norm_shape.numel();
  a.rows = a.cols == 0 ? 0 : x.numel() / a.cols;
  a.x = x.raw();
  a.y = ctx.output(0).raw();
  a.gamma = ctx.input(1).raw();
  a.gamma_code = fcode(ctx.input(1).dtype());
  a.gamma_b = make_operand_broadcast(ctx.input(1).shape(), norm_shape, "scale");
  if (bias_input && ctx.has_input(2)) {
    a.beta = ctx.input(2).raw();
    a.beta_code = fcode(ctx.input(2).dtype());
    a.beta_b = make_operand_broadcast(ctx.input(2).shape(), norm_shape, "bias");
  }
  a.eps = ctx.attr_float("epsilon", 1e-5f);
  a.center = center ? 1 : 0;
  set_stat(ctx, mean_out, a.mean_out, a.mean_code);
  set_stat(ctx, inv_out, a.inv_out, a.inv_code);
  dispatch_float(x.dtype(), "LayerNormalization",
                 [&](auto tag) { launch_norm<typename decltype(tag)::type>(a, cu, "LayerNormalization"); });
}

// SkipLayerNormalization: input, skip, gamma, beta?, bias?. SkipSimplified: input,
// skip, gamma, bias?. Outputs: output, mean?, inv_std_var?, input_skip_bias_sum?.
void run_skip_norm(KernelContext& ctx, CudaContext& cu, bool center) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 1, "input must have rank >= 1");
  const int64_t cols = x.shape()[x.rank() - 1];
  const Shape hidden{std::vector<int64_t>{cols}};
  NormArgs a;
  a.cols = cols;
  a.rows = cols == 0 ? 0 : x.numel() / cols;
  a.x = x.raw();
  a.y = ctx.output(0).raw();
  const Tensor& skip = ctx.input(1);
  a.skip = skip.raw();
  a.skip_code = fcode(skip.dtype());
  a.skip_b = make_operand_broadcast(skip.shape(), x.shape(), "skip");
  a.gamma = ctx.input(2).raw();
  a.gamma_code = fcode(ctx.input(2).dtype());
  a.gamma_b = make_operand_broadcast(ctx.input(2).shape(), hidden, "gamma");
  if (center && ctx.has_input(3)) {
    a.beta = ctx.input(3).raw();
    a.beta_code = fcode(ctx.input(3).dtype());
    a.beta_b = make_operand_broadcast(ctx.input(3).shape(), hidden, "beta");
  }
  const size_t bias_index = center ? 4 : 3;
  if (ctx.has_input(bias_index)) {
    const Tensor& b = ctx.input(bias_index);
    a.pre_bias = b.raw();
    a.pre_bias_code = fcode(b.dtype());
    a.pre_bias_b = make_operand_broadcast(b.shape(), hidden, "bias");
  }
  a.eps = ctx.attr_float("epsilon", 1e-12f);
  a.center = center ? 1 : 0;
  set_stat(ctx, 1, a.mean_out, a.mean_code);
  set_stat(ctx, 2, a.inv_out, a.inv_code);
  set_stat(ctx, 3, a.sum_out, a.sum_code);
  dispatch_float(x.dtype(), "SkipLayerNormalization",
                 [&](auto tag) { launch_norm<typename decltype(tag)::type>(a, cu, "SkipLayerNormalization"); });
}

// Every present input is float32/float16/bfloat16 (each may differ from input 0).
CudaSupportFn float_inputs(std::string name) {
  return [name](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    NodeView n(node);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (n.has_input(i) && !is_cuda_float(inputs[i].dtype))
        return name + " on CUDA supports float32/float16/bfloat16 inputs";
    return "";
  };
}


}  // namespace

void rms_norm_rows(DType dt, const void* x, const void* skip, const void* gamma, void* y, void* sum, int64_t rows,
                   int64_t cols, float eps, CudaContext& cu) {
  NormArgs a;
  a.rows = rows;
  a.cols = cols;
  a.x = x;
  a.y = y;
  a.skip = skip;
  a.skip_code = fcode(dt);
  a.gamma = gamma;
  a.gamma_code = fcode(dt);
  a.sum_out = sum;
  a.sum_code = fcode(dt);
  a.eps = eps;
  a.center = 0;
  dispatch_float(dt, "RMS normalization",
                 [&](auto tag) { launch_norm<typename decltype(tag)::type>(a, cu, "RmsNormLinear (norm)"); });
}

void register_norm_kernels(CudaKernelRegistry& r) {
  for (const char* name : {"Softmax", "LogSoftmax"}) {
    const bool log_out = std::string(name) == "LogSoftmax";
    r.add(onnx_kernel(name, 1,
        [log_out, name](KernelContext& ctx, CudaContext& cu) {
          dispatch_float(ctx.input(0).dtype(), name,
                         [&](auto tag) { launch_softmax<typename decltype(tag)::type>(ctx, cu, log_out); });
        },
        float_inputs(name)));
  }
  r.add(onnx_kernel("LayerNormalization", 17,
      [](KernelContext& ctx, CudaContext& cu) { run_layer_norm(ctx, cu, true, true, 1, 2); },
      [base = float_inputs("LayerNormalization")](const Node& node, const std::vector<ValueType>& inputs) {
        // The statistics outputs take stash_type's dtype; float64 has no CUDA store here.
        const int64_t stash = NodeView(node).attr_int("stash_type", 1);
        if (stash != 1 && stash != 10 && stash != 16)
          return std::string("LayerNormalization on CUDA supports stash_type float32/float16/bfloat16");
        return base(node, inputs);
      }));
  r.add(onnx_kernel("RMSNormalization", 23,
      [](KernelContext& ctx, CudaContext& cu) { run_layer_norm(ctx, cu, false, false, -1, -1); },
      float_inputs("RMSNormalization")));
  for (const char* domain : {"", "com.microsoft"}) {
    r.add(domain_kernel(domain, "SimplifiedLayerNormalization", 1,
        [](KernelContext& ctx, CudaContext& cu) { run_layer_norm(ctx, cu, false, false, -1, 1); },
        [base = float_inputs("SimplifiedLayerNormalization")](const Node& node, const std::vector<ValueType>& in) {
          // Y takes the scale's dtype; the kernel writes the input's.
          if (in.size() > 1 && in[1].dtype != in[0].dtype)
            return std::string("SimplifiedLayerNormalization on CUDA needs the scale in the input's dtype");
          return base(node, in);
        }));
    r.add(domain_kernel(
        domain, "SkipLayerNormalization", 1, [](KernelContext& ctx, CudaContext& cu) { run_skip_norm(ctx, cu, true); },
        float_inputs("SkipLayerNormalization")));
    r.add(domain_kernel(domain, "SkipSimplifiedLayerNormalization", 1,
        [](KernelContext& ctx, CudaContext& cu) { run_skip_norm(ctx, cu, false); },
        float_inputs("SkipSimplifiedLayerNormalization")));
  }
}

}  // namespace onyx::cuda
