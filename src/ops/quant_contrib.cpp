// The com.microsoft ops that onnxruntime's quantize_dynamic (and Optimum's default dynamic
// quantization) makes of a model's embedding and recurrent layers:
//
//   QEmbedLayerNormalization: EmbedLayerNormalization with 8-bit embedding tables, gamma and
//     beta (per-tensor scales and zero points). Each looked-up element is dequantized as it is
//     read, so the tables stay 8-bit in memory.
//   DynamicQuantizeLSTM: LSTM with 8-bit W [dirs, input, 4*hidden] and R [dirs, hidden,
//     4*hidden] (transposed against LSTM's; scales per direction or per direction and gate
//     column), its products in integers on activations quantized on the fly; the cell is
//     LSTM's (ops/rnn.h).
#include <cmath>

#include "ops/common.h"
#include "ops/quantize.h"
#include "ops/rnn.h"

namespace onyx {

namespace {

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// A per-tensor (scale, zero point) pair given as inputs s and z.
struct Dequant {
  double scale = 1;
  int64_t zero = 0;
  double operator()(const Tensor& q, int64_t i) const {
    return static_cast<double>(static_cast<float>(static_cast<double>(q.get_as_int64(i) - zero) * scale));
  }
};

Dequant per_tensor(const KernelContext& ctx, size_t s, size_t z, const char* what) {
  ONYX_CHECK(ctx.has_input(s) && ctx.has_input(z), what, " needs its scale (input ", s, ") and zero point (input ", z, ")");
  const Tensor& st = ctx.input(s);
  const Tensor& zt = ctx.input(z);
  ONYX_CHECK(st.numel() == 1 && dtype_is_float(st.dtype()), what, "'s scale must be one floating value, got ",
             st.type_str());
  ONYX_CHECK(zt.numel() == 1, what, "'s zero point must be one value, got ", zt.type_str());
  Dequant d{static_cast<float>(st.get_as_double(0)), zt.get_as_int64(0)};
  ONYX_CHECK(d.scale > 0 && std::isfinite(d.scale), what, "'s scale must be positive, got ", d.scale);
  return d;
}

// ---- QEmbedLayerNormalization(input_ids, segment_ids?, word, position, segment?, gamma, beta,
//      mask?, 5 scales, 5 zero points) -> (output, mask_index) ----

void infer_qembed(InferContext& ctx) {
  const Shape ids = ctx.input_concrete_shape(0), word = ctx.input_concrete_shape(2);
  ONYX_CHECK(ids.rank() == 2, "input_ids must be [batch, tokens], got ", ids.str());
  ONYX_CHECK(word.rank() == 2, "word_embedding must be [vocabulary, hidden], got ", word.str());
  for (size_t i : {2u, 3u, 5u, 6u})
    ONYX_CHECK(is_8bit(ctx.input_dtype(i)), "input ", i, " must be int8 or uint8, got ", dtype_name(ctx.input_dtype(i)));
  ctx.set_output(0, DType::kFloat32, Shape{ids[0], ids[1], word[1]});
  if (ctx.has_output(1)) ctx.set_output(1, DType::kInt32, Shape{ids[0]});
}

void qembed_kernel(KernelContext& ctx) {
  const Tensor& ids = ctx.input(0);
  const Tensor& word = ctx.input(2);
  const Tensor& pos = ctx.input(3);
  const Tensor& gamma = ctx.input(5);
  const Tensor& beta = ctx.input(6);
  const int64_t B = ids.shape()[0], S = ids.shape()[1], H = word.shape()[1];
  const bool segments = ctx.has_input(1);
  ONYX_CHECK(!segments || ctx.has_input(4), "segment_ids are given without segment_embedding");
  const Dequant dw = per_tensor(ctx, 8, 13, "word_embedding"), dp = per_tensor(ctx, 9, 14, "position_embedding"),
                dg = per_tensor(ctx, 11, 16, "gamma"), db = per_tensor(ctx, 12, 17, "beta");
  const Dequant ds = segments ? per_tensor(ctx, 10, 15, "segment_embedding") : Dequant{};
  ONYX_CHECK(gamma.numel() == H && beta.numel() == H, "gamma and beta must be [", H, "], got ", gamma.type_str(),
             " and ", beta.type_str());
  auto row_of = [&](const Tensor& table, int64_t id, const char* what) {
    ONYX_CHECK(table.rank() == 2 && table.shape()[1] == H, what, " must be [rows, ", H, "], got ", table.type_str());
    ONYX_CHECK(id >= 0 && id < table.shape()[0], what, " has no row ", id, " (", table.shape()[0], " rows)");
    return id * H;
  };
  const double eps = ctx.attr_float("epsilon", 1e-12f);
  std::vector<double> sum(static_cast<size_t>(H));
  float* y = ctx.output(0).data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t at = b * S + s;
      const int64_t w = row_of(word, ids.get_as_int64(at), "word_embedding");
      const int64_t p = row_of(pos, s, "position_embedding");
      const int64_t g = segments ? row_of(ctx.input(4), ctx.input(1).get_as_int64(at), "segment_embedding") : -1;
      double mean = 0, var = 0;
      for (int64_t h = 0; h < H; ++h) {
        sum[h] = dw(word, w + h) + dp(pos, p + h) + (g >= 0 ? ds(ctx.input(4), g + h) : 0.0);
        mean += sum[h];
      }
      mean /= static_cast<double>(H);
      for (int64_t h = 0; h < H; ++h) var += (sum[h] - mean) * (sum[h] - mean);
      const double inv = 1 / std::sqrt(var / static_cast<double>(H) + eps);
      for (int64_t h = 0; h < H; ++h)
        y[at * H + h] = static_cast<float>((sum[h] - mean) * inv * dg(gamma, h) + db(beta, h));
    }
  // mask_index: each row's count of ones in the mask (onnxruntime counts the elements equal
  // to 1); zeros without a mask.
  if (ctx.has_output(1))
    for (int64_t b = 0; b < B; ++b) {
      int32_t count = 0;
      for (int64_t s = 0; s < S && ctx.has_input(7); ++s) count += ctx.input(7).get_as_int64(b * S + s) == 1;
      ctx.output(1).data<int32_t>()[b] = count;
    }
}

// ---- DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale,
//      W_zero_point, R_scale, R_zero_point) -> (Y, Y_h, Y_c) ----
//
// Each product quantizes its activations as DynamicQuantizeLinear does (uint8, the range of
// the values and 0): X once, over every step and row, for the input product; the rows' h at
// each step for the recurrent one. It then accumulates (q_a - z_a)(q_w - z_w) in integers and
// scales by a_scale * w_scale in float, as onnxruntime does when it runs the node on one
// thread (on more, it quantizes h in groups of rows, one group per thread: its outputs move
// by about a quantization step with its thread count).

RnnDims dq_lstm_dims(const InferContext& ctx) {
  ONYX_CHECK(ctx.num_inputs() >= 12, "takes 12 inputs (the last four W's and R's scales and zero points), got ",
             ctx.num_inputs());
  const Shape x = ctx.input_concrete_shape(0), w = ctx.input_concrete_shape(1), r = ctx.input_concrete_shape(2);
  ONYX_CHECK(x.rank() == 3, "X must be [seq, batch, input], got ", x.str());
  const std::string dir = ctx.attr_string("direction", "forward");
  ONYX_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional",
             "direction must be forward, reverse or bidirectional, got \"", dir, "\"");
  RnnDims d{x[0], x[1], x[2], 0, dir == "bidirectional" ? 2 : 1, false};
  ONYX_CHECK(w.rank() == 3 && w[0] == d.dirs && w[1] == d.input && w[2] % 4 == 0, "W must be [", d.dirs, ", ",
             d.input, ", 4 * hidden_size], got ", w.str());
  d.hidden = w[2] / 4;
  ONYX_CHECK(ctx.attr_int("hidden_size", d.hidden) == d.hidden, "hidden_size ", ctx.attr_int("hidden_size", 0),
             " differs from W's ", d.hidden);
  ONYX_CHECK(r == Shape({d.dirs, d.hidden, 4 * d.hidden}), "R must be [", d.dirs, ", ", d.hidden, ", ",
             4 * d.hidden, "], got ", r.str());
  check_rnn_state_inputs(ctx, d, 4, true);
  return d;
}

void infer_dq_lstm(InferContext& ctx) {
  const RnnDims d = dq_lstm_dims(ctx);
  ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32, "X must be float32, got ", dtype_name(ctx.input_dtype(0)));
  for (size_t i : {1u, 2u})
    ONYX_CHECK(is_8bit(ctx.input_dtype(i)), i == 1 ? "W" : "R", " must be int8 or uint8, got ",
               dtype_name(ctx.input_dtype(i)));
  if (ctx.has_output(0)) ctx.set_output(0, DType::kFloat32, Shape{d.seq, d.dirs, d.batch, d.hidden});
  for (size_t o : {1u, 2u})
    if (ctx.has_output(o)) ctx.set_output(o, DType::kFloat32, Shape{d.dirs, d.batch, d.hidden});
}

// An 8-bit weight [dirs, K, N] with its scale and zero point per direction ([dirs]) or per
// direction and column ([dirs, N]), as int32 codes less their zero points.
struct QuantWeight {
  int64_t K = 0, N = 0;
  std::vector<int32_t> codes;   // [dirs, K, N], zero point subtracted
  std::vector<float> scales;    // [dirs, N]
};

QuantWeight quant_weight(const KernelContext& ctx, size_t w, size_t s, size_t z, const char* what) {
  const Tensor& q = ctx.input(w);
  const Tensor& scale = ctx.input(s);
  const Tensor& zero = ctx.input(z);
  const int64_t D = q.shape()[0], K = q.shape()[1], N = q.shape()[2];
  const bool per_column = scale.rank() == 2;
  ONYX_CHECK(scale.shape() == (per_column ? Shape{D, N} : Shape{D}) && dtype_is_float(scale.dtype()), what,
             "'s scale must be float [", D, "] or [", D, ", ", N, "], got ", scale.type_str());
  ONYX_CHECK(zero.shape() == scale.shape() && zero.dtype() == q.dtype(), what, "'s zero point must be ",
             dtype_name(q.dtype()), scale.shape().str(), " like its scale, got ", zero.type_str());
  QuantWeight qw;
  qw.K = K;
  qw.N = N;
  qw.codes.resize(static_cast<size_t>(D * K * N));
  qw.scales.resize(static_cast<size_t>(D * N));
  for (int64_t d = 0; d < D; ++d)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t at = per_column ? d * N + n : d;
      qw.scales[d * N + n] = static_cast<float>(scale.get_as_double(at));
      const int64_t zp = zero.get_as_int64(at);
      for (int64_t k = 0; k < K; ++k)
        qw.codes[(d * K + k) * N + n] = static_cast<int32_t>(q.get_as_int64((d * K + k) * N + n) - zp);
    }
  return qw;
}

// rows x [K] (float values) times direction k's weight: [rows, N], the activations quantized
// together to uint8 first.
std::vector<double> quantized_product(const std::vector<float>& a, int64_t rows, const QuantWeight& w, int64_t k) {
  std::vector<double> out(static_cast<size_t>(rows * w.N), 0.0);
  const DynamicQuantParams p = dynamic_quant_params(a.data(), static_cast<int64_t>(a.size()));
  std::vector<uint8_t> q(a.size());
  dynamic_quantize(a.data(), static_cast<int64_t>(a.size()), p, q.data());
  const int32_t* wk = w.codes.data() + k * w.K * w.N;
  const float* sk = w.scales.data() + k * w.N;
  std::vector<int64_t> acc(static_cast<size_t>(w.N));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(acc.begin(), acc.end(), 0);
    for (int64_t i = 0; i < w.K; ++i) {
      const int64_t qa = static_cast<int64_t>(q[r * w.K + i]) - p.zero_point;
      if (qa == 0) continue;
      for (int64_t n = 0; n < w.N; ++n) acc[n] += qa * wk[i * w.N + n];
    }
    for (int64_t n = 0; n < w.N; ++n)
      out[r * w.N + n] = static_cast<float>(static_cast<float>(acc[n]) * static_cast<float>(p.scale * sk[n]));
  }
  return out;
}

void dq_lstm_kernel(KernelContext& ctx) {
  std::vector<ValueType> types;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? ValueType{ctx.input(i).dtype(), ctx.input(i).shape()} : ValueType{});
    values.push_back(ctx.has_input(i) ? &ctx.input(i) : nullptr);
  }
  const RnnDims d = dq_lstm_dims(InferContext(ctx.node(), types, values));
  auto W = std::make_shared<QuantWeight>(quant_weight(ctx, 1, 8, 9, "W"));
  auto R = std::make_shared<QuantWeight>(quant_weight(ctx, 2, 10, 11, "R"));
  const Tensor& x = ctx.input(0);
  auto X = std::make_shared<std::vector<float>>(x.data<float>(), x.data<float>() + x.numel());
  RecurrentProducts p;
  p.input = [=](int64_t k) { return quantized_product(*X, d.seq * d.batch, *W, k); };
  p.recurrent = [=](int64_t k, const std::vector<double>& h) {
    const std::vector<float> hf(h.begin(), h.end());  // the state as onnxruntime keeps it, in float
    return quantized_product(hf, d.batch, *R, k);
  };
  run_lstm(ctx, d, p);
}

}  // namespace

void register_quant_contrib_ops(OpRegistry& r) {
  const std::string ms = "com.microsoft";
  r.add(domain_op(ms, "QEmbedLayerNormalization", 1, infer_qembed, qembed_kernel));
  r.add(domain_op(ms, "DynamicQuantizeLSTM", 1, infer_dq_lstm, dq_lstm_kernel));
}

}  // namespace onyx
