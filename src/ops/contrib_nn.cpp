// com.microsoft ops that onnxruntime's transformer optimizer (and Optimum's --optimize levels)
// fuse exported graphs into: QuickGelu, BiasAdd, BiasSplitGelu and FusedMatMul (Gelu, BiasGelu
// and FastGelu are in unary.cpp). Elementwise math in double, rounded once to the output type.
#include <cmath>
#include <cstring>

#include "ops/common.h"
#include "cpu/gemm.h"
#include "ops/gemm.h"
#include "ops/matmul_plan.h"

namespace onyx {

namespace {

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x * M_SQRT1_2)); }

// An optional bias of the last axis's length: what it adds at flat index i.
struct LastAxisBias {
  const Tensor* t = nullptr;
  int64_t n = 1;
  double at(int64_t i) const { return t ? t->get_as_double(i % n) : 0.0; }
};

LastAxisBias last_axis_bias(const KernelContext& ctx, size_t input, const Tensor& x) {
  LastAxisBias b;
  if (!ctx.has_input(input)) return b;
  b.t = &ctx.input(input);
  b.n = x.rank() ? x.shape().dims().back() : 1;
  ONYX_CHECK(b.t->dtype() == x.dtype(), "bias is ", dtype_name(b.t->dtype()), ", the input ", dtype_name(x.dtype()));
  ONYX_CHECK(b.t->rank() == 1 && b.t->shape()[0] == b.n, "bias must be [", b.n, "] (the input's last axis), got ",
             b.t->shape().str());
  return b;
}

// y[i] = fn(i) for each element of y (x gives the type).
template <class Fn>
void map_float(const Tensor& x, Tensor& y, Fn&& fn) {
  dispatch<FloatTypes>(x.dtype(), "input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    T* py = y.data<T>();
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = static_cast<T>(static_cast<C>(fn(i)));
  });
}

void infer_float_same(InferContext& ctx) {
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "input must be a floating type, got ", dtype_name(ctx.input_dtype(0)));
  infer_same_as_input(ctx);
}

void quick_gelu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const double alpha = ctx.attr_float("alpha", 1.702f);
  map_float(x, ctx.output(0), [&](int64_t i) {
    const double v = x.get_as_double(i);
    return v / (1 + std::exp(-alpha * v));
  });
}

// BiasAdd(X [N, S, C], bias [C], skip [N, S, C]) = X + bias + skip.
void infer_bias_add(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(x.rank() == 3, "X must be [N, S, C], got ", x.str());
  ONYX_CHECK(ctx.input_concrete_shape(1) == Shape({x[2]}), "bias must be [", x[2], "], got ",
             ctx.input_concrete_shape(1).str());
  ONYX_CHECK(ctx.input_concrete_shape(2) == x, "skip must be ", x.str(), ", got ", ctx.input_concrete_shape(2).str());
  check_same_dtypes(ctx);
  infer_float_same(ctx);
}

void bias_add(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const LastAxisBias b = last_axis_bias(ctx, 1, x);
  const Tensor& skip = ctx.input(2);
  map_float(x, ctx.output(0), [&](int64_t i) { return x.get_as_double(i) + b.at(i) + skip.get_as_double(i); });
}

// BiasSplitGelu(X [N, S, D], bias [D]) = left * Gelu(right), the halves of X + bias: [N, S, D / 2].
void infer_bias_split_gelu(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(x.rank() == 3 && x[2] % 2 == 0, "X must be [N, S, D] with D even, got ", x.str());
  ONYX_CHECK(ctx.input_concrete_shape(1) == Shape({x[2]}), "bias must be [", x[2], "], got ",
             ctx.input_concrete_shape(1).str());
  check_same_dtypes(ctx);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "X must be a floating type");
  ctx.set_output(0, ctx.input_dtype(0), Shape{x[0], x[1], x[2] / 2});
}

void bias_split_gelu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& bias = ctx.input(1);
  const int64_t d = x.shape()[2], h = d / 2;
  map_float(x, ctx.output(0), [&](int64_t o) {
    const int64_t row = o / h, j = o % h;
    const double left = x.get_as_double(row * d + j) + bias.get_as_double(j);
    const double right = x.get_as_double(row * d + h + j) + bias.get_as_double(h + j);
    return left * gelu_erf(right);
  });
}

// ---- FusedMatMul: alpha * op(A) x op(B), numpy batch rules. op = optional transpose of the
//      last two axes (transA/B); transBatchA/B (what onnxruntime's optimizer folds a Transpose
//      into) first move the leading axis behind the batch axes: [d0, d1, .., dn-1] is read as
//      [d1, .., dn-2, d0, dn-1], or with transA/B too, as [d1, .., dn-2, dn-1, d0] ----

// The permutation of `rank` axes that an operand's attributes apply (identity: none).
std::vector<int64_t> operand_perm(size_t rank, bool trans, bool trans_batch) {
  std::vector<int64_t> p(rank);
  for (size_t i = 0; i < rank; ++i) p[i] = static_cast<int64_t>(i);
  if (trans_batch) {
    ONYX_CHECK(rank >= 3, "transBatch needs an operand of rank >= 3, got rank ", rank);
    for (size_t i = 0; i + 2 < rank; ++i) p[i] = static_cast<int64_t>(i + 1);
    p[rank - 2] = 0;
    p[rank - 1] = static_cast<int64_t>(rank - 1);
  }
  if (trans) {
    ONYX_CHECK(rank >= 2, "a transposed operand needs rank >= 2, got rank ", rank);
    std::swap(p[rank - 1], p[rank - 2]);
  }
  return p;
}

Shape logical(const Shape& s, bool trans, bool trans_batch = false) {
  const auto p = operand_perm(s.rank(), trans, trans_batch);
  std::vector<int64_t> d(s.rank());
  for (size_t i = 0; i < d.size(); ++i) d[i] = s[static_cast<size_t>(p[i])];
  return Shape(d);
}

// t with its axes permuted (out axis i is t's axis perm[i]), as a new tensor.
Tensor permuted(const Tensor& t, const std::vector<int64_t>& perm, Allocator& alloc) {
  const size_t r = t.rank();
  std::vector<int64_t> in_stride(r), dims(r);
  int64_t acc = 1;
  for (size_t i = r; i-- > 0;) in_stride[i] = acc, acc *= t.shape()[i];
  for (size_t i = 0; i < r; ++i) dims[i] = t.shape()[static_cast<size_t>(perm[i])];
  Tensor out(t.dtype(), Shape(dims), alloc);
  const size_t es = dtype_size(t.dtype());
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  std::vector<int64_t> idx(r, 0);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t from = 0;
    for (size_t i = 0; i < r; ++i) from += idx[i] * in_stride[static_cast<size_t>(perm[i])];
    std::memcpy(dst + o * es, src + from * es, es);
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

void infer_fused_matmul(InferContext& ctx) {
  check_same_dtypes(ctx);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "FusedMatMul takes floating types, got ",
             dtype_name(ctx.input_dtype(0)));
  const Shape a = logical(ctx.input_concrete_shape(0), ctx.attr_int("transA", 0) != 0, ctx.attr_int("transBatchA", 0) != 0);
  const Shape b = logical(ctx.input_concrete_shape(1), ctx.attr_int("transB", 0) != 0, ctx.attr_int("transBatchB", 0) != 0);
  std::vector<ValueType> types{ValueType{ctx.input_dtype(0), a}, ValueType{ctx.input_dtype(1), b}};
  InferContext inner(ctx.node(), types, {nullptr, nullptr});
  infer_matmul_shape(inner, ctx.input_dtype(0));
  ctx.set_output(0, inner.outputs()[0].dtype, inner.outputs()[0].shape);
}

void fused_matmul(KernelContext& ctx) {
  // An operand with transBatch is copied into its logical layout first; then its trans is done.
  bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const bool tba = ctx.attr_int("transBatchA", 0) != 0, tbb = ctx.attr_int("transBatchB", 0) != 0;
  const Tensor A = tba ? permuted(ctx.input(0), operand_perm(ctx.input(0).rank(), ta, true), ctx.allocator()) : ctx.input(0);
  const Tensor B = tbb ? permuted(ctx.input(1), operand_perm(ctx.input(1).rank(), tb, true), ctx.allocator()) : ctx.input(1);
  ta &= !tba;
  tb &= !tbb;
  Tensor& Y = ctx.output(0);
  const MatmulPlan p = plan_matmul(logical(A.shape(), ta), logical(B.shape(), tb));
  const float alpha = ctx.attr_float("alpha", 1.f);
  const int64_t lda = ta ? p.m : p.k, ldb = tb ? p.k : p.n;
  dispatch<FloatTypes>(A.dtype(), "FusedMatMul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = A.data<T>();
    const T* b = B.data<T>();
    T* y = Y.data<T>();
    for (size_t t = 0; t < p.off_a.size(); ++t) {
      T* out = y + static_cast<int64_t>(t) * p.m * p.n;
      if constexpr (std::is_same_v<T, float>) {
        // onyx's kernels: a one-row product by B^T (a decode step's attention scores) reads
        // B's rows in place; alpha scales the (smaller) result.
        cpu::gemm(ta, tb, p.m, p.n, p.k, a + p.off_a[t], lda, b + p.off_b[t], ldb, out, p.n);
        if (alpha != 1.f)
          for (int64_t i = 0; i < p.m * p.n; ++i) out[i] *= alpha;
      } else if constexpr (std::is_same_v<T, double>)
        cpu::gemm_blas(ta, tb, p.m, p.n, p.k, T(alpha), a + p.off_a[t], lda, b + p.off_b[t], ldb, T(0), out, p.n);
      else
        cpu::gemm_reference<T, float>(ta, tb, p.m, p.n, p.k, alpha, a + p.off_a[t], lda, b + p.off_b[t], ldb, 0.f,
                                      out, p.n);
    }
  });
}

}  // namespace

void register_contrib_nn_ops(OpRegistry& r) {
  const std::string ms = "com.microsoft";
  r.add(domain_op(ms, "QuickGelu", 1, infer_float_same, quick_gelu));
  r.add(domain_op(ms, "BiasAdd", 1, infer_bias_add, bias_add));
  r.add(domain_op(ms, "BiasSplitGelu", 1, infer_bias_split_gelu, bias_split_gelu));
  r.add(domain_op(ms, "FusedMatMul", 1, infer_fused_matmul, fused_matmul));
}

}  // namespace onyx
