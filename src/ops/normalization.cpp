// Normalization layers: LayerNormalization, RMSNormalization, GroupNormalization,
// InstanceNormalization, BatchNormalization (inference), LpNormalization,
// MeanVarianceNormalization, LRN, and ONNX Runtime's SkipLayerNormalization,
// SkipSimplifiedLayerNormalization and SimplifiedLayerNormalization.
//
// Statistics are computed in double whatever stash_type says: it is at least as
// precise as any stash type, and the results are rounded to the output type once.
#include <algorithm>
#include <cmath>

#include "cpu/rowwise.h"
#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

namespace {

template <class T>
double to_d(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}
template <class T>
T from_d(double v) {
  return static_cast<T>(static_cast<compute_t<T>>(v));
}

// The values of `t` (any float dtype) broadcast unidirectionally to `target`.
std::vector<double> broadcast_values(const Tensor& t, const Shape& target, const char* what) {
  ONYX_CHECK(t.rank() <= target.rank() && broadcast_shapes(t.shape(), target) == target, what, " of shape ",
             t.shape().str(), " does not broadcast to ", target.str());
  std::vector<double> out(static_cast<size_t>(target.numel()));
  Shape ts = t.shape();
  for_each_broadcast<1>(target, {&ts}, [&](int64_t o, const std::array<int64_t, 1>& i) { out[o] = t.get_as_double(i[0]); });
  return out;
}

// Normalizes `rows` rows of `cols` values. load(r, buf) fills buf with row r (in
// double); store(r, j, normalized) writes the result. Mean and 1/std go to
// `mean`/`inv` when given. `center` false: RMS normalization (no mean removed).
template <class Load, class Store>
void normalize_rows(int64_t rows, int64_t cols, double eps, bool center, Load load, Store store,
                    std::vector<double>* mean, std::vector<double>* inv) {
  std::vector<double> buf(static_cast<size_t>(cols));
  if (mean) mean->assign(static_cast<size_t>(rows), 0.0);
  if (inv) inv->assign(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    load(r, buf.data());
    double mu = 0;
    for (double v : buf) mu += v;
    mu = cols ? mu / static_cast<double>(cols) : 0.0;
    double sq = 0;
    const double shift = center ? mu : 0.0;
    for (double v : buf) sq += (v - shift) * (v - shift);
    double is = 1.0 / std::sqrt((cols ? sq / static_cast<double>(cols) : 0.0) + eps);
    for (int64_t j = 0; j < cols; ++j) store(r, j, (buf[j] - shift) * is);
    if (mean) (*mean)[r] = mu;
    if (inv) (*inv)[r] = is;
  }
}

template <class T>
void write_stats(KernelContext& ctx, size_t out, const std::vector<double>& v) {
  if (!ctx.has_output(out)) return;
  Tensor& t = ctx.output(out);
  dispatch<FloatTypes>(t.dtype(), "statistics output", [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* p = t.data<U>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = from_d<U>(v[i]);
  });
}

DType stash_dtype(const NodeView& node) {
  int64_t s = node.attr_int("stash_type", 1);
  DType d = dtype_from_onnx(static_cast<int32_t>(s));
  ONYX_CHECK(dtype_is_float(d), "stash_type must name a float type, got ", s);
  return d;
}

// ---- LayerNormalization, RMSNormalization, SimplifiedLayerNormalization ----

// `stat_outputs`: the output indices that hold per-row statistics.
void infer_layer_norm(InferContext& ctx, std::vector<size_t> stat_outputs, DType stat_dtype) {
  const PartialShape& x = ctx.input_shape(0);
  DType dt = ctx.input_dtype(0);
  ctx.set_output(0, dt, x);
  if (stat_dtype == DType::kUndefined) stat_dtype = dt;
  for (size_t o : stat_outputs) {
    if (!ctx.has_output(o)) continue;
    if (!x.rank_known) {
      ctx.set_output(o, stat_dtype, PartialShape());
      continue;
    }
    int64_t axis = normalize_axis(ctx.attr_int("axis", -1), static_cast<int64_t>(x.dims.size()));
    PartialShape s = x;
    for (size_t i = static_cast<size_t>(axis); i < s.dims.size(); ++i) s.dims[i] = 1;
    ctx.set_output(o, stat_dtype, s);
  }
}

// A statistics output the float32 kernels may write: absent, or float32.
bool float_stat(KernelContext& ctx, int out) {
  return out < 0 || !ctx.has_output(out) || ctx.output(out).dtype() == DType::kFloat32;
}
float* stat_ptr(KernelContext& ctx, int out) {
  return out >= 0 && ctx.has_output(out) ? ctx.output(out).data<float>() : nullptr;
}
bool float_row(const Tensor& t, int64_t cols) { return t.dtype() == DType::kFloat32 && t.numel() == cols; }

// center: LayerNormalization; otherwise RMS. Bias is input 2 when `bias_input`. T is the
// input's type; the output has the type inference gave it (SimplifiedLayerNormalization: the
// scale's).
template <class T>
void layer_norm_kernel(KernelContext& ctx, bool center, bool bias_input, int mean_out, int inv_out) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), rank);
  Shape norm_shape(std::vector<int64_t>(x.shape().dims().begin() + axis, x.shape().dims().end()));
  const int64_t cols = norm_shape.numel();
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if constexpr (std::is_same_v<T, float>) {
    const bool has_bias = bias_input && ctx.has_input(2);
    if (ctx.output(0).dtype() == DType::kFloat32 && float_row(ctx.input(1), cols) &&
        (!has_bias || float_row(ctx.input(2), cols)) && float_stat(ctx, mean_out) && float_stat(ctx, inv_out)) {
      cpu::NormRows a;
      a.x = x.data<float>();
      a.scale = ctx.input(1).data<float>();
      a.shift = has_bias ? ctx.input(2).data<float>() : nullptr;
      a.y = ctx.output(0).data<float>();
      a.mean = stat_ptr(ctx, mean_out);
      a.inv_std = stat_ptr(ctx, inv_out);
      a.rows = rows;
      a.n = cols;
      a.epsilon = ctx.attr_float("epsilon", 1e-5f);
      a.center = center;
      cpu::norm_rows(a);
      return;
    }
  }
  std::vector<double> scale = broadcast_values(ctx.input(1), norm_shape, "scale");
  std::vector<double> bias;
  if (bias_input && ctx.has_input(2)) bias = broadcast_values(ctx.input(2), norm_shape, "bias");
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  const T* px = x.data<T>();
  Tensor& y = ctx.output(0);
  std::vector<double> mean, inv;
  dispatch<FloatTypes>(y.dtype(), "output", [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* py = y.data<U>();
    normalize_rows(
        rows, cols, eps, center,
        [&](int64_t r, double* buf) {
          for (int64_t j = 0; j < cols; ++j) buf[j] = to_d(px[r * cols + j]);
        },
        [&](int64_t r, int64_t j, double v) {
          py[r * cols + j] = from_d<U>(v * scale[j] + (bias.empty() ? 0.0 : bias[j]));
        },
        &mean, &inv);
  });
  if (mean_out >= 0) write_stats<T>(ctx, mean_out, mean);
  if (inv_out >= 0) write_stats<T>(ctx, inv_out, inv);
}

// SimplifiedLayerNormalization: Y has the scale's type (onnxruntime's V), inv_std_var the
// stash type (float32 by default).
void infer_simplified_layer_norm(InferContext& ctx) {
  infer_layer_norm(ctx, {1}, stash_dtype(ctx));
  ONYX_CHECK(ctx.num_inputs() >= 2 && ctx.has_input(1), "SimplifiedLayerNormalization needs the scale input");
  const DType scale = ctx.input_dtype(1);
  ONYX_CHECK(dtype_is_float(scale), "scale must be a float tensor, got ", dtype_name(scale));
  ctx.set_output(0, scale, ctx.input_shape(0));
}

// ---- SkipLayerNormalization / SkipSimplifiedLayerNormalization (com.microsoft) ----
// Inputs: input, skip, gamma, [beta (Skip LN only)], [bias]. Outputs: output,
// mean, inv_std_var, input_skip_bias_sum. The statistics are float32, as onnxruntime
// types them; the simplified form's mean is 0 (no mean is removed), as onnxruntime
// writes it.

void infer_skip_norm(InferContext& ctx) {
  const PartialShape& x = ctx.input_shape(0);
  DType dt = ctx.input_dtype(0);
  ctx.set_output(0, dt, x);
  for (size_t o : {1, 2}) {
    if (!ctx.has_output(o)) continue;
    PartialShape s = x;
    if (s.rank_known && !s.dims.empty()) s.dims.back() = 1;
    ctx.set_output(o, DType::kFloat32, s);
  }
  if (ctx.has_output(3)) ctx.set_output(3, dt, x);
}

template <class T>
void skip_norm_kernel(KernelContext& ctx, bool center) {
  const Tensor& x = ctx.input(0);
  const Tensor& skip = ctx.input(1);
  ONYX_CHECK(x.rank() >= 1, "input must have rank >= 1");
  ONYX_CHECK(skip.dtype() == x.dtype(), "skip has dtype ", dtype_name(skip.dtype()), ", input has ",
             dtype_name(x.dtype()));
  const int64_t cols = x.shape()[x.rank() - 1];
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  if constexpr (std::is_same_v<T, float>) {
    const size_t bi = center ? 4 : 3;
    if (skip.shape() == x.shape() && float_row(ctx.input(2), cols) &&
        (!center || !ctx.has_input(3) || float_row(ctx.input(3), cols)) &&
        (!ctx.has_input(bi) || float_row(ctx.input(bi), cols))) {
      cpu::NormRows a;
      a.x = x.data<float>();
      a.skip = skip.data<float>();
      a.bias = ctx.has_input(bi) ? ctx.input(bi).data<float>() : nullptr;
      a.sum = ctx.has_output(3) ? ctx.output(3).data<float>() : nullptr;
      a.scale = ctx.input(2).data<float>();
      a.shift = center && ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
      a.y = ctx.output(0).data<float>();
      a.mean = center ? stat_ptr(ctx, 1) : nullptr;
      a.inv_std = stat_ptr(ctx, 2);
      a.rows = rows;
      a.n = cols;
      a.epsilon = ctx.attr_float("epsilon", 1e-12f);
      a.center = center;
      cpu::norm_rows(a);
      if (!center && ctx.has_output(1)) std::fill_n(ctx.output(1).data<float>(), rows, 0.f);
      return;
    }
  }
  Shape hidden{cols};
  std::vector<double> gamma = broadcast_values(ctx.input(2), hidden, "gamma");
  std::vector<double> beta, bias;
  size_t bias_index = center ? 4 : 3;
  if (center && ctx.has_input(3)) beta = broadcast_values(ctx.input(3), hidden, "beta");
  if (ctx.has_input(bias_index)) bias = broadcast_values(ctx.input(bias_index), hidden, "bias");
  // skip is [.., S, H] with fewer or size-1 leading dims: broadcast it to the input.
  Shape xs = x.shape(), ss = skip.shape();
  ONYX_CHECK(ss.rank() <= xs.rank() && broadcast_shapes(ss, xs) == xs, "skip of shape ", ss.str(),
             " does not broadcast to the input shape ", xs.str());
  std::vector<int64_t> skip_index(static_cast<size_t>(x.numel()));
  for_each_broadcast<1>(xs, {&ss}, [&](int64_t o, const std::array<int64_t, 1>& i) { skip_index[o] = i[0]; });
  const T* px = x.data<T>();
  const T* pk = skip.data<T>();
  T* py = ctx.output(0).data<T>();
  T* psum = ctx.has_output(3) ? ctx.output(3).data<T>() : nullptr;
  std::vector<double> mean, inv;
  normalize_rows(
      rows, cols, ctx.attr_float("epsilon", 1e-12f), center,
      [&](int64_t r, double* buf) {
        for (int64_t j = 0; j < cols; ++j) {
          int64_t i = r * cols + j;
          buf[j] = to_d(px[i]) + to_d(pk[skip_index[i]]) + (bias.empty() ? 0.0 : bias[j]);
          if (psum) psum[i] = from_d<T>(buf[j]);
        }
      },
      [&](int64_t r, int64_t j, double v) {
        py[r * cols + j] = from_d<T>(v * gamma[j] + (beta.empty() ? 0.0 : beta[j]));
      },
      &mean, &inv);
  if (!center) std::fill(mean.begin(), mean.end(), 0.0);
  write_stats<T>(ctx, 1, mean);
  write_stats<T>(ctx, 2, inv);
}

// ---- GroupNormalization / InstanceNormalization ----

// x: [N, C, spatial...]; `groups` groups of channels; scale/bias per channel
// (or per group when `per_group`).
template <class T>
void group_norm_kernel(KernelContext& ctx, int64_t groups, bool per_group, double eps) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 2, "input must be [N, C, ...], got ", x.shape().str());
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t spatial = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  ONYX_CHECK(groups > 0 && c % groups == 0, "the ", c, " channels do not divide into ", groups, " groups");
  const int64_t cpg = c / groups;
  const int64_t want = per_group ? groups : c;
  const Tensor& sc = ctx.input(1);
  const Tensor& bi = ctx.input(2);
  ONYX_CHECK(sc.numel() == want && bi.numel() == want, "scale and bias must hold ", want, " values, got shapes ",
             sc.shape().str(), " and ", bi.shape().str());
  const T* px = x.data<T>();
  T* py = ctx.output(0).data<T>();
  const int64_t cols = cpg * spatial;
  normalize_rows(
      n * groups, cols, eps, true,
      [&](int64_t r, double* buf) {
        for (int64_t j = 0; j < cols; ++j) buf[j] = to_d(px[r * cols + j]);
      },
      [&](int64_t r, int64_t j, double v) {
        int64_t g = r % groups;
        int64_t k = per_group ? g : g * cpg + (spatial ? j / spatial : 0);
        py[r * cols + j] = from_d<T>(v * sc.get_as_double(k) + bi.get_as_double(k));
      },
      nullptr, nullptr);
}

// ---- BatchNormalization ----

// Training mode (opset 14+, training_mode=1) normalizes by the batch's own statistics and also
// returns the running mean and variance moved toward them by `momentum`.
void infer_batch_norm(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
  const bool training = ctx.opset() >= 14 && ctx.attr_int("training_mode", 0) != 0;
  for (size_t o = 1; o < ctx.num_outputs(); ++o) {
    if (!ctx.has_output(o)) continue;
    ONYX_CHECK(training && o <= 2, "BatchNormalization output ", o, " exists only in training mode (opset 14+)",
               o > 2 ? " and only up to output 2" : "");
    ctx.set_output(o, ctx.input_dtype(o == 1 ? 3 : 4), ctx.input_shape(o == 1 ? 3 : 4));
  }
}

template <class T>
void batch_norm_kernel(KernelContext& ctx) {
  const bool training = ctx.opset() >= 14 && ctx.attr_int("training_mode", 0) != 0;
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 1, "input must have rank >= 1");
  const int64_t n = x.shape()[0], c = x.rank() > 1 ? x.shape()[1] : 1;
  const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  std::vector<double> scale(c), shift(c), mean(c), var(c);
  const double eps = ctx.attr_float("epsilon", 1e-5f);
  for (size_t i = 1; i <= 4; ++i)
    ONYX_CHECK(ctx.input(i).numel() == c, "input ", i, " must hold one value per channel (", c, "), got shape ",
               ctx.input(i).shape().str());
  const T* px = x.data<T>();
  for (int64_t k = 0; k < c; ++k) {
    mean[k] = ctx.input(3).get_as_double(k);
    var[k] = ctx.input(4).get_as_double(k);
  }
  if (training) {
    ONYX_CHECK(n * spatial > 0, "training mode needs a non-empty batch");
    for (int64_t k = 0; k < c; ++k) {
      double sum = 0, sq = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < spatial; ++i) sum += to_d(px[(b * c + k) * spatial + i]);
      const double m = sum / static_cast<double>(n * spatial);
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < spatial; ++i) sq += std::pow(to_d(px[(b * c + k) * spatial + i]) - m, 2);
      const double v = sq / static_cast<double>(n * spatial);  // the population variance
      const double momentum = ctx.attr_float("momentum", 0.9f);
      for (size_t o = 1; o <= 2; ++o) {
        if (!ctx.has_output(o)) continue;
        const double running = (o == 1 ? mean[k] : var[k]) * momentum + (o == 1 ? m : v) * (1 - momentum);
        Tensor& out = ctx.output(o);
        dispatch<FloatTypes>(out.dtype(), "running statistics", [&](auto tag) {
          using R = typename decltype(tag)::type;
          out.data<R>()[k] = static_cast<R>(static_cast<compute_t<R>>(running));
        });
      }
      mean[k] = m;
      var[k] = v;
    }
  }
  for (int64_t k = 0; k < c; ++k) {
    double s = ctx.input(1).get_as_double(k) / std::sqrt(var[k] + eps);
    scale[k] = s;
    shift[k] = ctx.input(2).get_as_double(k) - mean[k] * s;
  }
  T* py = ctx.output(0).data<T>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k) {
      const int64_t base = (b * c + k) * spatial;
      for (int64_t i = 0; i < spatial; ++i) py[base + i] = from_d<T>(to_d(px[base + i]) * scale[k] + shift[k]);
    }
}

// ---- LpNormalization, MeanVarianceNormalization, LRN ----

template <class T>
void lp_norm_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 1, "input must have rank >= 1");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), static_cast<int64_t>(x.rank()));
  const int64_t p = ctx.attr_int("p", 2);
  ONYX_CHECK(p == 1 || p == 2, "p must be 1 or 2, got ", p);
  int64_t outer = 1, n = x.shape()[axis], inner = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(x.rank()); ++i) {
    if (i < axis) outer *= x.shape()[i];
    if (i > axis) inner *= x.shape()[i];
  }
  const T* px = x.data<T>();
  T* py = ctx.output(0).data<T>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      double norm = 0;
      for (int64_t j = 0; j < n; ++j) {
        double v = to_d(px[base + j * inner]);
        norm += p == 1 ? std::abs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      // An all-zero vector stays zero (ONNX's definition), not 0 / 0.
      for (int64_t j = 0; j < n; ++j)
        py[base + j * inner] = from_d<T>(norm == 0 ? 0.0 : to_d(px[base + j * inner]) / norm);
    }
}

template <class T>
void mvn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  std::vector<bool> reduced(rank, false);
  for (int64_t a : ctx.attr_ints("axes", {0, 2, 3})) reduced[normalize_axis(a, rank)] = true;
  // Output position of each element in the reduced statistics.
  std::vector<int64_t> stat_index(static_cast<size_t>(x.numel()));
  int64_t nstat = 1;
  std::vector<int64_t> sstride(rank, 0);
  for (int64_t i = rank; i-- > 0;)
    if (!reduced[i]) {
      sstride[i] = nstat;
      nstat *= x.shape()[i];
    }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < x.numel(); ++e) {
    int64_t s = 0;
    for (int64_t i = 0; i < rank; ++i) s += idx[i] * sstride[i];
    stat_index[e] = s;
    for (int64_t i = rank; i-- > 0;) {
      if (++idx[i] < x.shape()[i]) break;
      idx[i] = 0;
    }
  }
  const T* px = x.data<T>();
  T* py = ctx.output(0).data<T>();
  std::vector<double> sum(nstat, 0.0), sumsq(nstat, 0.0);
  const double count = nstat ? static_cast<double>(x.numel()) / static_cast<double>(nstat) : 0;
  for (int64_t e = 0; e < x.numel(); ++e) {
    double v = to_d(px[e]);
    sum[stat_index[e]] += v;
    sumsq[stat_index[e]] += v * v;
  }
  // As the ONNX function: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
  for (int64_t e = 0; e < x.numel(); ++e) {
    double m = sum[stat_index[e]] / count;
    double var = std::max(0.0, sumsq[stat_index[e]] / count - m * m);
    py[e] = from_d<T>((to_d(px[e]) - m) / (std::sqrt(var) + 1e-9));
  }
}

template <class T>
void lrn_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ONYX_CHECK(x.rank() >= 3, "LRN needs an input [N, C, D1, ...], got ", x.shape().str());
  const int64_t size = ctx.attr_int("size");
  ONYX_CHECK(size > 0, "size must be positive, got ", size);
  const double alpha = ctx.attr_float("alpha", 1e-4f), beta = ctx.attr_float("beta", 0.75f),
               bias = ctx.attr_float("bias", 1.f);
  const int64_t n = x.shape()[0], c = x.shape()[1];
  const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;  // floor and ceil of (size-1)/2
  const T* px = x.data<T>();
  T* py = ctx.output(0).data<T>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t s = 0; s < spatial; ++s) {
        double sq = 0;
        for (int64_t q = std::max<int64_t>(0, k - before); q <= std::min(c - 1, k + after); ++q) {
          double v = to_d(px[(b * c + q) * spatial + s]);
          sq += v * v;
        }
        const int64_t i = (b * c + k) * spatial + s;
        py[i] = from_d<T>(to_d(px[i]) / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
      }
}

template <class Fn>
KernelFn float_kernel(const char* name, Fn fn) {
  return [name, fn](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), name, [&](auto tag) { fn(tag, ctx); });
  };
}

InferFn same_as_input() {
  return [](InferContext& ctx) { infer_same_as_input(ctx); };
}

}  // namespace

void register_normalization_ops(OpRegistry& r) {
  r.add(onnx_op("LayerNormalization", 17,
              [](InferContext& ctx) { infer_layer_norm(ctx, {1, 2}, stash_dtype(ctx)); },
              float_kernel("LayerNormalization",
                           [](auto tag, KernelContext& ctx) {
                             layer_norm_kernel<typename decltype(tag)::type>(ctx, true, true, 1, 2);
                           }))
            .in_place({0}));
  r.add(onnx_op("RMSNormalization", 23, same_as_input(),
              float_kernel("RMSNormalization",
                           [](auto tag, KernelContext& ctx) {
                             layer_norm_kernel<typename decltype(tag)::type>(ctx, false, false, -1, -1);
                           }))
            .in_place({0}));
  for (const char* domain : {"", "com.microsoft"}) {
    r.add(domain_op(domain, "SimplifiedLayerNormalization", 1, infer_simplified_layer_norm,
                    float_kernel("SimplifiedLayerNormalization",
                                 [](auto tag, KernelContext& ctx) {
                                   layer_norm_kernel<typename decltype(tag)::type>(ctx, false, false, -1, 1);
                                 }))
              .in_place({0}));
    r.add(domain_op(domain, "SkipLayerNormalization", 1, infer_skip_norm,
                float_kernel("SkipLayerNormalization",
                             [](auto tag, KernelContext& ctx) {
                               skip_norm_kernel<typename decltype(tag)::type>(ctx, true);
                             })));
    r.add(domain_op(domain, "SkipSimplifiedLayerNormalization", 1, infer_skip_norm,
                float_kernel("SkipSimplifiedLayerNormalization",
                             [](auto tag, KernelContext& ctx) {
                               skip_norm_kernel<typename decltype(tag)::type>(ctx, false);
                             })));
  }
  r.add(onnx_op("GroupNormalization", 18, same_as_input(),
              float_kernel("GroupNormalization",
                           [](auto tag, KernelContext& ctx) {
                             // Opset 18 took one scale/bias per group; 21 one per channel.
                             group_norm_kernel<typename decltype(tag)::type>(ctx, ctx.attr_int("num_groups"),
                                                                             ctx.opset() < 21,
                                                                             ctx.attr_float("epsilon", 1e-5f));
                           })));
  r.add(onnx_op("InstanceNormalization", 1, same_as_input(),
              float_kernel("InstanceNormalization",
                           [](auto tag, KernelContext& ctx) {
                             const Tensor& x = ctx.input(0);
                             int64_t c = x.rank() >= 2 ? x.shape()[1] : 0;
                             group_norm_kernel<typename decltype(tag)::type>(ctx, c, false,
                                                                             ctx.attr_float("epsilon", 1e-5f));
                           })));
  r.add(onnx_op("BatchNormalization", 1, infer_batch_norm,
              float_kernel("BatchNormalization",
                           [](auto tag, KernelContext& ctx) { batch_norm_kernel<typename decltype(tag)::type>(ctx); })));
  r.add(onnx_op("LpNormalization", 1, same_as_input(),
              float_kernel("LpNormalization",
                           [](auto tag, KernelContext& ctx) { lp_norm_kernel<typename decltype(tag)::type>(ctx); })));
  r.add(onnx_op("MeanVarianceNormalization", 9, same_as_input(),
              float_kernel("MeanVarianceNormalization",
                           [](auto tag, KernelContext& ctx) { mvn_kernel<typename decltype(tag)::type>(ctx); })));
  r.add(onnx_op("LRN", 1, same_as_input(),
              float_kernel("LRN", [](auto tag, KernelContext& ctx) { lrn_kernel<typename decltype(tag)::type>(ctx); })));
}

}  // namespace onyx
