// The recurrent layers RNN, GRU and LSTM (ONNX's layout: gates stacked in W, R and B; one
// or two directions; optional sequence lengths, initial states and LSTM peepholes). The
// reference kernel steps token by token in float64 accumulators over float32 weights.
#include <algorithm>
#include <cmath>
#include <functional>

#include "ops/common.h"
#include "ops/rnn.h"

namespace onyx {

namespace {

enum class Cell { kRnn, kGru, kLstm };

int gates_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }

using Activation = std::function<double(double)>;

// One of ONNX's recurrent activation functions; alpha and beta come from the node's lists
// at the function's position, else the function's defaults.
Activation make_activation(const std::string& name, const std::vector<float>& alphas, const std::vector<float>& betas,
                           size_t at) {
  auto alpha = [&](double d) { return at < alphas.size() ? static_cast<double>(alphas[at]) : d; };
  auto beta = [&](double d) { return at < betas.size() ? static_cast<double>(betas[at]) : d; };
  if (name == "Sigmoid") return [](double x) { return 1 / (1 + std::exp(-x)); };
  if (name == "Tanh") return [](double x) { return std::tanh(x); };
  if (name == "Relu") return [](double x) { return std::max(x, 0.0); };
  if (name == "Softsign") return [](double x) { return x / (1 + std::fabs(x)); };
  if (name == "Softplus") return [](double x) { return std::log1p(std::exp(x)); };
  if (name == "Affine") return [a = alpha(1), b = beta(0)](double x) { return a * x + b; };
  if (name == "LeakyRelu") return [a = alpha(0.01)](double x) { return x >= 0 ? x : a * x; };
  if (name == "ThresholdedRelu") return [a = alpha(1)](double x) { return x > a ? x : 0; };
  if (name == "ScaledTanh") return [a = alpha(1), b = beta(1)](double x) { return a * std::tanh(b * x); };
  if (name == "HardSigmoid")
    return [a = alpha(0.2), b = beta(0.5)](double x) { return std::clamp(a * x + b, 0.0, 1.0); };
  if (name == "Elu") return [a = alpha(1)](double x) { return x >= 0 ? x : a * (std::exp(x) - 1); };
  throw Error(cat("activation \"", name, "\" is not one of ONNX's recurrent activations"));
}

RnnDims rnn_dims(const InferContext& ctx, Cell cell) {
  RnnDims d{};
  const Shape x = ctx.input_concrete_shape(0), w = ctx.input_concrete_shape(1), r = ctx.input_concrete_shape(2);
  ONYX_CHECK(x.rank() == 3, "X must have rank 3, got ", x.str());
  d.batch_first = ctx.attr_int("layout", 0) == 1;
  d.seq = d.batch_first ? x[1] : x[0];
  d.batch = d.batch_first ? x[0] : x[1];
  d.input = x[2];
  const std::string dir = ctx.attr_string("direction", "forward");
  ONYX_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional",
             "direction must be forward, reverse or bidirectional, got \"", dir, "\"");
  d.dirs = dir == "bidirectional" ? 2 : 1;
  const int64_t g = gates_of(cell);
  ONYX_CHECK(w.rank() == 3 && w[0] == d.dirs && w[2] == d.input && w[1] % g == 0, "W must be [", d.dirs, ", ", g,
             " * hidden_size, ", d.input, "], got ", w.str());
  d.hidden = w[1] / g;
  if (ctx.has_attr("hidden_size"))
    ONYX_CHECK(ctx.attr_int("hidden_size") == d.hidden, "hidden_size ", ctx.attr_int("hidden_size"), " differs from W's ",
               d.hidden);
  ONYX_CHECK(r == Shape({d.dirs, g * d.hidden, d.hidden}), "R must be [", d.dirs, ", ", g * d.hidden, ", ", d.hidden,
             "], got ", r.str());
  check_rnn_state_inputs(ctx, d, g, cell == Cell::kLstm);
  return d;
}

void infer_rnn(InferContext& ctx, Cell cell) {
  const RnnDims d = rnn_dims(ctx, cell);
  const DType t = ctx.input_dtype(0);
  ONYX_CHECK(dtype_is_float(t), "X must be a floating type, got ", dtype_name(t));
  const Shape y = d.batch_first ? Shape{d.batch, d.seq, d.dirs, d.hidden} : Shape{d.seq, d.dirs, d.batch, d.hidden};
  const Shape h = d.batch_first ? Shape{d.batch, d.dirs, d.hidden} : Shape{d.dirs, d.batch, d.hidden};
  if (ctx.has_output(0)) ctx.set_output(0, t, y);
  if (ctx.has_output(1)) ctx.set_output(1, t, h);
  if (cell == Cell::kLstm && ctx.has_output(2)) ctx.set_output(2, t, h);
}

std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = t.get_as_double(static_cast<int64_t>(i));
  return v;
}

// The products in float64 from the float W and R inputs, in ONNX's layout.
RecurrentProducts float_products(const RnnDims& d, int64_t G, const Tensor& x, const Tensor& w, const Tensor& r) {
  auto X = std::make_shared<std::vector<double>>(doubles(x));
  auto W = std::make_shared<std::vector<double>>(doubles(w));
  auto R = std::make_shared<std::vector<double>>(doubles(r));
  const int64_t GH = G * d.hidden, I = d.input, H = d.hidden, B = d.batch, S = d.seq;
  RecurrentProducts p;
  p.input = [=](int64_t k) {
    std::vector<double> out(static_cast<size_t>(S * B * GH));
    const double* Wk = W->data() + k * GH * I;
    for (int64_t t = 0; t < S; ++t)
      for (int64_t b = 0; b < B; ++b) {
        const double* xr = X->data() + (d.batch_first ? (b * S + t) : (t * B + b)) * I;
        for (int64_t q = 0; q < GH; ++q) {
          double acc = 0;
          for (int64_t i = 0; i < I; ++i) acc += xr[i] * Wk[q * I + i];
          out[(t * B + b) * GH + q] = acc;
        }
      }
    return out;
  };
  p.recurrent = [=](int64_t k, const std::vector<double>& h) {
    std::vector<double> out(static_cast<size_t>(B * GH));
    const double* Rk = R->data() + k * GH * H;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t q = 0; q < GH; ++q) {
        double acc = 0;
        for (int64_t j = 0; j < H; ++j) acc += h[b * H + j] * Rk[q * H + j];
        out[b * GH + q] = acc;
      }
    return out;
  };
  p.recurrent_weights = R;
  return p;
}

void run_recurrent(KernelContext& ctx, Cell cell, const RnnDims& d, const RecurrentProducts& prod) {
  const int64_t G = gates_of(cell), H = d.hidden, B = d.batch, S = d.seq, GH = G * H;
  const std::vector<double> Bias = ctx.has_input(3) ? doubles(ctx.input(3)) : std::vector<double>(d.dirs * 2 * GH, 0);
  std::vector<int64_t> lens(static_cast<size_t>(B), S);
  if (ctx.has_input(4))
    for (int64_t b = 0; b < B; ++b) {
      lens[b] = ctx.input(4).get_as_int64(b);
      ONYX_CHECK(lens[b] >= 0 && lens[b] <= S, "sequence_lens[", b, "] = ", lens[b], " is outside [0, ", S, "]");
    }
  const std::vector<double> H0 = ctx.has_input(5) ? doubles(ctx.input(5)) : std::vector<double>(d.dirs * B * H, 0);
  const std::vector<double> C0 = cell == Cell::kLstm && ctx.has_input(6) ? doubles(ctx.input(6))
                                                                         : std::vector<double>(d.dirs * B * H, 0);
  const std::vector<double> P = cell == Cell::kLstm && ctx.has_input(7) ? doubles(ctx.input(7))
                                                                        : std::vector<double>(d.dirs * 3 * H, 0);
  const bool has_clip = ctx.has_attr("clip");
  const double clip = ctx.attr_float("clip", 0.f);
  const bool linear_before_reset = cell == Cell::kGru && ctx.attr_int("linear_before_reset", 0) != 0;
  const bool couple = cell == Cell::kLstm && ctx.attr_int("input_forget", 0) != 0;
  const std::string dir = ctx.attr_string("direction", "forward");
  // Activations per direction: f (and g, h); defaults Tanh for RNN, Sigmoid/Tanh(/Tanh) otherwise.
  const size_t per_dir = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3;
  std::vector<std::string> names = ctx.attr_strings("activations");
  if (names.empty())
    for (int64_t k = 0; k < d.dirs; ++k)
      for (size_t j = 0; j < per_dir; ++j) names.push_back(cell == Cell::kRnn || j > 0 ? "Tanh" : "Sigmoid");
  ONYX_CHECK(names.size() == per_dir * static_cast<size_t>(d.dirs), "activations names ", names.size(),
             " functions, the layer needs ", per_dir * d.dirs);
  const auto alphas = ctx.attr_floats("activation_alpha"), betas = ctx.attr_floats("activation_beta");
  std::vector<Activation> acts;
  for (size_t i = 0; i < names.size(); ++i) acts.push_back(make_activation(names[i], alphas, betas, i));
  auto clipped = [&](double v) { return has_clip ? std::clamp(v, -clip, clip) : v; };

  // Outputs in float64, in the [seq, dirs, batch, hidden] and [dirs, batch, hidden] layouts.
  std::vector<double> Y(static_cast<size_t>(S * d.dirs * B * H), 0), Yh(d.dirs * B * H), Yc(d.dirs * B * H);
  std::vector<double> gates(static_cast<size_t>(GH)), rec(static_cast<size_t>(GH)), hn(H);
  auto state_at = [&](const std::vector<double>& s, int64_t k, int64_t b, int64_t j) {
    return s[(d.batch_first ? (b * d.dirs + k) : (k * B + b)) * H + j];
  };
  for (int64_t k = 0; k < d.dirs; ++k) {
    const bool reverse = dir == "reverse" || k == 1;
    const double* Wb = Bias.data() + k * 2 * GH;
    const double* Rb = Wb + GH;
    const double* Pk = P.data() + k * 3 * H;
    const Activation& f = acts[k * per_dir];
    const Activation& g = per_dir > 1 ? acts[k * per_dir + 1] : f;
    const Activation& hh = per_dir > 2 ? acts[k * per_dir + 2] : f;
    const std::vector<double> xw = prod.input(k);  // [(t * B + b), GH]
    // Every row's state; each step takes the recurrent product of all rows at once (what a
    // quantized product quantizes together), then advances the rows still running.
    std::vector<double> hs(static_cast<size_t>(B * H)), cs(static_cast<size_t>(B * H));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) hs[b * H + j] = state_at(H0, k, b, j), cs[b * H + j] = state_at(C0, k, b, j);
    const int64_t longest = B > 0 ? *std::max_element(lens.begin(), lens.end()) : 0;
    for (int64_t step = 0; step < longest; ++step) {
      const std::vector<double> hr = prod.recurrent(k, hs);  // [b, GH]
      for (int64_t b = 0; b < B; ++b) {
        if (step >= lens[b]) continue;
        const int64_t t = reverse ? lens[b] - 1 - step : step;
        double* h = hs.data() + b * H;
        double* c = cs.data() + b * H;
        for (int64_t q = 0; q < GH; ++q) {
          gates[q] = Wb[q] + xw[(t * B + b) * GH + q];
          rec[q] = Rb[q] + hr[b * GH + q];
        }
        if (cell == Cell::kRnn) {
          for (int64_t j = 0; j < H; ++j) h[j] = f(clipped(gates[j] + rec[j]));
        } else if (cell == Cell::kGru) {  // gates z, r, h
          const double* Rk = prod.recurrent_weights->data() + k * GH * H;
          for (int64_t j = 0; j < H; ++j) {
            const double z = f(clipped(gates[j] + rec[j]));
            const double r = f(clipped(gates[H + j] + rec[H + j]));
            double cand;
            if (linear_before_reset) {
              cand = g(clipped(gates[2 * H + j] + r * rec[2 * H + j]));
            } else {
              double rh = Rb[2 * H + j];  // (r . h_prev) R_h^T + Rb_h
              for (int64_t m = 0; m < H; ++m) {
                const double rm = f(clipped(gates[H + m] + rec[H + m]));
                rh += rm * h[m] * Rk[(2 * H + j) * H + m];
              }
              cand = g(clipped(gates[2 * H + j] + rh));
            }
            hn[j] = (1 - z) * cand + z * h[j];
          }
          std::copy(hn.begin(), hn.end(), h);
        } else {  // gates i, o, f, c; peepholes i, o, f
          for (int64_t j = 0; j < H; ++j) {
            const double in = f(clipped(gates[j] + rec[j] + Pk[j] * c[j]));
            const double fg = couple ? 1 - in : f(clipped(gates[2 * H + j] + rec[2 * H + j] + Pk[2 * H + j] * c[j]));
            const double cand = g(clipped(gates[3 * H + j] + rec[3 * H + j]));
            c[j] = fg * c[j] + in * cand;
            const double o = f(clipped(gates[H + j] + rec[H + j] + Pk[H + j] * c[j]));
            h[j] = o * hh(c[j]);
          }
        }
        for (int64_t j = 0; j < H; ++j) Y[((t * d.dirs + k) * B + b) * H + j] = h[j];
      }
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) Yh[(k * B + b) * H + j] = hs[b * H + j], Yc[(k * B + b) * H + j] = cs[b * H + j];
  }
  auto store = [&](size_t o, const std::vector<double>& v, bool sequence) {
    if (!ctx.has_output(o)) return;
    Tensor& out = ctx.output(o);
    dispatch<FloatTypes>(out.dtype(), "output", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = out.data<T>();
      const int64_t outer = sequence ? S : 1;
      for (int64_t t = 0; t < outer; ++t)
        for (int64_t k = 0; k < d.dirs; ++k)
          for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < H; ++j) {
              const double v_at = v[((t * d.dirs + k) * B + b) * H + j];
              const int64_t at = d.batch_first ? (sequence ? ((b * S + t) * d.dirs + k) : (b * d.dirs + k))
                                               : ((t * d.dirs + k) * B + b);
              p[at * H + j] = static_cast<T>(static_cast<compute_t<T>>(v_at));
            }
    });
  };
  store(0, Y, true);
  store(1, Yh, false);
  if (cell == Cell::kLstm) store(2, Yc, false);
}

void rnn_kernel(KernelContext& ctx, Cell cell) {
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  const RnnDims d = rnn_dims(InferContext(ctx.node(), types, values), cell);
  run_recurrent(ctx, cell, d, float_products(d, gates_of(cell), ctx.input(0), ctx.input(1), ctx.input(2)));
}

}  // namespace

void check_rnn_state_inputs(const InferContext& ctx, const RnnDims& d, int64_t g, bool lstm) {
  if (ctx.has_input(3))
    ONYX_CHECK(ctx.input_concrete_shape(3) == Shape({d.dirs, 2 * g * d.hidden}), "B must be [", d.dirs, ", ",
               2 * g * d.hidden, "], got ", ctx.input_concrete_shape(3).str());
  if (ctx.has_input(4))
    ONYX_CHECK(ctx.input_concrete_shape(4) == Shape({d.batch}), "sequence_lens must be [", d.batch, "], got ",
               ctx.input_concrete_shape(4).str());
  const Shape state = d.batch_first ? Shape{d.batch, d.dirs, d.hidden} : Shape{d.dirs, d.batch, d.hidden};
  for (size_t i : {size_t{5}, size_t{6}})
    if (ctx.has_input(i) && (i == 5 || lstm))
      ONYX_CHECK(ctx.input_concrete_shape(i) == state, i == 5 ? "initial_h" : "initial_c", " must be ", state.str(),
                 ", got ", ctx.input_concrete_shape(i).str());
  if (lstm && ctx.has_input(7))
    ONYX_CHECK(ctx.input_concrete_shape(7) == Shape({d.dirs, 3 * d.hidden}), "P must be [", d.dirs, ", ",
               3 * d.hidden, "], got ", ctx.input_concrete_shape(7).str());
}

void run_lstm(KernelContext& ctx, const RnnDims& d, const RecurrentProducts& products) {
  run_recurrent(ctx, Cell::kLstm, d, products);
}

void register_rnn_ops(OpRegistry& r) {
  for (int since : {7, 14, 22}) {
    r.add(onnx_op("RNN", since, [](InferContext& c) { infer_rnn(c, Cell::kRnn); },
                  [](KernelContext& c) { rnn_kernel(c, Cell::kRnn); }));
    r.add(onnx_op("GRU", since, [](InferContext& c) { infer_rnn(c, Cell::kGru); },
                  [](KernelContext& c) { rnn_kernel(c, Cell::kGru); }));
    r.add(onnx_op("LSTM", since, [](InferContext& c) { infer_rnn(c, Cell::kLstm); },
                  [](KernelContext& c) { rnn_kernel(c, Cell::kLstm); }));
  }
}

}  // namespace onyx
