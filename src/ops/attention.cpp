// Attention (opset 23/24) and rotary position embeddings (ONNX RotaryEmbedding
// and com.microsoft RotaryEmbedding).
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/rotary.h"
#include "ops/rotate.h"

namespace onyx {

// The vectorized float32 kernel for the fused case (ops/attention_cpu.cpp); false: not that case.
bool attention_float_fast(KernelContext& ctx);

namespace {

// ---- Attention ----

// The sizes of one Attention call, from Q, K, V, past_key and the head attributes.
struct AttnDims {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, past = 0, head = 0, v_head = 0;
  int64_t total() const { return past + kv_seq; }
};

AttnDims attention_dims(const NodeView& node, const Shape& q, const Shape& k, const Shape& v, const Shape* past_key,
                        const Shape* past_value) {
  AttnDims d;
  ONYX_CHECK((q.rank() == 3 || q.rank() == 4) && k.rank() == q.rank() && v.rank() == q.rank(),
             "Q, K and V must all be 3-D or all 4-D, got ", q.str(), ", ", k.str(), ", ", v.str());
  d.batch = q[0];
  ONYX_CHECK(k[0] == d.batch && v[0] == d.batch, "Q, K and V have different batch sizes: ", q.str(), ", ", k.str(),
             ", ", v.str());
  if (q.rank() == 3) {
    d.three_d = true;
    ONYX_CHECK(node.has_attr("q_num_heads") && node.has_attr("kv_num_heads"),
               "3-D Q, K, V need the q_num_heads and kv_num_heads attributes");
    d.q_heads = node.attr_int("q_num_heads");
    d.kv_heads = node.attr_int("kv_num_heads");
    ONYX_CHECK(d.q_heads > 0 && d.kv_heads > 0, "num_heads must be positive");
    ONYX_CHECK(q[2] % d.q_heads == 0 && k[2] % d.kv_heads == 0 && v[2] % d.kv_heads == 0,
               "hidden sizes ", q[2], ", ", k[2], ", ", v[2], " do not divide into q_num_heads=", d.q_heads,
               " / kv_num_heads=", d.kv_heads, " heads");
    d.q_seq = q[1];
    d.kv_seq = k[1];
    d.head = q[2] / d.q_heads;
    ONYX_CHECK(k[2] / d.kv_heads == d.head, "Q head size ", d.head, " differs from K head size ", k[2] / d.kv_heads);
    d.v_head = v[2] / d.kv_heads;
    ONYX_CHECK(v[1] == d.kv_seq, "K and V sequence lengths differ: ", k.str(), " and ", v.str());
  } else {
    d.q_heads = q[1];
    d.kv_heads = k[1];
    d.q_seq = q[2];
    d.kv_seq = k[2];
    d.head = q[3];
    d.v_head = v[3];
    ONYX_CHECK(v[1] == d.kv_heads && v[2] == d.kv_seq, "K ", k.str(), " and V ", v.str(), " disagree");
    ONYX_CHECK(k[3] == d.head, "Q head size ", d.head, " differs from K head size ", k[3]);
  }
  ONYX_CHECK(d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, "q_num_heads ", d.q_heads,
             " is not a multiple of kv_num_heads ", d.kv_heads);
  ONYX_CHECK((past_key == nullptr) == (past_value == nullptr), "past_key and past_value must be given together");
  if (past_key) {
    const Shape& pk = *past_key;
    const Shape& pv = *past_value;
    ONYX_CHECK(pk.rank() == 4 && pk[0] == d.batch && pk[1] == d.kv_heads && pk[3] == d.head, "past_key of shape ",
               pk.str(), " does not match batch ", d.batch, ", ", d.kv_heads, " heads of size ", d.head);
    ONYX_CHECK(pv.rank() == 4 && pv[0] == d.batch && pv[1] == d.kv_heads && pv[2] == pk[2] && pv[3] == d.v_head,
               "past_value of shape ", pv.str(), " does not match past_key ", pk.str(), " and V head size ",
               d.v_head);
    d.past = pk[2];
  }
  return d;
}

void infer_attention(InferContext& ctx) {
  DType dt = ctx.input_dtype(0);
  bool known = true;
  for (size_t i : {0, 1, 2, 4, 5})
    if (ctx.has_input(i)) known &= ctx.input_shape(i).fully_known();
  if (!known) {
    for (size_t o = 0; o < 4; ++o)
      if (ctx.has_output(o)) ctx.set_output(o, dt, PartialShape());
    return;
  }
  Shape pk, pv;
  if (ctx.has_input(4)) pk = ctx.input_concrete_shape(4);
  if (ctx.has_input(5)) pv = ctx.input_concrete_shape(5);
  AttnDims d = attention_dims(ctx, ctx.input_concrete_shape(0), ctx.input_concrete_shape(1),
                              ctx.input_concrete_shape(2), ctx.has_input(4) ? &pk : nullptr,
                              ctx.has_input(5) ? &pv : nullptr);
  if (d.three_d) ctx.set_output(0, dt, Shape{d.batch, d.q_seq, d.q_heads * d.v_head});
  else ctx.set_output(0, dt, Shape{d.batch, d.q_heads, d.q_seq, d.v_head});
  if (ctx.has_output(1)) ctx.set_output(1, dt, Shape{d.batch, d.kv_heads, d.total(), d.head});
  if (ctx.has_output(2)) ctx.set_output(2, dt, Shape{d.batch, d.kv_heads, d.total(), d.v_head});
  if (ctx.has_output(3)) ctx.set_output(3, dt, Shape{d.batch, d.q_heads, d.q_seq, d.total()});
}

// Copies a 3-D [B, S, H*D] or 4-D [B, H, S, D] tensor into a [B, H, S, D] buffer.
template <class T, class C>
void to_bhsd(const Tensor& t, int64_t heads, std::vector<C>& out, int64_t seq_offset, int64_t total_seq) {
  const T* p = t.data<T>();
  const Shape& s = t.shape();
  const int64_t b = s[0];
  const bool three = s.rank() == 3;
  const int64_t seq = three ? s[1] : s[2];
  const int64_t dim = three ? s[2] / heads : s[3];
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q = 0; q < seq; ++q)
        for (int64_t x = 0; x < dim; ++x) {
          int64_t src = three ? ((i * seq + q) * heads + h) * dim + x : ((i * heads + h) * seq + q) * dim + x;
          out[((i * heads + h) * total_seq + seq_offset + q) * dim + x] = static_cast<C>(p[src]);
        }
}

template <class T>
void attention_kernel(KernelContext& ctx) {
  if constexpr (std::is_same_v<T, float>)
    if (attention_float_fast(ctx)) return;
  using C = compute_t<T>;
  const Tensor& q = ctx.input(0);
  const Tensor& k = ctx.input(1);
  const Tensor& v = ctx.input(2);
  for (size_t i : {1, 2, 4, 5})
    if (ctx.has_input(i))
      ONYX_CHECK(ctx.input(i).dtype() == q.dtype(), "input ", i, " has dtype ", dtype_name(ctx.input(i).dtype()),
                 ", Q has ", dtype_name(q.dtype()));
  const Shape* pk_shape = ctx.has_input(4) ? &ctx.input(4).shape() : nullptr;
  const Shape* pv_shape = ctx.has_input(5) ? &ctx.input(5).shape() : nullptr;
  const AttnDims d = attention_dims(ctx, q.shape(), k.shape(), v.shape(), pk_shape, pv_shape);
  const int64_t B = d.batch, Hq = d.q_heads, Hkv = d.kv_heads, Sq = d.q_seq, T_ = d.total(), D = d.head,
                Dv = d.v_head;

  std::vector<C> qb(static_cast<size_t>(B * Hq * Sq * D));
  to_bhsd<T, C>(q, Hq, qb, 0, Sq);
  // K and V with the past prepended: the present key/value.
  std::vector<C> kb(static_cast<size_t>(B * Hkv * T_ * D)), vb(static_cast<size_t>(B * Hkv * T_ * Dv));
  if (d.past) {
    to_bhsd<T, C>(ctx.input(4), Hkv, kb, 0, T_);
    to_bhsd<T, C>(ctx.input(5), Hkv, vb, 0, T_);
  }
  to_bhsd<T, C>(k, Hkv, kb, d.past, T_);
  to_bhsd<T, C>(v, Hkv, vb, d.past, T_);
  if (ctx.has_output(1)) {
    T* p = ctx.output(1).data<T>();
    for (size_t i = 0; i < kb.size(); ++i) p[i] = static_cast<T>(kb[i]);
  }
  if (ctx.has_output(2)) {
    T* p = ctx.output(2).data<T>();
    for (size_t i = 0; i < vb.size(); ++i) p[i] = static_cast<T>(vb[i]);
  }

  // The mask, right-aligned against [B, Hq, Sq, mask_len]; columns past mask_len are masked out.
  const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  std::array<int64_t, 4> mstride{0, 0, 0, 0};
  int64_t mask_len = T_;
  if (mask) {
    const Shape& ms = mask->shape();
    ONYX_CHECK(mask->dtype() == DType::kBool || mask->dtype() == q.dtype(), "attn_mask must be bool or ",
               dtype_name(q.dtype()), ", got ", dtype_name(mask->dtype()));
    ONYX_CHECK(ms.rank() >= 1 && ms.rank() <= 4, "attn_mask must have rank 1 to 4, got ", ms.str());
    mask_len = ms[ms.rank() - 1];
    ONYX_CHECK(mask_len <= T_, "attn_mask's last dimension ", mask_len, " exceeds the total sequence length ", T_);
    const std::array<int64_t, 4> full{B, Hq, Sq, mask_len};
    int64_t acc = 1;
    for (size_t i = 0; i < ms.rank(); ++i) {
      size_t ax = 4 - ms.rank() + (ms.rank() - 1 - i);
      int64_t dim = ms[ms.rank() - 1 - i];
      ONYX_CHECK(dim == full[ax] || dim == 1, "attn_mask of shape ", ms.str(), " does not broadcast to [", B, ",",
                 Hq, ",", Sq, ",", mask_len, "]");
      mstride[ax] = dim == 1 ? 0 : acc;
      acc *= dim;
    }
  }
  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    nonpad = ctx.input(6).to_int64_vector();
    ONYX_CHECK(static_cast<int64_t>(nonpad.size()) == B, "nonpad_kv_seqlen must hold ", B, " values, got ",
               nonpad.size());
  }

  const bool causal = ctx.attr_int("is_causal", 0) != 0;
  const double scale = ctx.has_attr("scale") ? ctx.attr_float("scale", 1.f) : 1.0 / std::sqrt(static_cast<double>(D));
  const double softcap = ctx.attr_float("softcap", 0.f);
  const int64_t mode = ctx.attr_int("qk_matmul_output_mode", 0);
  const bool zero_nan = ctx.attr_int("onyx_zero_masked_rows", 0) != 0;
  ONYX_CHECK(mode >= 0 && mode <= 3, "qk_matmul_output_mode must be 0..3, got ", mode);
  T* qk_out = ctx.has_output(3) ? ctx.output(3).data<T>() : nullptr;
  T* y = ctx.output(0).data<T>();
  const C neg_inf = -std::numeric_limits<C>::infinity();
  const int64_t group = Hq / Hkv;
  std::vector<C> s(static_cast<size_t>(T_));
  std::vector<double> acc(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;  // GQA: consecutive query heads share a KV head
      const C* kh = kb.data() + (b * Hkv + hk) * T_ * D;
      const C* vh = vb.data() + (b * Hkv + hk) * T_ * Dv;
      for (int64_t i = 0; i < Sq; ++i) {
        const C* qi = qb.data() + ((b * Hq + h) * Sq + i) * D;
        T* qk_row = qk_out ? qk_out + ((b * Hq + h) * Sq + i) * T_ : nullptr;
        for (int64_t j = 0; j < T_; ++j) {
          C dot = 0;
          for (int64_t x = 0; x < D; ++x) dot += qi[x] * kh[j * D + x];
          C v0 = static_cast<C>(dot * scale);
          if (qk_row && mode == 0) qk_row[j] = static_cast<T>(v0);
          if (softcap > 0) v0 = static_cast<C>(softcap * std::tanh(v0 / softcap));
          if (qk_row && mode == 1) qk_row[j] = static_cast<T>(v0);
          C bias = 0;
          if (mask) {
            if (j >= mask_len) {
              bias = neg_inf;
            } else {
              int64_t mi = b * mstride[0] + h * mstride[1] + i * mstride[2] + j * mstride[3];
              if (mask->dtype() == DType::kBool) bias = mask->data<bool>()[mi] ? C(0) : neg_inf;
              else bias = static_cast<C>(mask->data<T>()[mi]);
            }
          }
          if (causal && j > i + d.past) bias = neg_inf;
          if (!nonpad.empty() && j >= nonpad[b]) bias = neg_inf;
          s[j] = v0 + bias;
          if (qk_row && mode == 2) qk_row[j] = static_cast<T>(s[j]);
        }
        C mx = neg_inf;
        for (int64_t j = 0; j < T_; ++j) mx = std::max(mx, s[j]);
        double sum = 0;
        for (int64_t j = 0; j < T_; ++j) {
          s[j] = static_cast<C>(std::exp(static_cast<double>(s[j]) - static_cast<double>(mx)));
          sum += s[j];
        }
        for (int64_t j = 0; j < T_; ++j) {
          s[j] = static_cast<C>(s[j] / sum);
          // The fused form of torch's scaled_dot_product_attention: a row whose every key is
          // masked (NaN) has zero weights (onyx_zero_masked_rows; ONNX's own Attention gives NaN).
          if (zero_nan && std::isnan(static_cast<double>(s[j]))) s[j] = C(0);
          if (qk_row && mode == 3) qk_row[j] = static_cast<T>(s[j]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < T_; ++j)
          for (int64_t x = 0; x < Dv; ++x) acc[x] += static_cast<double>(s[j]) * vh[j * Dv + x];
        for (int64_t x = 0; x < Dv; ++x) {
          int64_t o = d.three_d ? (b * Sq + i) * Hq * Dv + h * Dv + x : ((b * Hq + h) * Sq + i) * Dv + x;
          y[o] = static_cast<T>(static_cast<C>(acc[x]));
        }
      }
    }
}

// ---- RotaryEmbedding ----

// ONNX RotaryEmbedding-23 (geometry in ops/rotary.h).
template <class T>
void rotary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& cosc = ctx.input(1);
  const Tensor& sinc = ctx.input(2);
  const Tensor* pids = ctx.has_input(3) ? &ctx.input(3) : nullptr;
  const RotaryGeometry g = onnx_rotary_geometry(ctx, x.shape(), cosc.shape(), sinc.shape(), pids ? &pids->shape() : nullptr);
  std::vector<int64_t> pos;
  if (pids) {
    pos = pids->to_int64_vector();
    for (int64_t v : pos)
      ONYX_CHECK(v >= 0 && v < g.cache_rows, "position id ", v, " is outside the cache of ", g.cache_rows, " positions");
  }
  const int64_t S = g.S, H = g.H, D = g.D, half = g.half;
  auto cs = [&](int64_t b, int64_t s, int64_t j) {
    int64_t row = pos.empty() ? (g.cache_batch1 ? 0 : b) * S + s : pos[b * S + s];
    return std::pair<double, double>{cosc.get_as_double(row * half + j), sinc.get_as_double(row * half + j)};
  };
  auto xoff = [&](int64_t b, int64_t s, int64_t h) {
    return g.bhsd ? ((b * H + h) * S + s) * D : ((b * S + s) * H + h) * D;
  };
  rotate(x.data<T>(), ctx.output(0).data<T>(), g.B, S, H, D, g.rot, g.interleaved, xoff, cs);
}

// com.microsoft RotaryEmbedding (geometry in ops/rotary.h).
template <class T>
void ms_rotary_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& pids = ctx.input(1);
  const Tensor& cosc = ctx.input(2);
  const Tensor& sinc = ctx.input(3);
  const RotaryGeometry g = ms_rotary_geometry(ctx, x.shape(), pids.shape(), cosc.shape(), sinc.shape());
  const std::vector<int64_t> pos = pids.to_int64_vector();
  const int64_t S = g.S, H = g.H, D = g.D, half = g.half;
  auto position = [&](int64_t b, int64_t s) { return pos.size() == 1 ? pos[0] + s : pos[b * S + s]; };
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      int64_t p = position(b, s);
      ONYX_CHECK(p >= 0 && p < g.cache_rows, "position ", p, " is outside the cache of ", g.cache_rows, " positions");
    }
  auto cs = [&](int64_t b, int64_t s, int64_t j) {
    int64_t row = position(b, s);
    return std::pair<double, double>{cosc.get_as_double(row * half + j), sinc.get_as_double(row * half + j)};
  };
  auto xoff = [&](int64_t b, int64_t s, int64_t h) { return ((b * S + s) * H + h) * D; };
  rotate(x.data<T>(), ctx.output(0).data<T>(), g.B, S, H, D, g.rot, g.interleaved, xoff, cs);
}

// Output like the input; the geometry is checked here, while planning, when the shapes are known.
void infer_rotary(InferContext& ctx, bool ms) {
  infer_same_as_input(ctx);
  const size_t first_cache = ms ? 2 : 1;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && !ctx.input_shape(i).fully_known()) return;
  ONYX_CHECK(ctx.num_inputs() > first_cache + 1, "RotaryEmbedding needs its cos and sin caches");
  const Shape x = ctx.input_concrete_shape(0);
  const Shape cos = ctx.input_concrete_shape(first_cache), sin = ctx.input_concrete_shape(first_cache + 1);
  if (ms) {
    ms_rotary_geometry(ctx, x, ctx.input_concrete_shape(1), cos, sin);
  } else {
    Shape pos;
    if (ctx.has_input(3)) pos = ctx.input_concrete_shape(3);
    onnx_rotary_geometry(ctx, x, cos, sin, ctx.has_input(3) ? &pos : nullptr);
  }
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  r.add(onnx_op("Attention", 23, infer_attention,
              [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "Attention", [&](auto tag) {
                  attention_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(onnx_op("RotaryEmbedding", 23, [](InferContext& ctx) { infer_rotary(ctx, false); },
              [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "RotaryEmbedding", [&](auto tag) {
                  rotary_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(domain_op("com.microsoft", "RotaryEmbedding", 1, [](InferContext& ctx) { infer_rotary(ctx, true); },
              [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "RotaryEmbedding", [&](auto tag) {
                  ms_rotary_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
}

}  // namespace onyx
