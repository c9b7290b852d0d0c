// com.microsoft MatMulNBits: Y = A x dequantize(B)^T, B an [N, K] weight quantized in blocks
// of block_size along K (format in ops/block_quant.h). The weights that onnxruntime-genai's
// builder and Optimum's quantizers emit for int4 (and int8, int2) models.
//
// B is uint8 [N, k_blocks, block_size * bits / 8] (the last block padded past K), scales
// [N, k_blocks] (or flat), zero_points absent (2^(bits-1)), packed uint8 [N, ceil(k_blocks *
// bits / 8)] or unpacked of A's type [N, k_blocks]; bias [N]. accuracy_level only lets
// onnxruntime compute in lower precision: this kernel computes at full accuracy whatever it
// says (products of the dequantized weights in float32, summed per block in float32 and across
// blocks in double). A B with a zero dimension is an omitted projection: Y is the bias (or zeros).
//
// Up to kFusedRows rows of A (decode) each block of B is unpacked once into a small buffer and
// dotted with every row; more rows, B is dequantized whole into float32 and multiplied by BLAS.
//
// onyx::LinearNBits(A, B, scales, zero_points?; K, N, bits, block_size, accuracy_level, splits,
// gated) -> y_0, ..., y_{s-1}: the same product (no g_idx, no bias) with its N columns cut into
// the outputs by `splits` (as onyx::Linear's), or with gated = 1 one output of N / 2 columns,
// act(Y[:, :N/2]) * Y[:, N/2:] rounded once, act SiLU or the `activation` attribute's GELU (as
// onyx::SiluGateLinear's): what group_nbits
// (passes/fuse_linear.h) makes of the 4-bit products that read one input, so that a layer's
// Q, K and V (or gate and up) are one stream of weights and one launch with no Split after it.
//
// onyx::RmsNormLinearNBits(x, skip?, gamma, B, scales, zero_points?; epsilon and LinearNBits'
// attributes) -> (sum?, y...): onyx::RmsNormLinear's norm (ops/linear_ops.cpp: h = x + skip,
// normalized and scaled by gamma, rounded to x's type; sum = h) before LinearNBits' product.
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/tensor_util.h"
#include "ops/block_quant.h"
#include "ops/common.h"
#include "ops/gate_activation.h"
#include "ops/gemm.h"
#include "ops/rms_rows.h"

namespace onyx {

namespace {

enum Input : size_t { kA, kB, kScales, kZeroPoints, kGIdx, kBias };

constexpr int64_t kFusedRows = 8;

// sum a[i] * b[i] in float32, eight partial sums (so the compiler can vectorize it).
inline float dot8(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  float t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

struct NBits {
  int64_t K = 0, N = 0, block_size = 0, bits = 0, k_blocks = 0, blob = 0;
};

NBits nbits_attrs(const NodeView& n) {
  NBits p;
  ONYX_CHECK(n.has_attr("K") && n.has_attr("N") && n.has_attr("block_size"),
             "MatMulNBits needs the K, N and block_size attributes");
  p.K = n.attr_int("K");
  p.N = n.attr_int("N");
  ONYX_CHECK(p.K > 0 && p.N > 0, "K and N must be positive, got K=", p.K, " N=", p.N);
  p.block_size = n.attr_int("block_size");
  check_quant_block_size(p.block_size);
  p.bits = n.attr_int("bits", 4);
  check_quant_bits(p.bits);
  const int64_t level = n.attr_int("accuracy_level", 0);
  ONYX_CHECK(level >= 0 && level <= 4, "accuracy_level must be 0..4, got ", level);
  const int64_t prepacked = n.attr_int("weight_prepacked", 0);
  ONYX_CHECK(prepacked == 0, "weight_prepacked=", prepacked,
             ": B in a device-specific prepacked layout is not supported by onyx");
  p.k_blocks = (p.K + p.block_size - 1) / p.block_size;
  p.blob = p.block_size * p.bits / 8;
  return p;
}

// B with one or more dimensions 0 (the others as expected): an omitted projection.
bool is_omitted(const Shape& b, const NBits& p) {
  if (b.rank() != 3 || b.numel() != 0) return false;
  const int64_t want[3] = {p.N, p.k_blocks, p.blob};
  for (size_t i = 0; i < 3; ++i)
    if (b[i] != 0 && b[i] != want[i]) return false;
  return true;
}

// Checks every input against the attributes; throws naming the input.
void check_inputs(const NBits& p, DType a_dtype, const std::vector<const Shape*>& in, const std::vector<DType>& dt) {
  auto has = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  ONYX_CHECK(dtype_is_float(a_dtype), "input 'A' must be a float tensor, got ", dtype_name(a_dtype));
  const Shape& a = *in[kA];
  ONYX_CHECK(a.rank() >= 1 && a[a.rank() - 1] == p.K, "input 'A' must end in K = ", p.K, ", got ", a.str());
  ONYX_CHECK(dt[kB] == DType::kUInt8, "input 'B' must be uint8, got ", dtype_name(dt[kB]));
  const Shape& b = *in[kB];
  if (is_omitted(b, p)) return;
  ONYX_CHECK(b == Shape({p.N, p.k_blocks, p.blob}), "input 'B' must be [N, k_blocks, block_size * bits / 8] = [", p.N,
             ", ", p.k_blocks, ", ", p.blob, "], got ", b.str());
  ONYX_CHECK(dt[kScales] == a_dtype, "input 'scales' must have A's dtype ", dtype_name(a_dtype), ", got ",
             dtype_name(dt[kScales]));
  const Shape& s = *in[kScales];
  ONYX_CHECK(s.numel() == p.N * p.k_blocks && (s.rank() == 1 || s == Shape({p.N, p.k_blocks})),
             "input 'scales' must be [N, k_blocks] = [", p.N, ", ", p.k_blocks, "] (or flat), got ", s.str());
  if (has(kZeroPoints)) {
    const Shape& z = *in[kZeroPoints];
    if (dt[kZeroPoints] == DType::kUInt8) {
      const int64_t per_row = packed_bytes(p.k_blocks, p.bits);
      ONYX_CHECK(z.numel() == p.N * per_row && (z.rank() == 1 || z == Shape({p.N, per_row})),
                 "packed uint8 input 'zero_points' must be [N, ceil(k_blocks * bits / 8)] = [", p.N, ", ", per_row,
                 "], got ", z.str());
    } else {
      ONYX_CHECK(dt[kZeroPoints] == a_dtype, "input 'zero_points' must be uint8 (packed) or A's dtype ",
                 dtype_name(a_dtype), ", got ", dtype_name(dt[kZeroPoints]));
      ONYX_CHECK(z.numel() == p.N * p.k_blocks && (z.rank() == 1 || z == Shape({p.N, p.k_blocks})),
                 "input 'zero_points' of A's type must be [N, k_blocks] = [", p.N, ", ", p.k_blocks, "], got ",
                 z.str());
    }
  }
  if (has(kGIdx)) {
    ONYX_CHECK(dt[kGIdx] == DType::kInt32, "input 'g_idx' must be int32, got ", dtype_name(dt[kGIdx]));
    ONYX_CHECK(in[kGIdx]->numel() == p.K, "input 'g_idx' must hold K = ", p.K, " values, got shape ", in[kGIdx]->str());
  }
  if (has(kBias)) {
    ONYX_CHECK(dt[kBias] == a_dtype, "input 'bias' must have A's dtype ", dtype_name(a_dtype), ", got ",
               dtype_name(dt[kBias]));
    ONYX_CHECK(in[kBias]->numel() == p.N && in[kBias]->rank() == 1, "input 'bias' must be [N] = [", p.N, "], got ",
               in[kBias]->str());
  }
}

void infer_matmul_nbits(InferContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  const DType t = ctx.input_dtype(kA);
  ONYX_CHECK(ctx.num_inputs() >= 3 && ctx.has_input(kB) && ctx.has_input(kScales),
             "MatMulNBits needs the inputs A, B and scales");
  const PartialShape& a = ctx.input_shape(kA);
  const PresentInputs present = present_inputs(ctx);
  if (present.known) check_inputs(p, t, present.shape_ptrs, present.dtypes);
  if (!a.rank_known) {
    ctx.set_output(0, t, PartialShape());
    return;
  }
  ONYX_CHECK(!a.dims.empty(), "input 'A' must have rank >= 1");
  PartialShape y = a;
  y.dims.back() = p.N;
  ctx.set_output(0, t, y);
}

// Y = A dequant(B)^T + bias as doubles [M, N] (bias: input kBias when `with_bias`). B, the
// scales and the zero points are the node's inputs from `first_b` on (RmsNormLinearNBits has
// them after x, skip and gamma; g_idx and bias only where first_b is kB); A is input 0, or
// `a_data` (of input 0's shape) where given.
template <class T>
std::vector<double> nbits_product(KernelContext& ctx, const NBits& p, bool with_bias, size_t first_b = kB,
                                  const T* a_data = nullptr) {
  auto at = [&](size_t i) -> size_t { return i == kA ? size_t{0} : i <= kZeroPoints ? first_b + (i - kB) : i; };
  const size_t ib = at(kB), is = at(kScales), iz = at(kZeroPoints);
  std::vector<const Shape*> in(kBias + 1, nullptr);
  std::vector<DType> dt(kBias + 1, DType::kUndefined);
  for (size_t i = 0; i <= kBias; ++i) {
    if (i >= kGIdx && first_b != kB) break;
    if (at(i) < ctx.num_inputs() && ctx.has_input(at(i))) {
      in[i] = &ctx.input(at(i)).shape();
      dt[i] = ctx.input(at(i)).dtype();
    }
  }
  const Tensor& a = ctx.input(kA);
  check_inputs(p, a.dtype(), in, dt);
  const int64_t K = p.K, N = p.N, M = a.numel() / K;
  std::vector<double> y(static_cast<size_t>(M * N));
  std::vector<double> bias(static_cast<size_t>(N), 0.0);
  if (with_bias && first_b == kB && ctx.has_input(kBias))
    for (int64_t n = 0; n < N; ++n) bias[n] = ctx.input(kBias).get_as_double(n);
  if (is_omitted(ctx.input(ib).shape(), p)) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias[n];
    return y;
  }
  // g_idx (deprecated) maps each k to its block; only the identity map k / block_size is supported.
  if (first_b == kB && ctx.has_input(kGIdx)) {
    const int32_t* g = ctx.input(kGIdx).data<int32_t>();
    for (int64_t k = 0; k < K; ++k)
      ONYX_CHECK(g[k] == k / p.block_size, "input 'g_idx': g_idx[", k, "] = ", g[k],
                 " reorders the blocks, which onyx does not support (only g_idx[k] = k / block_size)");
  }

  std::vector<float> av(static_cast<size_t>(M * K));
  const T* pa = a_data ? a_data : a.data<T>();
  for (int64_t i = 0; i < M * K; ++i) av[i] = static_cast<float>(static_cast<compute_t<T>>(pa[i]));
  const uint8_t* pb = ctx.input(ib).data<uint8_t>();
  const Tensor& scales = ctx.input(is);
  std::vector<float> sc(static_cast<size_t>(N * p.k_blocks));
  const T* ps = scales.data<T>();  // A's dtype (checked)
  for (size_t i = 0; i < sc.size(); ++i) sc[i] = static_cast<float>(static_cast<compute_t<T>>(ps[i]));
  const Tensor* zp = iz < ctx.num_inputs() && ctx.has_input(iz) ? &ctx.input(iz) : nullptr;
  const bool zp_packed = zp && zp->dtype() == DType::kUInt8;
  const int64_t zp_row = packed_bytes(p.k_blocks, p.bits);
  auto zero_of = [&](int64_t n, int64_t blk) -> float {
    if (zp_packed) return static_cast<float>(packed_value(zp->data<uint8_t>() + n * zp_row, blk, p.bits));
    if (zp) return static_cast<float>(zp->get_as_double(n * p.k_blocks + blk));
    return static_cast<float>(default_zero_point(p.bits));
  };
  // Block blk of row n of B, dequantized into w (block_size values; those past K are not used).
  auto unpack = [&](int64_t n, int64_t blk, float* w) {
    const float scale = sc[n * p.k_blocks + blk], zero = zero_of(n, blk);
    const uint8_t* blob = pb + (n * p.k_blocks + blk) * p.blob;
    if (p.bits == 4) {
      for (int64_t i = 0; i < p.blob; ++i) {
        w[2 * i] = (static_cast<float>(blob[i] & 15) - zero) * scale;
        w[2 * i + 1] = (static_cast<float>(blob[i] >> 4) - zero) * scale;
      }
    } else {
      for (int64_t i = 0; i < p.block_size; ++i) w[i] = (static_cast<float>(packed_value(blob, i, p.bits)) - zero) * scale;
    }
  };

  if (M <= kFusedRows) {
    std::vector<float> w(static_cast<size_t>(p.block_size));
    double acc[kFusedRows];
    for (int64_t n = 0; n < N; ++n) {
      std::fill(acc, acc + M, 0.0);
      for (int64_t blk = 0; blk < p.k_blocks; ++blk) {
        unpack(n, blk, w.data());
        const int64_t k0 = blk * p.block_size, len = std::min(K, k0 + p.block_size) - k0;
        for (int64_t m = 0; m < M; ++m) acc[m] += dot8(&av[m * K + k0], w.data(), len);
      }
      for (int64_t m = 0; m < M; ++m) y[m * N + n] = acc[m] + bias[n];
    }
    return y;
  }
  // B whole, as float32 [N, K], then Y = A B^T by BLAS.
  std::vector<float> wb(static_cast<size_t>(N * K)), w(static_cast<size_t>(p.block_size)), yf(static_cast<size_t>(M * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t blk = 0; blk < p.k_blocks; ++blk) {
      unpack(n, blk, w.data());
      const int64_t k0 = blk * p.block_size, len = std::min(K, k0 + p.block_size) - k0;
      std::copy(w.begin(), w.begin() + len, wb.begin() + n * K + k0);
    }
  cpu::gemm_blas(false, true, M, N, K, 1.f, av.data(), K, wb.data(), K, 0.f, yf.data(), N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) y[m * N + n] = static_cast<double>(yf[m * N + n]) + bias[n];
  return y;
}

template <class T>
T rounded(double v) {
  return static_cast<T>(static_cast<compute_t<T>>(v));
}

template <class T>
void matmul_nbits_kernel(KernelContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  const std::vector<double> y = nbits_product<T>(ctx, p, true);
  T* out = ctx.output(0).data<T>();
  for (size_t i = 0; i < y.size(); ++i) out[i] = rounded<T>(y[i]);
}

// LinearNBits' outputs: the splits (default [N]), or gated.
std::vector<int64_t> nbits_splits(const NodeView& v, const NBits& p) {
  if (v.attr_int("gated", 0) != 0) {
    ONYX_CHECK(v.attr_int("gated", 0) == 1, "gated must be 0 or 1, got ", v.attr_int("gated", 0));
    ONYX_CHECK(!v.has_attr("splits"), "a gated LinearNBits has one output: splits do not apply");
    ONYX_CHECK(p.N % 2 == 0, "a gated LinearNBits needs an even N (gate rows, then up rows), got N = ", p.N);
    gate_activation_of(v.attr_string("activation", "silu"));  // a name it knows, or an error naming it
    return {p.N / 2};
  }
  std::vector<int64_t> s = v.attr_ints("splits", {});
  if (s.empty()) return {p.N};
  for (int64_t x : s) ONYX_CHECK(x > 0, "splits must be positive, got ", x);
  const int64_t total = std::accumulate(s.begin(), s.end(), int64_t{0});
  ONYX_CHECK(total == p.N, "splits add up to ", total, ", not N = ", p.N);
  return s;
}

void infer_linear_nbits(InferContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  ONYX_CHECK(ctx.num_inputs() >= 3 && ctx.num_inputs() <= 4 && ctx.has_input(kB) && ctx.has_input(kScales),
             "LinearNBits takes A, B, scales and optionally zero_points");
  const std::vector<int64_t> s = nbits_splits(ctx, p);
  ONYX_CHECK(s.size() == ctx.num_outputs(), s.size(), " outputs by splits, the node has ", ctx.num_outputs());
  const DType t = ctx.input_dtype(kA);
  const PartialShape& a = ctx.input_shape(kA);
  const PresentInputs present = present_inputs(ctx);
  if (present.known) check_inputs(p, t, present.shape_ptrs, present.dtypes);
  for (size_t i = 0; i < s.size(); ++i) {
    PartialShape y = a;
    if (a.rank_known) {
      ONYX_CHECK(!a.dims.empty(), "input 'A' must have rank >= 1");
      y.dims.back() = s[i];
    }
    ctx.set_output(i, t, y);
  }
}

// The outputs of LinearNBits (from output `first` on) from Y: cut by splits, or gated.
template <class T>
void write_nbits_outputs(KernelContext& ctx, const NBits& p, const std::vector<double>& y, size_t first_output) {
  const std::vector<int64_t> s = nbits_splits(ctx, p);
  const int64_t M = static_cast<int64_t>(y.size()) / p.N;
  if (ctx.attr_int("gated", 0) == 1) {
    const int64_t f = p.N / 2;
    const GateActivation act = gate_activation_of(ctx.attr_string("activation", "silu"));
    T* out = ctx.output(first_output).data<T>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < f; ++j) {
        const double g = y[m * p.N + j];
        out[m * f + j] = rounded<T>(gate_activation(g, act) * y[m * p.N + f + j]);
      }
    return;
  }
  int64_t first = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    T* out = ctx.output(first_output + i).data<T>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < s[i]; ++j) out[m * s[i] + j] = rounded<T>(y[m * p.N + first + j]);
    first += s[i];
  }
}

template <class T>
void linear_nbits_kernel(KernelContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  write_nbits_outputs<T>(ctx, p, nbits_product<T>(ctx, p, false), 0);
}

// RmsNormLinearNBits: x, skip?, gamma, B, scales, zero_points?
void infer_rms_norm_linear_nbits(InferContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  ONYX_CHECK(ctx.num_inputs() >= 5 && ctx.num_inputs() <= 6 && ctx.has_input(2) && ctx.has_input(3) &&
                 ctx.has_input(4),
             "RmsNormLinearNBits takes x, skip (optional), gamma, B, scales and zero_points (optional)");
  const DType t = ctx.input_dtype(0);
  const PartialShape& x = ctx.input_shape(0);
  ONYX_CHECK(!x.rank_known || (!x.dims.empty() && (x.dims.back() < 0 || x.dims.back() == p.K)), "x ", x.str(),
             " must end in K = ", p.K);
  ONYX_CHECK(ctx.input_dtype(2) == t, "gamma must have x's dtype ", dtype_name(t));
  const PartialShape& g = ctx.input_shape(2);
  ONYX_CHECK(!g.fully_known() || (g.dims.size() == 1 && g.dims[0] == p.K), "gamma must be [", p.K, "], got ", g.str());
  if (ctx.has_input(1)) {
    ONYX_CHECK(ctx.input_dtype(1) == t, "skip must have x's dtype ", dtype_name(t));
    if (ctx.input_shape(1).fully_known() && x.fully_known())
      ONYX_CHECK(ctx.input_shape(1).dims == x.dims, "skip ", ctx.input_shape(1).str(), " must have x's shape ", x.str());
  }
  const std::vector<int64_t> s = nbits_splits(ctx, p);
  ONYX_CHECK(s.size() + 1 == ctx.num_outputs(), "the sum and ", s.size(), " outputs by splits, the node has ",
             ctx.num_outputs());
  if (ctx.has_output(0)) ctx.set_output(0, t, x);
  for (size_t i = 0; i < s.size(); ++i) {
    PartialShape y = x;
    if (x.rank_known) y.dims.back() = s[i];
    ctx.set_output(i + 1, t, y);
  }
}

template <class T>
void rms_norm_linear_nbits_kernel(KernelContext& ctx) {
  const NBits p = nbits_attrs(ctx);
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 1 && x.shape()[x.rank() - 1] == p.K, "x ", x.shape().str(), " must end in K = ", p.K);
  ONYX_CHECK(ctx.input(2).numel() == p.K, "gamma must hold K = ", p.K, " values, got ", ctx.input(2).shape().str());
  const int64_t m = x.numel() / p.K;
  const std::vector<T> normed =
      rms_normalized_rows<T>(x.data<T>(), ctx.has_input(1) ? ctx.input(1).data<T>() : nullptr, ctx.input(2).data<T>(),
                             ctx.has_output(0) ? ctx.output(0).data<T>() : nullptr, m, p.K,
                             ctx.attr_float("epsilon", 1e-5f));
  write_nbits_outputs<T>(ctx, p, nbits_product<T>(ctx, p, false, 3, normed.data()), 1);
}

}  // namespace

void register_matmul_nbits_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "MatMulNBits", 1, infer_matmul_nbits, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(kA).dtype(), "MatMulNBits",
                         [&](auto tag) { matmul_nbits_kernel<typename decltype(tag)::type>(ctx); });
  }));
  r.add(domain_op("onyx", "LinearNBits", 1, infer_linear_nbits, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(kA).dtype(), "LinearNBits",
                         [&](auto tag) { linear_nbits_kernel<typename decltype(tag)::type>(ctx); });
  }));
  r.add(domain_op("onyx", "RmsNormLinearNBits", 1, infer_rms_norm_linear_nbits, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), "RmsNormLinearNBits",
                         [&](auto tag) { rms_norm_linear_nbits_kernel<typename decltype(tag)::type>(ctx); });
  }));
}

}  // namespace onyx
