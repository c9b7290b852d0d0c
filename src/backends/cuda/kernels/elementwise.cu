// Elementwise kernels: binary ops with numpy broadcasting (Add Sub Mul Div Pow,
// Max Min Sum of two inputs, comparisons, And Or Xor). The family's other
// files: elementwise_unary.cu (unary math, activations, Clip, Not, Cast) and
// elementwise_data.cu (Where, Expand, Range).
//
// One kernel template per (input, output) element type, with the op chosen by
// a runtime code that is uniform over the grid: the kernels are bound by
// memory, so the switch costs nothing measurable and keeps the number of
// instantiations (and nvcc time) small.
#include <cmath>

#include "backends/cuda/kernels/elementwise_common.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"

namespace onyx::cuda {

namespace {

enum BinCode : int {
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,     // arithmetic: output has the inputs' type
  kEq, kLt, kGt, kLe, kGe,                      // comparisons: bool output
  kAnd, kOr, kXor,                              // bool logic
};

bool is_compare(int code) { return code >= kEq && code <= kGe; }
bool is_logic(int code) { return code >= kAnd; }

// R op(A, B) for one code. Floats compute in float (as the CPU reference does
// for the 16-bit floats); integers wrap on overflow.
template <class A, class B, class R>
struct BinaryOp {
  int code;

  __device__ __forceinline__ R operator()(A a, B b) const {
    if constexpr (std::is_same_v<A, bool>) {
      const int x = a, y = b;
      switch (code) {
        case kAnd: return x & y;
        case kOr: return x | y;
        case kXor: return x != y;
        case kEq: return x == y;
        case kLt: return x < y;
        case kGt: return x > y;
        case kLe: return x <= y;
        default: return x >= y;
      }
    } else if constexpr (std::is_same_v<R, bool>) {
      const auto x = to_compute(a);
      const auto y = to_compute(b);
      switch (code) {
        case kEq: return x == y;
        case kLt: return x < y;
        case kGt: return x > y;
        case kLe: return x <= y;
        default: return x >= y;
      }
    } else if constexpr (is_int_dev_v<A>) {
      switch (code) {
        case kSub: return wrap_sub(a, b);
        case kMul: return wrap_mul(a, b);
        // The CPU reference throws on division by zero; a kernel cannot, so it gives 0.
        case kDiv: return b == 0 ? A(0) : (b == A(-1) ? wrap_neg(a) : static_cast<A>(a / b));
        case kMax: return a > b ? a : b;
        case kMin: return a < b ? a : b;
        default: return wrap_add(a, b);  // kAdd (and Sum)
      }
    } else {
      const float x = to_compute(a);
      const float y = static_cast<float>(to_compute(b));
      float r;
      switch (code) {
        case kSub: r = x - y; break;
        case kMul: r = x * y; break;
        case kDiv: r = x / y; break;
        case kPow: r = powf(x, y); break;
        // NaN propagates from either side, as numpy.maximum / minimum.
        case kMax: r = (isnan(x) || x > y) ? x : y; break;
        case kMin: r = (isnan(x) || x < y) ? x : y; break;
        default: r = x + y; break;
      }
      return from_compute<R>(r);
    }
  }
};

// Both inputs either have the output's element count (hence its flat layout)
// or are one element, read once per thread.
template <class A, class B, class R>
__global__ void __launch_bounds__(kThreads)
    binary_flat_kernel(const A* __restrict__ a, const B* __restrict__ b, R* __restrict__ out, int64_t n,
                       bool a_scalar, bool b_scalar, bool vec, BinaryOp<A, B, R> op) {
  ONYX_KERNEL_PROLOGUE();
  constexpr int N = vec_width<A, B, R>();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const A sa = a_scalar ? a[0] : A();
  const B sb = b_scalar ? b[0] : B();
  int64_t start = 0;
  if (vec) {
    const int64_t nv = n / N;
    const auto* va = reinterpret_cast<const Vec<A, N>*>(a);
    const auto* vb = reinterpret_cast<const Vec<B, N>*>(b);
    auto* vo = reinterpret_cast<Vec<R, N>*>(out);
    for (int64_t v = tid; v < nv; v += stride) {
      Vec<A, N> xa;
      Vec<B, N> xb;
      if (a_scalar) {
#pragma unroll
        for (int j = 0; j < N; ++j) xa.v[j] = sa;
      } else {
        xa = va[v];
      }
      if (b_scalar) {
#pragma unroll
        for (int j = 0; j < N; ++j) xb.v[j] = sb;
      } else {
        xb = vb[v];
      }
      Vec<R, N> y;
#pragma unroll
      for (int j = 0; j < N; ++j) y.v[j] = op(xa.v[j], xb.v[j]);
      vo[v] = y;
    }
    start = nv * N;
  }
  for (int64_t i = start + tid; i < n; i += stride) out[i] = op(a_scalar ? sa : a[i], b_scalar ? sb : b[i]);
}

template <class I, class A, class B, class R>
__device__ __forceinline__ void binary_broadcast_body(const A* __restrict__ a, const B* __restrict__ b,
                                                      R* __restrict__ out, I n, const Broadcast<2>& g,
                                                      const BinaryOp<A, B, R>& op) {
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    I off[2];
    broadcast_offsets<I, 2>(g, i, off);
    out[i] = op(a[off[0]], b[off[1]]);
  }
}

template <class A, class B, class R>
__global__ void __launch_bounds__(kThreads)
    binary_broadcast_kernel(const A* __restrict__ a, const B* __restrict__ b, R* __restrict__ out, int64_t n,
                            Broadcast<2> g, BinaryOp<A, B, R> op) {
  ONYX_KERNEL_PROLOGUE();
  if (fits_index32(n)) binary_broadcast_body<uint32_t>(a, b, out, static_cast<uint32_t>(n), g, op);
  else binary_broadcast_body<int64_t>(a, b, out, n, g, op);
}

template <class A, class B, class R>
void run_binary(const Tensor& ta, const Tensor& tb, Tensor& out, int code, CudaContext& cu, const char* what) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const auto* a = static_cast<const A*>(ta.raw());
  const auto* b = static_cast<const B*>(tb.raw());
  auto* o = static_cast<R*>(out.raw());
  const BinaryOp<A, B, R> op{code};
  const int64_t na = ta.numel(), nb = tb.numel();
  if ((na == n || na == 1) && (nb == n || nb == 1)) {
    constexpr int N = vec_width<A, B, R>();
    const bool a_scalar = na != n, b_scalar = nb != n;
    const bool vec = N > 1 && n >= N && (a_scalar || is_aligned(a, N * sizeof(A))) &&
                     (b_scalar || is_aligned(b, N * sizeof(B))) && is_aligned(o, N * sizeof(R));
    const int64_t items = vec ? n / N : n;
    launch_kernel(binary_flat_kernel<A, B, R>, resident_blocks_for(items, cu.device), kThreads, 0, cu, a, b, o, n,
                  a_scalar, b_scalar, vec, op);
    ONYX_CUDA_CHECK_LAUNCH(what);
    return;
  }
  const Broadcast<2> g = make_broadcast<2>(out.shape(), {&ta.shape(), &tb.shape()});
  launch_kernel(binary_broadcast_kernel<A, B, R>, resident_blocks_for(n, cu.device), kThreads, 0, cu, a, b, o, n, g,
                op);
  ONYX_CUDA_CHECK_LAUNCH(what);
}

// Same-type arithmetic (T, T -> T) or comparison (T, T -> bool).
template <class T>
void run_same_type(const Tensor& a, const Tensor& b, Tensor& out, int code, CudaContext& cu, const char* what) {
  if (is_compare(code)) run_binary<T, T, bool>(a, b, out, code, cu, what);
  else run_binary<T, T, T>(a, b, out, code, cu, what);
}

void launch_binary(const Tensor& a, const Tensor& b, Tensor& out, int code, CudaContext& cu, const char* what) {
  if (is_logic(code)) {
    ONYX_CHECK(a.dtype() == DType::kBool && b.dtype() == DType::kBool, what, " on CUDA needs bool inputs");
    run_binary<bool, bool, bool>(a, b, out, code, cu, what);
    return;
  }
  if (code == kPow && b.dtype() != a.dtype()) {
    ONYX_CHECK(b.dtype() == DType::kFloat32, "Pow on CUDA: exponent must be float32 or the base's type");
    switch (a.dtype()) {
      case DType::kFloat16: return run_binary<__half, float, __half>(a, b, out, code, cu, what);
      case DType::kBFloat16: return run_binary<__nv_bfloat16, float, __nv_bfloat16>(a, b, out, code, cu, what);
      default: break;
    }
    throw Error(cat("Pow on CUDA: base of type ", dtype_name(a.dtype()), " with a float32 exponent"));
  }
  ONYX_CHECK(a.dtype() == b.dtype(), what, " on CUDA: inputs of types ", dtype_name(a.dtype()), " and ",
             dtype_name(b.dtype()));
  const bool integer = a.dtype() == DType::kInt32 || a.dtype() == DType::kInt64;
  ONYX_CHECK(!(integer && code == kPow), "Pow on CUDA supports float32/float16/bfloat16 bases");
  switch (a.dtype()) {
    case DType::kFloat32: return run_same_type<float>(a, b, out, code, cu, what);
    case DType::kFloat16: return run_same_type<__half>(a, b, out, code, cu, what);
    case DType::kBFloat16: return run_same_type<__nv_bfloat16>(a, b, out, code, cu, what);
    case DType::kInt32: return run_same_type<int32_t>(a, b, out, code, cu, what);
    case DType::kInt64: return run_same_type<int64_t>(a, b, out, code, cu, what);
    case DType::kBool:
      if (is_compare(code)) return run_binary<bool, bool, bool>(a, b, out, code, cu, what);
      break;
    default: break;
  }
  throw Error(cat(what, " on CUDA: element type ", dtype_name(a.dtype()), " is not supported"));
}

// ---- registration -------------------------------------------------------------

constexpr std::initializer_list<DType> kArithTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                                      DType::kInt32, DType::kInt64};
constexpr std::initializer_list<DType> kFloatTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

void add_binary(CudaKernelRegistry& r, const char* name, int code) {
  r.add(onnx_kernel(name, 1,
      [name, code](KernelContext& ctx, CudaContext& cu) {
        launch_binary(ctx.input(0), ctx.input(1), ctx.output(0), code, cu, name);
      },
      [name, code](const Node&, const std::vector<ValueType>& in) -> std::string {
        const DType a = input_dtype(in, 0), b = input_dtype(in, 1);
        if (is_logic(code)) {
          if (a != DType::kBool || b != DType::kBool) return cat(name, " on CUDA supports bool inputs");
        } else if (code == kPow) {
          if (!dtype_in(a, kFloatTypes) || !(b == a || b == DType::kFloat32))
            return "Pow on CUDA supports float32/float16/bfloat16 bases with an exponent of the same type or float32";
        } else if (is_compare(code)) {
          if (!dtype_in(a, kArithTypes) && a != DType::kBool)
            return cat(name, " on CUDA supports float32/float16/bfloat16/int32/int64/bool inputs");
          if (b != a) return cat(name, " on CUDA needs inputs of one type");
        } else {
          if (!dtype_in(a, kArithTypes)) return cat(name, " on CUDA supports float32/float16/bfloat16/int32/int64");
          if (b != a) return cat(name, " on CUDA needs inputs of one type");
          // A kernel cannot raise the CPU's "integer division by zero" error: keep integer Div there.
          if (code == kDiv && !dtype_in(a, kFloatTypes))
            return "integer Div runs on the CPU, which reports division by zero";
        }
        return rank_reason(in, name);
      }));
}

// Max, Min, Sum of one or two inputs (one input: a copy).
void add_variadic(CudaKernelRegistry& r, const char* name, int code) {
  r.add(onnx_kernel(name, 1,
      [name, code](KernelContext& ctx, CudaContext& cu) {
        std::vector<const Tensor*> present;
        for (size_t i = 0; i < ctx.num_inputs(); ++i)
          if (ctx.has_input(i)) present.push_back(&ctx.input(i));
        ONYX_CHECK(present.size() == 1 || present.size() == 2, name, " on CUDA takes one or two inputs, got ",
                   present.size());
        if (present.size() == 1) {
          ONYX_CHECK(present[0]->numel() == ctx.output(0).numel(), name, ": output size differs from the input's");
          copy_async(*present[0], ctx.output(0), cu);
        } else {
          launch_binary(*present[0], *present[1], ctx.output(0), code, cu, name);
        }
      },
      [name](const Node& node, const std::vector<ValueType>& in) -> std::string {
        size_t count = 0;
        for (size_t i = 0; i < node.inputs.size(); ++i)
          if (node.inputs[i] >= 0) {
            ++count;
            if (!dtype_in(input_dtype(in, i), kArithTypes))
              return cat(name, " on CUDA supports float32/float16/bfloat16/int32/int64");
          }
        if (count < 1 || count > 2) return cat(name, " on CUDA takes one or two inputs");
        return rank_reason(in, name);
      }));
}

}  // namespace

void register_binary_kernels(CudaKernelRegistry& r) {
  add_binary(r, "Add", kAdd);
  add_binary(r, "Sub", kSub);
  add_binary(r, "Mul", kMul);
  add_binary(r, "Div", kDiv);
  add_binary(r, "Pow", kPow);
  add_binary(r, "Equal", kEq);
  add_binary(r, "Less", kLt);
  add_binary(r, "Greater", kGt);
  add_binary(r, "LessOrEqual", kLe);
  add_binary(r, "GreaterOrEqual", kGe);
  add_binary(r, "And", kAnd);
  add_binary(r, "Or", kOr);
  add_binary(r, "Xor", kXor);
  add_variadic(r, "Max", kMax);
  add_variadic(r, "Min", kMin);
  add_variadic(r, "Sum", kAdd);
}

}  // namespace onyx::cuda
