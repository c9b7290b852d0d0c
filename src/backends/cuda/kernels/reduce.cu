// Reductions and normalizations: Reduce*, Softmax, LayerNorm, RMSNorm, Skip*Norm.
// Reduce{Sum,Mean,Max,Min} live here; Softmax/LogSoftmax and the layer norms are
// in norm.cu (registered from this file's register function).
#include <algorithm>
#include <limits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/common/broadcast.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {

namespace {

enum ReduceOp : int { kSum = 0, kMean = 1, kMax = 2, kMin = 3 };

// Accumulation: float for the float types, int64 for the integers (as the CPU,
// which sums int32 in int64 and narrows the result).
template <class T>
struct RTraits {
  using Acc = float;
  __device__ static float load(T v) { return to_compute(v); }
  __device__ static T store(float v) { return from_compute<T>(v); }
  __device__ static float lowest() { return -__int_as_float(0x7f800000); }
  __device__ static float highest() { return __int_as_float(0x7f800000); }
};
template <class I>
struct RIntTraits {
  using Acc = int64_t;
  __device__ static int64_t load(I v) { return static_cast<int64_t>(v); }
  __device__ static I store(int64_t v) { return static_cast<I>(v); }
  __device__ static int64_t lowest() { return static_cast<int64_t>(std::numeric_limits<I>::lowest()); }
  __device__ static int64_t highest() { return static_cast<int64_t>(std::numeric_limits<I>::max()); }
};
template <>
struct RTraits<int32_t> : RIntTraits<int32_t> {};
template <>
struct RTraits<int64_t> : RIntTraits<int64_t> {};

template <class A>
struct Combine {
  int op;
  __device__ A operator()(A a, A b) const {
    if (op == kSum || op == kMean) return a + b;
    // b != b: a NaN wins (and, once held, stays: comparisons with NaN are false).
    if (op == kMax) return (b > a || b != b) ? b : a;
    return (b < a || b != b) ? b : a;
  }
};

template <class T>
__device__ typename RTraits<T>::Acc reduce_init(int op) {
  using Tr = RTraits<T>;
  if (op == kMax) return Tr::lowest();
  if (op == kMin) return Tr::highest();
  return typename Tr::Acc(0);
}

template <class T>
__device__ T reduce_finish(int op, typename RTraits<T>::Acc a, int64_t count) {
  using A = typename RTraits<T>::Acc;
  if (op == kMean) {
    if constexpr (std::is_same_v<A, float>) {
      a = a / static_cast<float>(count);  // 0/0: NaN, as the CPU
    } else {
      a = count == 0 ? A(0) : a / count;
    }
  }
  return RTraits<T>::store(a);
}

// Rows of `cols` contiguous values, one output each. `group` threads (32: a warp,
// or the whole block) share a row.
template <class T>
__global__ void reduce_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols, int op,
                                   int group) {
  ONYX_KERNEL_PROLOGUE();
  using A = typename RTraits<T>::Acc;
  __shared__ A scratch[32];
  const Combine<A> comb{op};
  const int rows_per_block = blockDim.x / group;
  const int lane = threadIdx.x % group;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / group;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * rows_per_block;
  // Every thread of the block runs the same number of iterations (block_reduce syncs).
  const int64_t iters = (rows + row_stride - 1) / row_stride;
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t row = first + it * row_stride;
    A acc = reduce_init<T>(op);
    if (row < rows) {
      const T* p = x + row * cols;
      for (int64_t j = lane; j < cols; j += group) acc = comb(acc, RTraits<T>::load(p[j]));
    }
    if (group == 32) acc = warp_reduce(acc, comb);
    else acc = block_reduce(acc, comb, scratch);
    if (lane == 0 && row < rows) y[row] = reduce_finish<T>(op, acc, cols);
  }
}

// General layout: one thread per output; the kept dims give the output's base
// offset in the input, the reduced dims are walked per element.
struct StridedReduce {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[kMaxRank], kept_strides[kMaxRank];
  int64_t red_dims[kMaxRank], red_strides[kMaxRank];
  int64_t outputs = 0, count = 0;
};

template <class T>
__global__ void reduce_strided_kernel(const T* __restrict__ x, T* __restrict__ y, StridedReduce s, int op) {
  ONYX_KERNEL_PROLOGUE();
  using A = typename RTraits<T>::Acc;
  const Combine<A> comb{op};
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < s.outputs;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t base = 0, rem = o;
    for (int a = s.kept_rank - 1; a >= 0; --a) {
      base += (rem % s.kept_dims[a]) * s.kept_strides[a];
      rem /= s.kept_dims[a];
    }
    A acc = reduce_init<T>(op);
    if (s.red_rank == 1) {
      const int64_t st = s.red_strides[0];
      for (int64_t r = 0; r < s.count; ++r) acc = comb(acc, RTraits<T>::load(x[base + r * st]));
    } else {
      for (int64_t r = 0; r < s.count; ++r) {
        int64_t off = base, q = r;
        for (int a = s.red_rank - 1; a >= 0; --a) {
          off += (q % s.red_dims[a]) * s.red_strides[a];
          q /= s.red_dims[a];
        }
        acc = comb(acc, RTraits<T>::load(x[off]));
      }
    }
    y[o] = reduce_finish<T>(op, acc, s.count);
  }
}

// keepdims=0 with the axes on the device and a shape that does not tell them: each thread
// reads the axes itself (at most kMaxRank of them), then reduces as reduce_strided_kernel.
struct DeviceAxesReduce {
  int rank = 0;
  int64_t dims[kMaxRank];
  const void* axes = nullptr;
  int naxes = 0, axes64 = 1;
  int64_t outputs = 0;
  unsigned int* err = nullptr;
};

template <class T>
__global__ void reduce_device_axes_kernel(const T* __restrict__ x, T* __restrict__ y, DeviceAxesReduce s, int op) {
  ONYX_KERNEL_PROLOGUE();
  using A = typename RTraits<T>::Acc;
  const Combine<A> comb{op};
  bool red[kMaxRank] = {};
  for (int i = 0; i < s.naxes; ++i) {
    int64_t a = load_index(s.axes, s.axes64 != 0, i);
    if (a < 0) a += s.rank;
    if (a < 0 || a >= s.rank) {  // inference checked the axes at planning; never read outside
      if (s.err && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(s.err, kDeviceErrorGatherIndex);
      return;
    }
    red[a] = true;
  }
  int64_t stride[kMaxRank], count = 1, st = 1;
  for (int a = s.rank - 1; a >= 0; --a) {
    stride[a] = st;
    st *= s.dims[a];
    if (red[a]) count *= s.dims[a];
  }
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < s.outputs;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t base = 0, rem = o;
    for (int a = s.rank - 1; a >= 0; --a)
      if (!red[a]) {
        base += (rem % s.dims[a]) * stride[a];
        rem /= s.dims[a];
      }
    A acc = reduce_init<T>(op);
    for (int64_t r = 0; r < count; ++r) {
      int64_t off = base, q = r;
      for (int a = s.rank - 1; a >= 0; --a)
        if (red[a]) {
          off += (q % s.dims[a]) * stride[a];
          q /= s.dims[a];
        }
      acc = comb(acc, RTraits<T>::load(x[off]));
    }
    y[o] = reduce_finish<T>(op, acc, count);
  }
}

template <class T>
void launch_reduce_device_axes(KernelContext& ctx, CudaContext& cu, int op) {
  const Tensor& xin = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  DeviceAxesReduce s;
  s.rank = static_cast<int>(xin.rank());
  ONYX_CHECK(s.rank <= kMaxRank && ctx.input(1).numel() <= kMaxRank, "Reduce on CUDA: too many dimensions");
  for (int i = 0; i < s.rank; ++i) s.dims[i] = xin.shape()[i];
  s.axes = ctx.input(1).raw();
  s.naxes = static_cast<int>(ctx.input(1).numel());
  s.axes64 = ctx.input(1).dtype() == DType::kInt64;
  s.outputs = out.numel();
  s.err = cu.error_word;
  launch_kernel(reduce_device_axes_kernel<T>, blocks_for(s.outputs, 256), 256, 0, cu, static_cast<const T*>(xin.raw()),
                static_cast<T*>(out.raw()), s, op);
  ONYX_CUDA_CHECK_LAUNCH("Reduce (axes on the device)");
}

// The opset from which `axes` is an input rather than an attribute (as the CPU op).
int axes_input_opset(const std::string& name) { return name == "ReduceSum" ? 13 : 18; }

template <class T>
void launch_reduce(KernelContext& ctx, CudaContext& cu, const std::vector<bool>& reduced, int op) {
  const Tensor& xin = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) return;
  const auto& d = xin.shape().dims();
  // Coalesce: drop ones, merge neighbours of the same kind (keeping zeros: an
  // empty reduction still writes its initial value).
  std::vector<int64_t> dims, strides;
  std::vector<bool> red;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 1) continue;
    if (!red.empty() && red.back() == reduced[i]) {
      dims.back() *= d[i];
    } else {
      dims.push_back(d[i]);
      red.push_back(reduced[i]);
    }
  }
  const T* x = static_cast<const T*>(xin.raw());
  T* y = static_cast<T*>(out.raw());
  int64_t count = 1;
  bool any_reduced = false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (red[i]) {
      count *= dims[i];
      any_reduced = true;
    }
  if (!any_reduced) {
    // Nothing reduced (or only size-1 axes): the output is the input.
    ONYX_CUDA_CHECK(cudaMemcpyAsync(y, x, out.bytes(), cudaMemcpyDeviceToDevice, cu.stream));
    return;
  }
  const int64_t outputs = out.numel();
  if (red.back() && std::count(red.begin(), red.end(), true) == 1) {
    const int64_t cols = dims.back();
    const int threads = 256;
    const int group = cols <= 1024 ? 32 : threads;
    const int64_t per_block = threads / group;
    launch_kernel(reduce_rows_kernel<T>, blocks_for(outputs, static_cast<int>(per_block)), threads, 0, cu, x, y,
                  outputs, cols, op, group);
    ONYX_CUDA_CHECK_LAUNCH("Reduce (rows)");
    return;
  }
  StridedReduce s;
  s.outputs = outputs;
  s.count = count;
  int64_t stride = 1;
  std::vector<int64_t> st(dims.size());
  for (size_t i = dims.size(); i-- > 0;) {
    st[i] = stride;
    stride *= dims[i];
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    ONYX_CHECK(s.red_rank < kMaxRank && s.kept_rank < kMaxRank, "Reduce on CUDA: too many dimensions");
    if (red[i]) {
      s.red_dims[s.red_rank] = dims[i];
      s.red_strides[s.red_rank++] = st[i];
    } else {
      s.kept_dims[s.kept_rank] = dims[i];
      s.kept_strides[s.kept_rank++] = st[i];
    }
  }
  launch_kernel(reduce_strided_kernel<T>, blocks_for(outputs, 256), 256, 0, cu, x, y, s, op);
  ONYX_CUDA_CHECK_LAUNCH("Reduce (strided)");
}

// Whether the reduced axes of `in` are told by the output shape alone when keepdims=0: no
// two axes longer than 1 have the same length (reducing an axis of length 1 changes nothing).
bool axes_told_by_shape(const PartialShape& in) {
  if (!in.rank_known) return false;
  for (size_t i = 0; i < in.dims.size(); ++i) {
    if (in.dims[i] < 0) return false;
    for (size_t j = i + 1; j < in.dims.size(); ++j)
      if (in.dims[i] > 1 && in.dims[i] == in.dims[j]) return false;
  }
  return true;
}

// Which input axes are reduced. With axes as an input (their values are on the
// device) the shapes tell: keepdims=1, an axis of size != 1 that became 1; keepdims=0,
// the axes missing from the output when axes_told_by_shape (else the device-axes kernel runs).
std::vector<bool> reduced_axes(KernelContext& ctx, const std::string& name) {
  const Shape& in = ctx.input(0).shape();
  const Shape& out = ctx.output(0).shape();
  const int64_t rank = static_cast<int64_t>(in.rank());
  const bool keep = ctx.attr_int("keepdims", 1) != 0;
  std::vector<int64_t> axes;
  if (ctx.opset() >= axes_input_opset(name)) {
    if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
      std::vector<bool> r(rank, false);
      if (keep) {
        ONYX_CHECK(out.rank() == in.rank(), name, ": keepdims=1 but the output ", out.str(), " has another rank than ",
                   in.str());
        for (int64_t i = 0; i < rank; ++i) r[i] = in[i] != out[i];
        return r;
      }
      ONYX_ASSERT(axes_told_by_shape(PartialShape(in)), name, ": keepdims=0 over ", in.str(),
                  " takes the device-axes kernel");
      size_t j = 0;
      for (int64_t i = 0; i < rank; ++i) {
        if (j < out.rank() && in[i] == out[j]) ++j;
        else r[i] = true;
      }
      ONYX_CHECK(j == out.rank(), name, ": the output ", out.str(), " is not ", in.str(), " less some axes");
      return r;
    }
    if (ctx.attr_int("noop_with_empty_axes", 0) != 0) return std::vector<bool>(rank, false);
  } else {
    axes = ctx.attr_ints("axes");
  }
  std::vector<bool> r(rank, axes.empty());
  for (int64_t a : axes) r[norm_axis(a, rank)] = true;
  return r;
}

void add_reduce(CudaKernelRegistry& r, const std::string& name, int op) {
  auto run = [name, op](KernelContext& ctx, CudaContext& cu) {
    const DType dt = ctx.input(0).dtype();
    if (ctx.opset() >= axes_input_opset(name) && ctx.has_input(1) && ctx.input(1).numel() > 0 &&
        ctx.attr_int("keepdims", 1) == 0 && !axes_told_by_shape(PartialShape(ctx.input(0).shape()))) {
      if (dt == DType::kInt32) return launch_reduce_device_axes<int32_t>(ctx, cu, op);
      if (dt == DType::kInt64) return launch_reduce_device_axes<int64_t>(ctx, cu, op);
      return dispatch_float(dt, name.c_str(),
                            [&](auto tag) { launch_reduce_device_axes<typename decltype(tag)::type>(ctx, cu, op); });
    }
    const std::vector<bool> reduced = reduced_axes(ctx, name);
    if (dt == DType::kInt32) return launch_reduce<int32_t>(ctx, cu, reduced, op);
    if (dt == DType::kInt64) return launch_reduce<int64_t>(ctx, cu, reduced, op);
    dispatch_float(dt, name.c_str(),
                   [&](auto tag) { launch_reduce<typename decltype(tag)::type>(ctx, cu, reduced, op); });
  };
  auto supports = [name](const Node& node, const std::vector<ValueType>& inputs) -> std::string {
    const DType dt = inputs.empty() ? DType::kUndefined : inputs[0].dtype;
    if (!is_cuda_float(dt) && dt != DType::kInt32 && dt != DType::kInt64)
      return name + " on CUDA supports float32/float16/bfloat16/int32/int64";
    if (inputs[0].shape.rank_known && inputs[0].shape.dims.size() > static_cast<size_t>(kMaxRank))
      return name + " on CUDA supports rank <= 8";
    return "";
  };
  r.add(onnx_kernel(name, 1, run, supports));
}

}  // namespace

void register_reduce_kernels(CudaKernelRegistry& r) {
  add_reduce(r, "ReduceSum", kSum);
  add_reduce(r, "ReduceMean", kMean);
  add_reduce(r, "ReduceMax", kMax);
  add_reduce(r, "ReduceMin", kMin);
}

}  // namespace onyx::cuda
