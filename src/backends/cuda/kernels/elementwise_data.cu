// Elementwise data kernels: Where (3-way broadcast), Expand, Tile, ConstantOfShape, Range, Trilu, and
// the running sum CumSum (which reads its axis on the device: any line length, one launch).
// Where, Expand, Tile and ConstantOfShape only move elements, so they are instantiated per
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

// ---- Tile: out[i] = in[i mod in's dims], coordinate by coordinate ----------------

struct TileDims {
  int rank = 0;
  int64_t out[kMaxRank] = {}, in[kMaxRank] = {};
};

template <class T>
__global__ void __launch_bounds__(kThreads)
    tile_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, TileDims t) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = e, off = 0, stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      off += (rem % t.out[d]) % t.in[d] * stride;
      rem /= t.out[d];
      stride *= t.in[d];
    }
    out[e] = in[off];
  }
}

void run_tile(const Tensor& in, Tensor& out, CudaContext& cu) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto& id = in.shape().dims();
  const auto& od = out.shape().dims();
  ONYX_CHECK(in.dtype() == out.dtype() && id.size() == od.size() && id.size() <= static_cast<size_t>(kMaxRank),
             "Tile on CUDA: input ", in.type_str(), ", output ", out.type_str());
  TileDims t;
  t.rank = static_cast<int>(id.size());
  for (size_t d = 0; d < id.size(); ++d) {
    ONYX_CHECK(id[d] > 0 && od[d] % id[d] == 0, "Tile: output ", out.shape().str(), " is not a tiling of ",
               in.shape().str());
    t.in[d] = id[d];
    t.out[d] = od[d];
  }
  const bool ok = dispatch_size(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_kernel(tile_kernel<T>, resident_blocks_for(n, cu.device), kThreads, 0, cu, static_cast<const T*>(in.raw()),
                  static_cast<T*>(out.raw()), n, t);
    ONYX_CUDA_CHECK_LAUNCH("Tile");
  });
  ONYX_CHECK(ok, "Tile on CUDA: element type ", dtype_name(in.dtype()), " is not supported");
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

// ---- Trilu: the upper (or lower) triangle of the last two axes, k diagonals off ----

template <class U>
__global__ void trilu_kernel(const U* __restrict__ x, U* __restrict__ y, int64_t rows, int64_t cols, int64_t total,
                             const void* k, int k64, int upper) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t kk = k ? load_index(k, k64 != 0, 0) : 0;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % cols, i = (e / cols) % rows;
    const bool keep = upper ? j - i >= kk : j - i <= kk;
    y[e] = keep ? x[e] : U{};
  }
}

void run_trilu(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  ONYX_CHECK(x.rank() >= 2, "Trilu needs an input of rank >= 2, got ", x.shape().str());
  const void* k = nullptr;
  int k64 = 1;
  if (ctx.has_input(1)) {
    const Tensor& kt = ctx.input(1);
    ONYX_CHECK(kt.numel() == 1 && (kt.dtype() == DType::kInt64 || kt.dtype() == DType::kInt32),
               "Trilu: k must be an int64 scalar, got ", kt.type_str());
    k = kt.raw();
    k64 = kt.dtype() == DType::kInt64;
  }
  const int64_t total = y.numel();
  if (total == 0) return;
  const int64_t rows = x.shape()[x.rank() - 2], cols = x.shape()[x.rank() - 1];
  const bool ok = dispatch_size(x.dtype(), [&](auto tag) {
    using U = decltype(tag);
    launch_kernel(trilu_kernel<U>, resident_blocks_for(total, cu.device), kThreads, 0, cu,
                  static_cast<const U*>(x.raw()), static_cast<U*>(y.raw()), rows, cols, total, k, k64,
                  ctx.attr_int("upper", 1) != 0 ? 1 : 0);
  });
  ONYX_CHECK(ok, "Trilu on CUDA: element type ", dtype_name(x.dtype()), " is not supported");
  ONYX_CUDA_CHECK_LAUNCH("Trilu");
}

// ---- CumSum: one thread per line along the axis, which the kernel reads from the device ----

struct CumArgs {
  int rank;
  int64_t dims[kMaxRank];
  int64_t total;
  const void* axis;
  int axis64, exclusive, reverse;
  unsigned int* err;
};

template <class T, class A>
__global__ void cumsum_kernel(const T* __restrict__ x, T* __restrict__ y, CumArgs a) {
  ONYX_KERNEL_PROLOGUE();
  int64_t ax = load_index(a.axis, a.axis64 != 0, 0);
  if (ax < 0) ax += a.rank;
  if (ax < 0 || ax >= a.rank) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(a.err, kDeviceErrorIndexInput);
    return;
  }
  const int64_t n = a.dims[ax];
  int64_t inner = 1;
  for (int i = static_cast<int>(ax) + 1; i < a.rank; ++i) inner *= a.dims[i];
  const int64_t lines = n == 0 ? 0 : a.total / n;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < lines;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    A acc = 0;
    for (int64_t s = 0; s < n; ++s) {
      const int64_t at = base + (a.reverse ? n - 1 - s : s) * inner;
      const A v = static_cast<A>(to_compute(x[at]));
      if (a.exclusive) y[at] = from_compute<T>(static_cast<dev_compute_t<T>>(acc));
      acc += v;
      if (!a.exclusive) y[at] = from_compute<T>(static_cast<dev_compute_t<T>>(acc));
    }
  }
}

void run_cumsum(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& axis = ctx.input(1);
  ONYX_CHECK(axis.numel() == 1 && (axis.dtype() == DType::kInt64 || axis.dtype() == DType::kInt32),
             "CumSum: axis must be an int32/int64 scalar, got ", axis.type_str());
  ONYX_CHECK(x.rank() >= 1 && x.rank() <= static_cast<size_t>(kMaxRank), "CumSum on CUDA takes ranks 1..", kMaxRank,
             ", got ", x.shape().str());
  CumArgs a{};
  a.rank = static_cast<int>(x.rank());
  for (size_t i = 0; i < x.rank(); ++i) a.dims[i] = x.shape()[i];
  a.total = x.numel();
  a.axis = axis.raw();
  a.axis64 = axis.dtype() == DType::kInt64;
  a.exclusive = ctx.attr_int("exclusive", 0) != 0;
  a.reverse = ctx.attr_int("reverse", 0) != 0;
  a.err = cu.error_word;
  if (a.total == 0) return;
  // Lines are at most total (one when the axis is the only one); the kernel stops at its count.
  const unsigned blocks = resident_blocks_for(a.total, cu.device);
  auto go = [&](auto t, auto acc) {
    using T = decltype(t);
    using A = decltype(acc);
    launch_kernel(cumsum_kernel<T, A>, blocks, kThreads, 0, cu, static_cast<const T*>(x.raw()),
                  static_cast<T*>(ctx.output(0).raw()), a);
  };
  switch (x.dtype()) {
    case DType::kFloat32: go(float{}, float{}); break;
    case DType::kFloat16: go(__half{}, float{}); break;
    case DType::kBFloat16: go(__nv_bfloat16{}, float{}); break;
    case DType::kInt32: go(int32_t{}, int64_t{}); break;
    case DType::kInt64: go(int64_t{}, int64_t{}); break;
    default: throw Error(cat("CumSum on CUDA does not support ", dtype_name(x.dtype())));
  }
  ONYX_CUDA_CHECK_LAUNCH("CumSum");
}

}  // namespace

void register_where_expand_range_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("Trilu", 14, run_trilu, [](const Node&, const std::vector<ValueType>& in) -> std::string {
    return size_dispatchable(input_dtype(in, 0)) ? "" : "Trilu on CUDA moves fixed-size types";
  }));
  r.add(onnx_kernel("CumSum", 11, run_cumsum, [](const Node&, const std::vector<ValueType>& in) -> std::string {
    const DType d = input_dtype(in, 0);
    if (d != DType::kFloat32 && d != DType::kFloat16 && d != DType::kBFloat16 && d != DType::kInt32 &&
        d != DType::kInt64)
      return "CumSum on CUDA takes float32/float16/bfloat16/int32/int64";
    return rank_reason(in, "CumSum");
  }));
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

  r.add(onnx_kernel(
      "Tile", 6, [](KernelContext& ctx, CudaContext& cu) { run_tile(ctx.input(0), ctx.output(0), cu); },
      [](const Node&, const std::vector<ValueType>& in) -> std::string {
        if (!size_dispatchable(input_dtype(in, 0))) return "Tile on CUDA supports numeric and bool tensors";
        if (!in.empty() && in[0].shape.rank_known && in[0].shape.dims.size() > static_cast<size_t>(kMaxRank))
          return cat("Tile on CUDA supports tensors of rank at most ", kMaxRank);
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
