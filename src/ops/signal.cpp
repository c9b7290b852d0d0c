// Signal processing: DFT, STFT, the Hann, Hamming and Blackman windows and MelWeightMatrix.
// Signals carry a last axis of 1 (real) or 2 (real, imaginary). The reference transform is the
// direct O(n^2) sum in float64, with each twiddle computed from (k * t) mod n so that long
// transforms keep their precision.
#include <cmath>
#include <complex>
#include <numbers>

#include "ops/common.h"

namespace onyx {

namespace {

using cd = std::complex<double>;

// e^(sign * 2 pi i * k * t / n)
cd twiddle(int64_t k, int64_t t, int64_t n, int sign) {
  const double angle = sign * 2 * std::numbers::pi * static_cast<double>((k * t) % n) / static_cast<double>(n);
  return {std::cos(angle), std::sin(angle)};
}

// The (outer, axis, inner) view of a signal of shape dims (the complex axis excluded).
struct Lines {
  int64_t outer = 1, len = 1, inner = 1;
};
Lines lines_of(std::span<const int64_t> dims, int64_t axis) {
  Lines l;
  for (int64_t i = 0; i < axis; ++i) l.outer *= dims[i];
  l.len = dims[axis];
  for (size_t i = axis + 1; i + 1 < dims.size(); ++i) l.inner *= dims[i];
  return l;
}

// ---- DFT(input, dft_length?, axis? (opset 20)) ----

struct DftSpec {
  int64_t axis, n;  // axis into the input's dims; transform length
  bool inverse, onesided;
};

DftSpec dft_spec(const InferContext& ctx, const Shape& x) {
  ONYX_CHECK(x.rank() >= 2 && (x[x.rank() - 1] == 1 || x[x.rank() - 1] == 2),
             "input must end in an axis of 1 (real) or 2 (complex), got ", x.str());
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.opset() >= 20 ? -2 : ctx.attr_int("axis", 1);
  if (ctx.opset() >= 20 && ctx.has_input(2)) {
    const Tensor* a = ctx.input_value(2);
    ONYX_CHECK(a, "the axis input is known only at run time");
    ONYX_CHECK(a->numel() == 1, "axis must be a scalar, got ", a->type_str());
    axis = a->get_as_int64(0);
  }
  ONYX_CHECK(axis >= -rank && axis < rank - 1 && axis != -1, "axis ", axis, " must name a signal axis of ", x.str());
  DftSpec s;
  s.axis = axis < 0 ? axis + rank : axis;
  s.inverse = ctx.attr_int("inverse", 0) != 0;
  s.onesided = ctx.attr_int("onesided", 0) != 0;
  s.n = s.inverse && s.onesided ? 2 * (x[s.axis] - 1) : x[s.axis];
  if (ctx.has_input(1)) {
    const Tensor* n = ctx.input_value(1);
    ONYX_CHECK(n, "dft_length is known only at run time");
    ONYX_CHECK(n->numel() == 1, "dft_length must be a scalar, got ", n->type_str());
    s.n = n->get_as_int64(0);
  }
  ONYX_CHECK(s.n > 0, "the transform length must be positive, got ", s.n);
  return s;
}

void infer_dft(InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "input must be a floating type");
  const DftSpec s = dft_spec(ctx, x);
  std::vector<int64_t> dims = x.dims();
  dims[s.axis] = !s.inverse && s.onesided ? s.n / 2 + 1 : s.n;
  dims.back() = s.inverse && s.onesided ? 1 : 2;
  ctx.set_output(0, ctx.input_dtype(0), Shape(dims));
}

void dft_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  const DftSpec s = dft_spec(InferContext(ctx.node(), types, values), x.shape());
  const Lines in = lines_of(x.shape().dims(), s.axis), out = lines_of(y.shape().dims(), s.axis);
  const int64_t xc = x.shape().dims().back(), yc = y.shape().dims().back();
  std::vector<cd> line(static_cast<size_t>(s.n));
  for (int64_t o = 0; o < in.outer; ++o)
    for (int64_t i = 0; i < in.inner; ++i) {
      auto at = [&](const Lines& l, int64_t c, int64_t k) { return ((o * l.len + k) * l.inner + i) * c; };
      // The input line, cut or zero-padded to the transform length.
      std::fill(line.begin(), line.end(), cd(0, 0));
      const int64_t given = s.inverse && s.onesided ? std::min(in.len, s.n / 2 + 1) : std::min(in.len, s.n);
      for (int64_t t = 0; t < given; ++t)
        line[t] = cd(x.get_as_double(at(in, xc, t)), xc == 2 ? x.get_as_double(at(in, xc, t) + 1) : 0.0);
      if (s.inverse && s.onesided) {
        // A one-sided spectrum: the rest is the conjugate mirror; the imaginary parts of the
        // bins that are their own mirror (0, and n/2 for even n) do not count.
        line[0] = cd(line[0].real(), 0);
        if (s.n % 2 == 0) line[s.n / 2] = cd(line[s.n / 2].real(), 0);
        for (int64_t k = 1; k < (s.n + 1) / 2; ++k) line[s.n - k] = std::conj(line[k]);
      }
      const int sign = s.inverse ? 1 : -1;
      for (int64_t k = 0; k < out.len; ++k) {
        cd acc(0, 0);
        for (int64_t t = 0; t < s.n; ++t) acc += line[t] * twiddle(k, t, s.n, sign);
        if (s.inverse) acc /= static_cast<double>(s.n);
        const int64_t pos = at(out, yc, k);
        dispatch<FloatTypes>(y.dtype(), "DFT output", [&](auto tag) {
          using T = typename decltype(tag)::type;
          y.data<T>()[pos] = static_cast<T>(static_cast<compute_t<T>>(acc.real()));
          if (yc == 2) y.data<T>()[pos + 1] = static_cast<T>(static_cast<compute_t<T>>(acc.imag()));
        });
      }
    }
}

// ---- STFT(signal [B, L, 1|2], frame_step, window? [W], frame_length?) -> [B, frames, bins, 2] ----

struct StftSpec {
  int64_t step, length, frames, bins;
};

StftSpec stft_spec(const InferContext& ctx) {
  const Shape x = ctx.input_concrete_shape(0);
  ONYX_CHECK(x.rank() == 3 && (x[2] == 1 || x[2] == 2), "signal must be [batch, length, 1 or 2], got ", x.str());
  const Tensor* step = ctx.input_value(1);
  ONYX_CHECK(step && step->numel() == 1, "frame_step must be a scalar known when planning");
  StftSpec s;
  s.step = step->get_as_int64(0);
  ONYX_CHECK(s.step > 0, "frame_step must be positive, got ", s.step);
  s.length = x[1];
  if (ctx.has_input(2)) {
    const Shape w = ctx.input_concrete_shape(2);
    ONYX_CHECK(w.rank() == 1, "window must be 1-D, got ", w.str());
    s.length = w[0];
  }
  if (ctx.has_input(3)) {
    const Tensor* fl = ctx.input_value(3);
    ONYX_CHECK(fl && fl->numel() == 1, "frame_length must be a scalar known when planning");
    const int64_t n = fl->get_as_int64(0);
    ONYX_CHECK(!ctx.has_input(2) || n == s.length, "frame_length ", n, " differs from the window's ", s.length);
    s.length = n;
  }
  ONYX_CHECK(s.length > 0 && s.length <= x[1], "frame length ", s.length, " must be in [1, ", x[1], "]");
  s.frames = 1 + (x[1] - s.length) / s.step;
  s.bins = ctx.attr_int("onesided", 1) ? s.length / 2 + 1 : s.length;
  return s;
}

void infer_stft(InferContext& ctx) {
  ONYX_CHECK(dtype_is_float(ctx.input_dtype(0)), "signal must be a floating type");
  const StftSpec s = stft_spec(ctx);
  ctx.set_output(0, ctx.input_dtype(0), Shape{ctx.input_concrete_shape(0)[0], s.frames, s.bins, 2});
}

void stft_kernel(KernelContext& ctx) {
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  const StftSpec s = stft_spec(InferContext(ctx.node(), types, values));
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t B = x.shape()[0], L = x.shape()[1], C = x.shape()[2];
  std::vector<double> window(static_cast<size_t>(s.length), 1.0);
  if (ctx.has_input(2))
    for (int64_t t = 0; t < s.length; ++t) window[t] = ctx.input(2).get_as_double(t);
  dispatch<FloatTypes>(y.dtype(), "STFT output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* py = y.data<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t f = 0; f < s.frames; ++f)
        for (int64_t k = 0; k < s.bins; ++k) {
          cd acc(0, 0);
          for (int64_t t = 0; t < s.length; ++t) {
            const int64_t at = (b * L + f * s.step + t) * C;
            const cd v(x.get_as_double(at), C == 2 ? x.get_as_double(at + 1) : 0.0);
            acc += v * window[t] * twiddle(k, t, s.length, -1);
          }
          T* out = py + ((b * s.frames + f) * s.bins + k) * 2;
          out[0] = static_cast<T>(static_cast<compute_t<T>>(acc.real()));
          out[1] = static_cast<T>(static_cast<compute_t<T>>(acc.imag()));
        }
  });
}

// ---- windows(size) -> [size], periodic (default) or symmetric ----

enum class Window { kHann, kHamming, kBlackman };

void infer_window(InferContext& ctx) {
  const Tensor* size = ctx.input_value(0);
  ONYX_CHECK(size && size->numel() == 1, "size must be a scalar known when planning");
  const int64_t n = size->get_as_int64(0);
  ONYX_CHECK(n >= 0, "size must not be negative, got ", n);
  const DType t = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("output_datatype", 1)));
  ONYX_CHECK(dtype_is_float(t) || dtype_is_integer(t), "output_datatype ", dtype_name(t), " is not numeric");
  ctx.set_output(0, t, Shape{n});
}

void window_kernel(KernelContext& ctx, Window w) {
  Tensor& y = ctx.output(0);
  const int64_t n = y.numel();
  const double d = static_cast<double>(ctx.attr_int("periodic", 1) ? n : n - 1);
  const double pi = std::numbers::pi;
  dispatch<NumericTypes>(y.dtype(), "window output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(i);
      double v = 0;
      if (w == Window::kHann) v = std::pow(std::sin(pi * x / d), 2);
      else if (w == Window::kHamming) v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(2 * pi * x / d);
      else v = 0.42 - 0.5 * std::cos(2 * pi * x / d) + 0.08 * std::cos(4 * pi * x / d);
      y.data<T>()[i] = static_cast<T>(static_cast<compute_t<T>>(v));
    }
  });
}

// ---- MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
//      -> [dft_length / 2 + 1, num_mel_bins]: triangular filters evenly spaced in mels ----

int64_t scalar_int(const InferContext& ctx, size_t i, const char* what) {
  const Tensor* t = ctx.input_value(i);
  ONYX_CHECK(t && t->numel() == 1, what, " must be a scalar known when planning");
  return t->get_as_int64(0);
}

void infer_mel(InferContext& ctx) {
  const int64_t bins = scalar_int(ctx, 0, "num_mel_bins"), n = scalar_int(ctx, 1, "dft_length");
  ONYX_CHECK(bins > 0 && n > 0, "num_mel_bins and dft_length must be positive, got ", bins, " and ", n);
  const DType t = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("output_datatype", 1)));
  ONYX_CHECK(dtype_is_float(t), "output_datatype must be a floating type, got ", dtype_name(t));
  ctx.set_output(0, t, Shape{n / 2 + 1, bins});
}

void mel_kernel(KernelContext& ctx) {
  const int64_t bins = ctx.input(0).get_as_int64(0), n = ctx.input(1).get_as_int64(0);
  const int64_t rate = ctx.input(2).get_as_int64(0);
  const double lo = ctx.input(3).get_as_double(0), hi = ctx.input(4).get_as_double(0);
  ONYX_CHECK(rate > 0, "sample_rate must be positive, got ", rate);
  auto to_mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
  const double lo_mel = to_mel(lo), step = (to_mel(hi) - lo_mel) / static_cast<double>(bins + 2);
  const int64_t spectrum = n / 2 + 1;
  // Each filter's edges and center as spectrogram bins (floored, as ONNX defines them).
  std::vector<int64_t> edge(static_cast<size_t>(bins + 2));
  for (int64_t i = 0; i < bins + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * step + lo_mel) / 2595) - 1);
    edge[i] = static_cast<int64_t>(std::floor(static_cast<double>(n + 1) * hz / static_cast<double>(rate)));
    ONYX_CHECK(edge[i] >= 0 && edge[i] < spectrum, "filter edge ", i, " falls on bin ", edge[i], ", outside the ",
               spectrum, " bins (check the edge frequencies against the sample rate)");
  }
  std::vector<double> m(static_cast<size_t>(spectrum * bins), 0.0);
  for (int64_t i = 0; i < bins; ++i) {
    const int64_t left = edge[i], center = edge[i + 1], right = edge[i + 2];
    if (center == left) m[center * bins + i] = 1;
    else
      for (int64_t j = left; j <= center; ++j) m[j * bins + i] = double(j - left) / double(center - left);
    for (int64_t j = center; j < right; ++j) m[j * bins + i] = double(right - j) / double(right - center);
  }
  Tensor& y = ctx.output(0);
  dispatch<FloatTypes>(y.dtype(), "MelWeightMatrix output", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t k = 0; k < m.size(); ++k) y.data<T>()[k] = static_cast<T>(static_cast<compute_t<T>>(m[k]));
  });
}

}  // namespace

void register_signal_ops(OpRegistry& r) {
  for (int since : {17, 20}) r.add(onnx_op("DFT", since, infer_dft, dft_kernel).reads_values({1, 2}));
  r.add(onnx_op("STFT", 17, infer_stft, stft_kernel).reads_values({1, 3}));
  r.add(onnx_op("HannWindow", 17, infer_window, [](KernelContext& c) { window_kernel(c, Window::kHann); })
            .reads_values({0}));
  r.add(onnx_op("HammingWindow", 17, infer_window, [](KernelContext& c) { window_kernel(c, Window::kHamming); })
            .reads_values({0}));
  r.add(onnx_op("BlackmanWindow", 17, infer_window, [](KernelContext& c) { window_kernel(c, Window::kBlackman); })
            .reads_values({0}));
  r.add(onnx_op("MelWeightMatrix", 17, infer_mel, mel_kernel).reads_values({0, 1}));
}

}  // namespace onyx
