// Random ops: RandomUniform, RandomUniformLike, RandomNormal, RandomNormalLike, Bernoulli and
// Multinomial.
// With a `seed` attribute a node draws the same values on every run (the seed fixes the
// stream); without one each run draws afresh. No two engines share a generator, so outputs
// are checked by their distribution (tests/unit), not value by value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/common.h"

namespace onyx {

namespace {

std::mt19937_64 generator(const NodeView& n) {
  if (n.has_attr("seed")) {
    const float seed = n.attr_float("seed", 0.f);
    uint32_t bits;
    std::memcpy(&bits, &seed, 4);
    return std::mt19937_64(bits);
  }
  return std::mt19937_64(std::random_device{}());
}

DType output_dtype(const InferContext& ctx, DType fallback) {
  const int64_t code = ctx.attr_int("dtype", 0);
  const DType t = code ? dtype_from_onnx(static_cast<int32_t>(code)) : fallback;
  return t;
}

template <class Dist>
void fill(Tensor& y, Dist dist, std::mt19937_64& rng) {
  dispatch<FloatTypes>(y.dtype(), "random output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = static_cast<T>(static_cast<compute_t<T>>(dist(rng)));
  });
}

void infer_random(InferContext& ctx) {
  const DType t = output_dtype(ctx, DType::kFloat32);
  ONYX_CHECK(dtype_is_float(t), "dtype must be a floating type, got ", dtype_name(t));
  auto shape = ctx.attr_ints("shape");
  for (int64_t d : shape) ONYX_CHECK(d >= 0, "shape holds a negative dimension ", d);
  ctx.set_output(0, t, Shape(shape));
}

void infer_random_like(InferContext& ctx) {
  const DType t = output_dtype(ctx, ctx.input_dtype(0));
  ONYX_CHECK(dtype_is_float(t), "dtype must be a floating type, got ", dtype_name(t));
  ctx.set_output(0, t, ctx.input_shape(0));
}

void uniform_kernel(KernelContext& ctx) {
  auto rng = generator(ctx);
  const double low = ctx.attr_float("low", 0.f), high = ctx.attr_float("high", 1.f);
  ONYX_CHECK(low <= high, "low (", low, ") must not exceed high (", high, ")");
  fill(ctx.output(0), std::uniform_real_distribution<double>(low, high), rng);
}

void normal_kernel(KernelContext& ctx) {
  auto rng = generator(ctx);
  const double scale = ctx.attr_float("scale", 1.f);
  ONYX_CHECK(scale >= 0, "scale must not be negative, got ", scale);
  fill(ctx.output(0), std::normal_distribution<double>(ctx.attr_float("mean", 0.f), scale), rng);
}

// Bernoulli: 1 with probability x, else 0, in `dtype` (the input's type by default).
void infer_bernoulli(InferContext& ctx) {
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "input must be probabilities of a floating type");
  const DType t = output_dtype(ctx, ctx.input_dtype(0));
  ONYX_CHECK(t != DType::kString && !dtype_is_object(t) && !dtype_is_narrow(t), "dtype ", dtype_name(t),
             " cannot hold 0 and 1");
  ctx.set_output(0, t, ctx.input_shape(0));
}

void bernoulli_kernel(KernelContext& ctx) {
  auto rng = generator(ctx);
  const Tensor& p = ctx.input(0);
  Tensor& y = ctx.output(0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  dispatch<NumericBoolTypes>(y.dtype(), "Bernoulli output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const double prob = p.get_as_double(i);
      ONYX_CHECK(prob >= 0 && prob <= 1, "probability ", prob, " at ", i, " is outside [0, 1]");
      const bool one = u(rng) < prob;
      if constexpr (std::is_same_v<T, bool>) y.data<T>()[i] = one;
      else y.data<T>()[i] = static_cast<T>(static_cast<compute_t<T>>(one ? 1 : 0));
    }
  });
}

// Multinomial(input [batch, classes] unnormalized log-probabilities) -> [batch, sample_size]
// class indices drawn from each row's softmax.
void infer_multinomial(InferContext& ctx) {
  const PartialShape& x = ctx.input_shape(0);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "input must be a floating type");
  ONYX_CHECK(!x.rank_known || x.dims.size() == 2, "input must be [batch, classes], got ", x.str());
  const int64_t samples = ctx.attr_int("sample_size", 1);
  ONYX_CHECK(samples > 0, "sample_size must be positive, got ", samples);
  const DType t = output_dtype(ctx, DType::kInt32);
  ONYX_CHECK(t == DType::kInt32 || t == DType::kInt64, "dtype must be int32 or int64, got ", dtype_name(t));
  PartialShape y = PartialShape::of_rank(2);
  if (x.rank_known) y.dims[0] = x.dims[0];
  y.dims[1] = samples;
  ctx.set_output(0, t, y);
}

void multinomial_kernel(KernelContext& ctx) {
  auto rng = generator(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t batch = x.shape()[0], classes = x.shape()[1], samples = y.shape()[1];
  ONYX_CHECK(classes > 0, "input has no classes");
  std::vector<double> cdf(static_cast<size_t>(classes));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t b = 0; b < batch; ++b) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < classes; ++c) mx = std::max(mx, x.get_as_double(b * classes + c));
    ONYX_CHECK(std::isfinite(mx), "row ", b, " has no finite log-probability");
    for (int64_t c = 0; c < classes; ++c) cdf[c] = sum += std::exp(x.get_as_double(b * classes + c) - mx);
    for (int64_t k = 0; k < samples; ++k) {
      const double v = u(rng) * sum;
      const int64_t c = std::min<int64_t>(std::upper_bound(cdf.begin(), cdf.end(), v) - cdf.begin(), classes - 1);
      if (y.dtype() == DType::kInt32) y.data<int32_t>()[b * samples + k] = static_cast<int32_t>(c);
      else y.data<int64_t>()[b * samples + k] = c;
    }
  }
}

}  // namespace

void register_random_ops(OpRegistry& r) {
  r.add(onnx_op("Multinomial", 7, infer_multinomial, multinomial_kernel).never_fold());
  r.add(onnx_op("RandomUniform", 1, infer_random, uniform_kernel).never_fold());
  r.add(onnx_op("RandomUniformLike", 1, infer_random_like, uniform_kernel).never_fold());
  r.add(onnx_op("RandomNormal", 1, infer_random, normal_kernel).never_fold());
  r.add(onnx_op("RandomNormalLike", 1, infer_random_like, normal_kernel).never_fold());
  r.add(onnx_op("Bernoulli", 15, infer_bernoulli, bernoulli_kernel).never_fold());
}

}  // namespace onyx
