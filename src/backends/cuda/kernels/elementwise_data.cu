// Elementwise data kernels: Where (3-way broadcast), Expand, ConstantOfShape, Range.
// Where, Expand and ConstantOfShape only move elements, so they are instantiated per
// element size (1, 2, 4, 8 bytes) rather than per type, and take any such type.
#include <cstring>

#include "backends/cuda/kernels/elementwise_common.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {

namespace {

// Unsigned integer of `Bytes` bytes: the carrier for any element of that size.
template <size_t Bytes>
struct Carrier;
template <>
struct Carrier<1> {
  using type = uint8_t;
};
template <>
struct Carrier<2> {
  using type = uint16_t;
};
template <>
struct Carrier<4> {
  using type = uint32_t;
};
template <>
struct Carrier<8> {
  using type = uint64_t;
};

// Calls fn(carrier-typed tag) for the element size of `dt`; false when none fits.
template <class Fn>
bool dispatch_size(DType dt, Fn&& fn) {
  if (dt == DType::kString) return false;
  switch (dtype_size(dt)) {
    case 1: fn(Carrier<1>::type{}); return true;
    case 2: fn(Carrier<2>::type{}); return true;
    case 4: fn(Carrier<4>::type{}); return true;
    case 8: fn(Carrier<8>::type{}); return true;
    default: return false;
  }
}

bool size_dispatchable(DType dt) {
  return dt != DType::kString && dt != DType::kUndefined &&
         (dtype_size(dt) == 1 || dtype_size(dt) == 2 || dtype_size(dt) == 4 || dtype_size(dt) == 8);
}

// ---- Where ------------------------------------------------------------------------

enum : unsigned { kCondScalar = 1, kXScalar = 2, kYScalar = 4 };

// Every input has the output's element count or is one element.
template <class T>
__global__ void __launch_bounds__(kThreads)
    where_flat_kernel(const bool* __restrict__ c, const T* __restrict__ x, const T* __restrict__ y,
                      T* __restrict__ out, int64_t n, unsigned scalars, bool vec) {
  ONYX_KERNEL_PROLOGUE();
  constexpr int N = vec_width<T>();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const bool c_s = scalars & kCondScalar, x_s = scalars & kXScalar, y_s = scalars & kYScalar;
  const bool sc = c_s ? c[0] : false;
  const T sx = x_s ? x[0] : T(0);
  const T sy = y_s ? y[0] : T(0);
  int64_t start = 0;
  if (vec) {
    const int64_t nv = n / N;
    const auto* vc = reinterpret_cast<const Vec<bool, N>*>(c);
    const auto* vx = reinterpret_cast<const Vec<T, N>*>(x);
    const auto* vy = reinterpret_cast<const Vec<T, N>*>(y);
    auto* vo = reinterpret_cast<Vec<T, N>*>(out);
    for (int64_t v = tid; v < nv; v += stride) {
      Vec<bool, N> cc;
      Vec<T, N> xx, yy, r;
      if (c_s) {
#pragma unroll
        for (int j = 0; j < N; ++j) cc.v[j] = sc;
      } else {
        cc = vc[v];
      }
      if (x_s) {
#pragma unroll
        for (int j = 0; j < N; ++j) xx.v[j] = sx;
      } else {
        xx = vx[v];
      }
      if (y_s) {
#pragma unroll
        for (int j = 0; j < N; ++j) yy.v[j] = sy;
      } else {
        yy = vy[v];
      }
#pragma unroll
      for (int j = 0; j < N; ++j) r.v[j] = cc.v[j] ? xx.v[j] : yy.v[j];
      vo[v] = r;
    }
    start = nv * N;
  }
  for (int64_t i = start + tid; i < n; i += stride)
    out[i] = (c_s ? sc : c[i]) ? (x_s ? sx : x[i]) : (y_s ? sy : y[i]);
}

template <class I, class T>
__device__ __forceinline__ void where_broadcast_body(const bool* __restrict__ c, const T* __restrict__ x,
                                                     const T* __restrict__ y, T* __restrict__ out, I n,
                                                     const Broadcast<3>& g) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    I off[3];
    broadcast_offsets<I, 3>(g, i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    where_broadcast_kernel(const bool* __restrict__ c, const T* __restrict__ x, const T* __restrict__ y,
                           T* __restrict__ out, int64_t n, Broadcast<3> g) {
  ONYX_KERNEL_PROLOGUE();
  if (fits_index32(n)) where_broadcast_body<uint32_t>(c, x, y, out, static_cast<uint32_t>(n), g);
  else where_broadcast_body<int64_t>(c, x, y, out, n, g);
}

template <class T>
void run_where(const Tensor& tc, const Tensor& tx, const Tensor& ty, Tensor& to, CudaContext& cu) {
  const int64_t n = to.numel();
  if (n == 0) return;
  const auto* c = static_cast<const bool*>(tc.raw());
  const auto* x = static_cast<const T*>(tx.raw());
  const auto* y = static_cast<const T*>(ty.raw());
  auto* o = static_cast<T*>(to.raw());
  const int64_t nc = tc.numel(), nx = tx.numel(), ny = ty.numel();
  auto flat = [n](int64_t m) { return m == n || m == 1; };
  if (flat(nc) && flat(nx) && flat(ny)) {
    constexpr int N = vec_width<T>();
    const unsigned scalars = (nc != n ? kCondScalar : 0u) | (nx != n ? kXScalar : 0u) | (ny != n ? kYScalar : 0u);
    const bool vec = n >= N && ((scalars & kCondScalar) || is_aligned(c, N)) &&
                     ((scalars & kXScalar) || is_aligned(x, N * sizeof(T))) &&
                     ((scalars & kYScalar) || is_aligned(y, N * sizeof(T))) && is_aligned(o, N * sizeof(T));
    launch_kernel(where_flat_kernel<T>, resident_blocks_for(vec ? n / N : n, cu.device), kThreads, 0, cu, c, x, y, o, n,
                  scalars, vec);
    ONYX_CUDA_CHECK_LAUNCH("Where");
    return;
  }
  const Broadcast<3> g = make_broadcast<3>(to.shape(), {&tc.shape(), &tx.shape(), &ty.shape()});
  launch_kernel(where_broadcast_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu, c, x, y, o, n, g);
  ONYX_CUDA_CHECK_LAUNCH("Where");
}

// ---- Expand -------------------------------------------------------------------

template <class I, class T>
__device__ __forceinline__ void expand_body(const T* __restrict__ in, T* __restrict__ out, I n,
                                            const Broadcast<1>& g) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    I off[1];
    broadcast_offsets<I, 1>(g, i, off);
    out[i] = in[off[0]];
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    expand_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, Broadcast<1> g) {
  ONYX_KERNEL_PROLOGUE();
  if (fits_index32(n)) expand_body<uint32_t>(in, out, static_cast<uint32_t>(n), g);
  else expand_body<int64_t>(in, out, n, g);
}

void run_expand(const Tensor& in, Tensor& out, CudaContext& cu) {
  const int64_t n = out.numel();
  if (n == 0) return;
  ONYX_CHECK(in.dtype() == out.dtype(), "Expand: output type differs from the input's");
  if (in.numel() == n) return copy_async(in, out, cu);  // same elements in the same order
  // A last dimension that is not broadcast moves in 16-byte units when its bytes are whole units
  // (the KV heads of grouped-query attention, repeated for each query head: 128-byte rows):
  // one index computation and one load and store per 16 bytes, not per element.
  const size_t es = dtype_size(in.dtype());
  const auto& od = out.shape().dims();
  const auto& id = in.shape().dims();
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!id.empty() && !od.empty() && id.back() == od.back() && (od.back() * es) % 16 == 0 && aligned(in.raw()) &&
      aligned(out.raw())) {
    std::vector<int64_t> o(od.begin(), od.end()), i(id.begin(), id.end());
    o.back() = o.back() * static_cast<int64_t>(es) / 16;
    i.back() = o.back();
    const Shape os(o), is(i);
    const int64_t units = n * static_cast<int64_t>(es) / 16;
    const Broadcast<1> g = make_broadcast<1>(os, {&is});
    launch_kernel(expand_kernel<uint4>, resident_blocks_for(units, cu.device), kThreads, 0, cu,
                  static_cast<const uint4*>(in.raw()), static_cast<uint4*>(out.raw()), units, g);
    ONYX_CUDA_CHECK_LAUNCH("Expand");
    return;
  }
  const Broadcast<1> g = make_broadcast<1>(out.shape(), {&in.shape()});
  const bool ok = dispatch_size(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(expand_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu, static_cast<const T*>(in.raw()),
                                                                         static_cast<T*>(out.raw()), n, g);
    ONYX_CUDA_CHECK_LAUNCH("Expand");
  });
  ONYX_CHECK(ok, "Expand on CUDA: element type ", dtype_name(in.dtype()), " is not supported");
}

// ---- ConstantOfShape ------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) fill_kernel(T* __restrict__ out, int64_t n, T v) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = v;
}

// The fill value is the node's attribute (a host tensor): its bits travel by value.
void run_constant_of_shape(KernelContext& ctx, CudaContext& cu) {
  Tensor& out = ctx.output(0);
  const Tensor* value = ctx.attr_tensor("value");
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool ok = dispatch_size(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v{};
    if (value) {
      ONYX_CHECK(value->numel() == 1 && value->dtype() == out.dtype(), "ConstantOfShape: the value ",
                 value->type_str(), " does not fill ", out.type_str());
      std::memcpy(&v, value->raw(), sizeof v);
    }
    launch_kernel(fill_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu, static_cast<T*>(out.raw()), n, v);
    ONYX_CUDA_CHECK_LAUNCH("ConstantOfShape");
  });
  ONYX_CHECK(ok, "ConstantOfShape on CUDA: element type ", dtype_name(out.dtype()), " is not supported");
}

// ---- Range --------------------------------------------------------------------

// out[i] = start + i * delta, with start and delta read on the device (the
// element count came from shape inference on the host). Floats compute in
// double and round once, as the CPU reference; integers wrap.
template <class T>
__global__ void __launch_bounds__(kThreads)
    range_kernel(const T* __restrict__ start, const T* __restrict__ delta, T* __restrict__ out, int64_t n) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (std::is_floating_point_v<T>) {
    const double s = static_cast<double>(*start), d = static_cast<double>(*delta);
    for (int64_t i = tid; i < n; i += stride) out[i] = static_cast<T>(s + static_cast<double>(i) * d);
  } else {
    const uint64_t s = static_cast<uint64_t>(static_cast<int64_t>(*start));
    const uint64_t d = static_cast<uint64_t>(static_cast<int64_t>(*delta));
    for (int64_t i = tid; i < n; i += stride)
      out[i] = static_cast<T>(static_cast<int64_t>(s + static_cast<uint64_t>(i) * d));
  }
}

template <class T>
void run_range(KernelContext& ctx, CudaContext& cu) {
  Tensor& out = ctx.output(0);
  const int64_t n = out.numel();
  if (n == 0) return;
  for (size_t i = 0; i < 3; ++i)
    ONYX_CHECK(ctx.input(i).numel() == 1 && ctx.input(i).dtype() == out.dtype(), "Range: input ", i,
               " must be a scalar of the output's type, got ", ctx.input(i).type_str());
  launch_kernel(range_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu,
                static_cast<const T*>(ctx.input(0).raw()), static_cast<const T*>(ctx.input(2).raw()),
                static_cast<T*>(out.raw()), n);
  ONYX_CUDA_CHECK_LAUNCH("Range");
}

}  // namespace

void register_where_expand_range_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("ConstantOfShape", 9, run_constant_of_shape,
                    [](const Node& node, const std::vector<ValueType>&) -> std::string {
                      const Attribute* a = node.find_attribute("value");
                      return !a || size_dispatchable(a->t.dtype()) ? ""
                                                                   : "ConstantOfShape on CUDA fills fixed-size types";
                    }));
  r.add(onnx_kernel("Where", 9,
      [](KernelContext& ctx, CudaContext& cu) {
        const Tensor &c = ctx.input(0), &x = ctx.input(1), &y = ctx.input(2);
        ONYX_CHECK(c.dtype() == DType::kBool && x.dtype() == y.dtype(), "Where on CUDA: condition ", c.type_str(),
                   ", X ", x.type_str(), ", Y ", y.type_str());
        const bool ok =
            dispatch_size(x.dtype(), [&](auto tag) { run_where<decltype(tag)>(c, x, y, ctx.output(0), cu); });
        ONYX_CHECK(ok, "Where on CUDA: element type ", dtype_name(x.dtype()), " is not supported");
      },
      [](const Node&, const std::vector<ValueType>& in) -> std::string {
        if (input_dtype(in, 0) != DType::kBool) return "Where on CUDA needs a bool condition";
        const DType x = input_dtype(in, 1);
        if (!size_dispatchable(x) || input_dtype(in, 2) != x)
          return "Where on CUDA supports X and Y of one numeric or bool type";
        return rank_reason(in, "Where");
      }));

  r.add(onnx_kernel(
      "Expand", 8, [](KernelContext& ctx, CudaContext& cu) { run_expand(ctx.input(0), ctx.output(0), cu); },
      [](const Node&, const std::vector<ValueType>& in) -> std::string {
        if (!size_dispatchable(input_dtype(in, 0))) return "Expand on CUDA supports numeric and bool tensors";
        if (!in.empty() && in[0].shape.rank_known && in[0].shape.dims.size() > static_cast<size_t>(kMaxRank))
          return cat("Expand on CUDA supports tensors of rank at most ", kMaxRank);
        return "";
      }));

  r.add(onnx_kernel("Range", 11,
      [](KernelContext& ctx, CudaContext& cu) {
        switch (ctx.output(0).dtype()) {
          case DType::kFloat32: return run_range<float>(ctx, cu);
          case DType::kInt32: return run_range<int32_t>(ctx, cu);
          case DType::kInt64: return run_range<int64_t>(ctx, cu);
          default: break;
        }
        throw Error(cat("Range on CUDA: element type ", dtype_name(ctx.output(0).dtype()), " is not supported"));
      },
      [](const Node&, const std::vector<ValueType>& in) -> std::string {
        const DType t = input_dtype(in, 0);
        if (t != DType::kFloat32 && t != DType::kInt32 && t != DType::kInt64)
          return "Range on CUDA supports int32/int64/float32";
        return "";
      }));
}

}  // namespace onyx::cuda
