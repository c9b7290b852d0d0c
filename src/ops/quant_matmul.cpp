// Quantized matrix products, accumulated in int32 as the specs define them: MatMulInteger,
// QLinearMatMul, and com.microsoft's MatMulIntegerToFloat and DynamicQuantizeMatMul (what
// onnxruntime's quantize_dynamic emits, and what its optimizer fuses MatMulInteger chains into).
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "cpu/gemm.h"
#include "cpu/int8_gemm.h"
#include "cpu/rowwise.h"
#include "ops/common.h"
#include "ops/gemm.h"
#include "ops/matmul_plan.h"
#include "ops/quantize.h"

namespace onyx {

namespace {

using Int8Types = TypeList<int8_t, uint8_t>;

void check_int8(DType d, const char* what) {
  ONYX_CHECK(d == DType::kInt8 || d == DType::kUInt8, what, " must be int8 or uint8, got ", dtype_name(d));
}

// Zero points of A (one per row) or B (one per column): a scalar or `count` values.
std::vector<int32_t> zero_points(const KernelContext& ctx, size_t i, DType data_dtype, int64_t count,
                                 const char* what) {
  std::vector<int32_t> z(static_cast<size_t>(count), 0);
  if (!ctx.has_input(i)) return z;
  const Tensor& t = ctx.input(i);
  ONYX_CHECK(t.dtype() == data_dtype, what, " has dtype ", dtype_name(t.dtype()), ", but its data has ",
             dtype_name(data_dtype));
  ONYX_CHECK(t.numel() == 1 || t.numel() == count, what, " must be a scalar or hold ", count,
             " values, got shape ", t.shape().str());
  for (int64_t j = 0; j < count; ++j) z[j] = static_cast<int32_t>(t.get_as_int64(t.numel() == 1 ? 0 : j));
  return z;
}

// Scales of A (per row) or B (per column), the same way.
std::vector<double> scales(const KernelContext& ctx, size_t i, int64_t count, const char* what) {
  const Tensor& t = ctx.input(i);
  std::vector<double> v = scale_values(t, what);
  ONYX_CHECK(t.numel() == 1 || t.numel() == count, what, " must be a scalar or hold ", count,
             " values, got shape ", t.shape().str());
  if (v.size() == 1) v.assign(static_cast<size_t>(count), v[0]);
  return v;
}

// out[t] = (A[t] - za) x (B[t] - zb), za per row and zb per column, summed in int32
// (wrapping, as the spec allows only there: products of 8-bit values never overflow).
template <class TA, class TB>
void matmul_int32(const TA* a, const TB* b, const MatmulPlan& p, const std::vector<int32_t>& za,
                  const std::vector<int32_t>& zb, int32_t* out) {
  std::vector<int32_t> bw(static_cast<size_t>(p.k * p.n));
  std::vector<uint32_t> acc(static_cast<size_t>(p.n));
  for (size_t t = 0; t < p.off_a.size(); ++t) {
    const TB* bt = b + p.off_b[t];
    for (int64_t q = 0; q < p.k; ++q)
      for (int64_t j = 0; j < p.n; ++j) bw[q * p.n + j] = static_cast<int32_t>(bt[q * p.n + j]) - zb[j];
    const TA* at = a + p.off_a[t];
    int32_t* ot = out + static_cast<int64_t>(t) * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(acc.begin(), acc.end(), 0u);
      for (int64_t q = 0; q < p.k; ++q) {
        const int32_t av = static_cast<int32_t>(at[i * p.k + q]) - za[i];
        if (av == 0) continue;
        const int32_t* brow = &bw[q * p.n];
        for (int64_t j = 0; j < p.n; ++j) acc[j] += static_cast<uint32_t>(av * brow[j]);
      }
      for (int64_t j = 0; j < p.n; ++j) ot[i * p.n + j] = static_cast<int32_t>(acc[j]);
    }
  }
}

// The same products by the float kernel of src/cpu, exact: K is cut into slices over which
// every partial sum of k * max|a - za| * max|b - zb| terms stays below 2^24, where float holds
// every integer; each slice's sums are integers, added in uint32 (wrapping as the reference loop
// does, so even sums past int32 agree).
template <class TA, class TB>
void matmul_float_slices(const TA* a, const TB* b, const MatmulPlan& p, const std::vector<int32_t>& za,
                         const std::vector<int32_t>& zb, int64_t term_bound, int32_t* out) {
  const int64_t slice = term_bound == 0 ? p.k : std::max<int64_t>(1, ((int64_t{1} << 24) - 1) / term_bound);
  std::vector<float> af(static_cast<size_t>(p.m * p.k)), bf(static_cast<size_t>(p.k * p.n)),
      cf(static_cast<size_t>(p.m * p.n));
  for (size_t t = 0; t < p.off_a.size(); ++t) {
    const TA* at = a + p.off_a[t];
    const TB* bt = b + p.off_b[t];
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t q = 0; q < p.k; ++q) af[i * p.k + q] = static_cast<float>(static_cast<int32_t>(at[i * p.k + q]) - za[i]);
    for (int64_t q = 0; q < p.k; ++q)
      for (int64_t j = 0; j < p.n; ++j) bf[q * p.n + j] = static_cast<float>(static_cast<int32_t>(bt[q * p.n + j]) - zb[j]);
    uint32_t* ot = reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(t) * p.m * p.n);
    std::fill_n(ot, p.m * p.n, 0u);
    for (int64_t k0 = 0; k0 < p.k; k0 += slice) {
      const int64_t kb = std::min(slice, p.k - k0);
      cpu::gemm(false, false, p.m, p.n, kb, af.data() + k0, p.k, bf.data() + k0 * p.n, p.n, cf.data(), p.n);
      for (int64_t i = 0; i < p.m * p.n; ++i) ot[i] += static_cast<uint32_t>(static_cast<int32_t>(cf[i]));
    }
  }
}

// The largest |x - z| any value x of the 8-bit type T gives with these zero points (383 at most).
template <class T>
int32_t largest_shifted(const std::vector<int32_t>& z) {
  int32_t m = 0;
  for (int32_t v : z)
    m = std::max({m, std::abs(int32_t{std::numeric_limits<T>::min()} - v), std::abs(int32_t{std::numeric_limits<T>::max()} - v)});
  return m;
}

}  // namespace

std::vector<int32_t> integer_products(const Tensor& a, const Tensor& b, const MatmulPlan& p,
                                      const std::vector<int32_t>& za, const std::vector<int32_t>& zb,
                                      int32_t* into, IntegerProducts how) {
  std::vector<int32_t> out(into ? 0 : p.off_a.size() * static_cast<size_t>(p.m * p.n));
  int32_t* dst = into ? into : out.data();
  dispatch<Int8Types>(a.dtype(), "A", [&](auto ta) {
    dispatch<Int8Types>(b.dtype(), "B", [&](auto tb) {
      using TA = typename decltype(ta)::type;
      using TB = typename decltype(tb)::type;
      const TA* pa = a.data<TA>();
      const TB* pb = b.data<TB>();
      // Large products go through the float kernel in exact slices of K; small ones stay in the loop.
      const int64_t term_bound = int64_t{largest_shifted<TA>(za)} * largest_shifted<TB>(zb);
      const bool large = p.m * p.n * p.k >= 32768;
      if (how == IntegerProducts::kAuto) {
        how = !large ? IntegerProducts::kReference
                     : cpu::has_int8_dot() ? IntegerProducts::kInt8Dot : IntegerProducts::kFloat;
      }
      if (how == IntegerProducts::kInt8Dot) {
        ONYX_CHECK(cpu::has_int8_dot(), "the 8-bit dot-product kernel needs AVX-512 VNNI, which this CPU lacks");
        constexpr bool a_signed = std::is_same_v<TA, int8_t>, b_signed = std::is_same_v<TB, int8_t>;
        for (size_t t = 0; t < p.off_a.size(); ++t)
          cpu::gemm_int8(p.m, p.n, p.k, {pa + p.off_a[t], a_signed, p.k, za.data()},
                         {pb + p.off_b[t], b_signed, p.n, zb.data()}, dst + static_cast<int64_t>(t) * p.m * p.n, p.n);
      } else if (how == IntegerProducts::kReference) {
        matmul_int32(pa, pb, p, za, zb, dst);
      } else {
        matmul_float_slices(pa, pb, p, za, zb, term_bound, dst);
      }
    });
  });
  return out;
}

namespace {

// ---- MatMulInteger ----

void infer_matmul_integer(InferContext& ctx) {
  check_int8(ctx.input_dtype(0), "A");
  check_int8(ctx.input_dtype(1), "B");
  infer_matmul_shape(ctx, DType::kInt32);
}

void matmul_integer_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  std::vector<int32_t> za = zero_points(ctx, 2, a.dtype(), p.m, "a_zero_point");
  std::vector<int32_t> zb = zero_points(ctx, 3, b.dtype(), p.n, "b_zero_point");
  integer_products(a, b, p, za, zb, ctx.output(0).data<int32_t>());
}

// ---- QLinearMatMul ----

enum QLinearInput { kA, kAScale, kAZero, kB, kBScale, kBZero, kYScale, kYZero };

void infer_qlinear_matmul(InferContext& ctx) {
  check_int8(ctx.input_dtype(kA), "a");
  check_int8(ctx.input_dtype(kB), "b");
  DType y = ctx.input_dtype(kYZero);
  check_int8(y, "y_zero_point");
  infer_matmul_shape(ctx, y, kA, kB);
}

// y = saturate(rint(acc * (a_scale * b_scale / y_scale)) + y_zero_point): the multiplier in
// the scales' type, its product with the int32 sum in double, as the ONNX reference does.
void qlinear_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(kA);
  const Tensor& b = ctx.input(kB);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  std::vector<int32_t> za = zero_points(ctx, kAZero, a.dtype(), p.m, "a_zero_point");
  std::vector<int32_t> zb = zero_points(ctx, kBZero, b.dtype(), p.n, "b_zero_point");
  std::vector<double> sa = scales(ctx, kAScale, p.m, "a_scale"), sb = scales(ctx, kBScale, p.n, "b_scale");
  std::vector<double> sy = scales(ctx, kYScale, 1, "y_scale");
  const DType st = ctx.input(kAScale).dtype();
  Tensor& y = ctx.output(0);
  std::vector<int32_t> zy = zero_points(ctx, kYZero, y.dtype(), 1, "y_zero_point");
  const QuantRange r = quant_range(y.dtype(), "QLinearMatMul");
  std::vector<int32_t> acc = integer_products(a, b, p, za, zb);
  // The requantization multiplier of each output element, per row only when a's scale is
  // per row (a per-tensor scale, the usual case, gives every row the same ones).
  const bool same_rows = std::all_of(sa.begin(), sa.end(), [&](double v) { return v == sa[0]; });
  const int64_t mult_rows = same_rows ? 1 : p.m;
  std::vector<double> mult(static_cast<size_t>(mult_rows * p.n));
  for (int64_t i = 0; i < mult_rows; ++i)
    for (int64_t j = 0; j < p.n; ++j)
      mult[i * p.n + j] = round_to_dtype(st, round_to_dtype(st, sa[i] * sb[j]) / sy[0]);
  // Per row: y = quantize_scaled(acc * mult, zy, r), vectorized.
  const bool is_signed = y.dtype() == DType::kInt8;
  auto* py = static_cast<uint8_t*>(y.raw());
  const int64_t rows = static_cast<int64_t>(acc.size()) / std::max<int64_t>(p.n, 1);
  for (int64_t row = 0; row < rows; ++row) {
    const double* m = mult.data() + (same_rows ? 0 : (row % p.m) * p.n);
    cpu::requantize_8bit(acc.data() + row * p.n, m, p.n, zy[0], static_cast<double>(r.lo), static_cast<double>(r.hi),
                         is_signed, py + row * p.n);
  }
}

// ---- com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul ----

// y = acc * (a_scale * b_scale) + bias, in float as onnxruntime computes it; a's scale
// and zero point are per tensor, b's per tensor or per column.
void scale_to_float(KernelContext& ctx, const std::vector<int32_t>& acc, const MatmulPlan& p, float a_scale,
                    size_t b_scale_input, size_t bias_input) {
  std::vector<double> sb = scales(ctx, b_scale_input, p.n, "b_scale");
  std::vector<float> mult(static_cast<size_t>(p.n)), bias(static_cast<size_t>(p.n), 0.f);
  for (int64_t j = 0; j < p.n; ++j) mult[j] = a_scale * static_cast<float>(sb[j]);
  const bool has_bias = ctx.has_input(bias_input);
  if (has_bias) {
    const Tensor& t = ctx.input(bias_input);
    ONYX_CHECK(t.numel() == p.n, "bias must hold B's last dimension (", p.n, ") values, got shape ", t.shape().str());
    for (int64_t j = 0; j < p.n; ++j) bias[j] = static_cast<float>(t.get_as_double(j));
  }
  Tensor& y = ctx.output(0);
  dispatch<FloatTypes>(y.dtype(), "Y", [&](auto yt) {
    using Y = typename decltype(yt)::type;
    Y* py = y.data<Y>();
    for (size_t o = 0; o < acc.size(); ++o) {
      const int64_t j = static_cast<int64_t>(o) % p.n;
      float v = static_cast<float>(acc[o]) * mult[j];
      if (has_bias) v += bias[j];
      py[o] = static_cast<Y>(v);
    }
  });
}

float scalar_scale(const KernelContext& ctx, size_t i, const char* what) {
  const Tensor& t = ctx.input(i);
  ONYX_CHECK(t.numel() == 1, what, " must be a scalar (per-tensor), got shape ", t.shape().str());
  return static_cast<float>(scale_values(t, what)[0]);
}

enum ToFloatInput { kTfA, kTfB, kTfAScale, kTfBScale, kTfAZero, kTfBZero, kTfBias };

void infer_matmul_integer_to_float(InferContext& ctx) {
  check_int8(ctx.input_dtype(kTfA), "A");
  check_int8(ctx.input_dtype(kTfB), "B");
  DType out = ctx.input_dtype(kTfAScale);
  ONYX_CHECK(dtype_is_float(out), "a_scale must be a floating type, got ", dtype_name(out));
  infer_matmul_shape(ctx, out);
}

void matmul_integer_to_float_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(kTfA);
  const Tensor& b = ctx.input(kTfB);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  std::vector<int32_t> za = zero_points(ctx, kTfAZero, a.dtype(), 1, "a_zero_point");
  za.assign(static_cast<size_t>(p.m), za[0]);
  std::vector<int32_t> zb = zero_points(ctx, kTfBZero, b.dtype(), p.n, "b_zero_point");
  std::vector<int32_t> acc = integer_products(a, b, p, za, zb);
  scale_to_float(ctx, acc, p, scalar_scale(ctx, kTfAScale, "a_scale"), kTfBScale, kTfBias);
}

enum DynamicInput { kDqA, kDqB, kDqBScale, kDqBZero, kDqBias };

void infer_dynamic_quantize_matmul(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(kDqA) == DType::kFloat32, "A must be float32, got ", dtype_name(ctx.input_dtype(kDqA)));
  check_int8(ctx.input_dtype(kDqB), "B");
  infer_matmul_shape(ctx, DType::kFloat32);
}

// A is quantized to uint8 per tensor as DynamicQuantizeLinear does, then multiplied as above.
void dynamic_quantize_matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(kDqA);
  const Tensor& b = ctx.input(kDqB);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  const DynamicQuantParams q = dynamic_quant_params(a.data<float>(), a.numel());
  Tensor aq(DType::kUInt8, a.shape());
  dynamic_quantize(a.data<float>(), a.numel(), q, aq.data<uint8_t>());
  std::vector<int32_t> za(static_cast<size_t>(p.m), q.zero_point);
  std::vector<int32_t> zb = zero_points(ctx, kDqBZero, b.dtype(), p.n, "b_zero_point");
  std::vector<int32_t> acc = integer_products(aq, b, p, za, zb);
  scale_to_float(ctx, acc, p, q.scale, kDqBScale, kDqBias);
}

}  // namespace

void register_quant_matmul_ops(OpRegistry& r) {
  r.add(onnx_op("MatMulInteger", 10, infer_matmul_integer, matmul_integer_kernel));
  for (int since : {10, 21}) r.add(onnx_op("QLinearMatMul", since, infer_qlinear_matmul, qlinear_matmul_kernel));
  r.add(domain_op("com.microsoft", "MatMulIntegerToFloat", 1, infer_matmul_integer_to_float,
                  matmul_integer_to_float_kernel));
  r.add(domain_op("com.microsoft", "DynamicQuantizeMatMul", 1, infer_dynamic_quantize_matmul,
                  dynamic_quantize_matmul_kernel));
}

}  // namespace onyx
