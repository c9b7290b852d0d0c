// com.microsoft GroupQueryAttention: the attention of onnxruntime-genai's decoders, with its
// KV cache in BNSH buffers that the caller may share between past and present. The geometry
// and the step's rows are ops/gqa.h's.
//
// Semantics, as onnxruntime's CPU kernel behaves (observed by running it):
// - Row b holds T_b = seqlens_k[b] + 1 tokens after this step. Its past length is
//   P_b = 0 on a first prompt (sequence_length == total_sequence_length), else T_b - S.
// - present has max(total_sequence_length, past length) positions. The S new keys and
//   values of row b go to positions [P_b, P_b + S). When present is past's own storage
//   (a shared buffer), only those positions are written; otherwise present is past's
//   positions followed by zeros, then the new entries, so both bindings leave the same
//   bytes at every position.
// - With sliding_window_cache=1, past and present are a window cache of past's capacity C
//   holding each row's most recent positions (ops/gqa.h, window_cache_held), P_b = T_b - S
//   always; after the step present's rows [0, held) hold positions [T_b - held, T_b) and its
//   other rows are past's.
// - Query s of row b is at position P_b + s. It attends to keys [lo, hi) with
//   hi = min(P_b + s + 1, T_b) (causal) or T_b (causal = 0), and lo = P_b + s + 1 -
//   local_window_size when a window is set. An empty range gives zeros.
// - Scores: q.k * scale, then softcap * tanh(x / softcap), then + attention_bias[b, h, s, key];
//   softmax, with exp(head_sink[h]) (or exp(0) for smooth_softmax) added to the denominator.
// - Rotary (do_rotary): queries and keys rotated at their positions, which are P_b + s, or
//   position_ids[b, s]; on a first prompt s, or position_ids[0, 0] + s, for every row.
// - query_seqlens (a right-padded chunk): row b's first query_seqlens[b] = Q_b tokens are real,
//   P_b = T_b - Q_b, only they are written to present, and the padding tokens' outputs are zeros.
// - Query head h reads KV head h / (num_heads / kv_num_heads).
// The kernel accumulates in double and rounds rotated values and outputs to the input type.
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/tensor_util.h"
#include "ops/attention_math.h"
#include "ops/common.h"
#include "ops/gqa.h"
#include "ops/rotate.h"

namespace onyx {

namespace {

using namespace gqa;

void infer_gqa(InferContext& ctx) {
  const GqaAttrs a = gqa_attrs(ctx);
  ONYX_CHECK(!ctx.has_output(3), "output 'output_qk' is not supported by onyx");
  ONYX_CHECK(ctx.num_inputs() > kTotalSeqLen, "GroupQueryAttention needs at least ", kTotalSeqLen + 1, " inputs");
  const PresentInputs p = present_inputs(ctx);
  check_gqa_dtypes(p.dtypes);
  const DType t = ctx.input_dtype(kQuery);
  if (!p.known) {
    for (size_t o = 0; o < 3; ++o)
      if (ctx.has_output(o)) ctx.set_output(o, t, PartialShape());
    return;
  }
  const GqaGeometry g = gqa_geometry(a, p.shape_ptrs);
  ctx.set_output(0, t, Shape{g.B, g.S, g.N * g.H});
  PartialShape present = PartialShape::of_rank(4);
  present.dims = {g.B, g.kvN, PartialShape::kUnknown, g.H};
  if (a.window_cache)
    present.dims[2] = g.past_len;
  else if (const Tensor* total = ctx.input_value(kTotalSeqLen))
    present.dims[2] = g.present_len(total->get_as_int64(0), a);
  for (size_t o : {1, 2})
    if (ctx.has_output(o)) ctx.set_output(o, t, present);
}

// Whether present is past itself (one buffer bound to both); throws when they overlap otherwise.
bool same_buffer(const Tensor& past, const Tensor& present, const char* name) {
  const char* p0 = static_cast<const char*>(past.raw());
  const char* q0 = static_cast<const char*>(present.raw());
  if (p0 == q0) {
    ONYX_CHECK(past.shape() == present.shape(), name, " shares past's buffer but has shape ", present.shape().str(),
               " instead of past's ", past.shape().str(), " (total_sequence_length exceeds the shared buffer)");
    return true;
  }
  ONYX_CHECK(q0 + present.bytes() <= p0 || p0 + past.bytes() <= q0, name,
             " partially overlaps its past input: it must be the same buffer or a separate one");
  return false;
}

template <class T>
void gqa_kernel(KernelContext& ctx) {
  const GqaAttrs a = gqa_attrs(ctx);
  ONYX_CHECK(!ctx.has_output(3), "output 'output_qk' is not supported by onyx");
  std::vector<const Shape*> in(ctx.num_inputs(), nullptr);
  std::vector<DType> dts(ctx.num_inputs(), DType::kUndefined);
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) {
      in[i] = &ctx.input(i).shape();
      dts[i] = ctx.input(i).dtype();
    }
  check_gqa_dtypes(dts);
  const GqaGeometry g = gqa_geometry(a, in);
  const int64_t B = g.B, S = g.S, N = g.N, kvN = g.kvN, H = g.H;
  const int64_t total = ctx.input(kTotalSeqLen).get_as_int64(0);
  const Tensor* bias = ctx.has_input(kAttentionBias) ? &ctx.input(kAttentionBias) : nullptr;
  const int32_t* query_seqlens = ctx.has_input(kQuerySeqlens) ? ctx.input(kQuerySeqlens).data<int32_t>() : nullptr;
  const GqaStep st =
      gqa_step(a, g, total, ctx.input(kSeqlensK).data<int32_t>(), query_seqlens, bias ? bias->shape()[3] : -1);
  const int64_t L = st.present_len;

  // The new queries, keys and values, as [B, heads, S, H].
  std::vector<T> q(static_cast<size_t>(B * N * S * H)), k(static_cast<size_t>(B * kvN * S * H)), v(k.size());
  {
    const T* pq = ctx.input(kQuery).data<T>();
    const int64_t qw = g.packed ? (N + 2 * kvN) * H : N * H;  // query's row width
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        const T* row = pq + (b * S + s) * qw;
        for (int64_t h = 0; h < N; ++h) std::memcpy(&q[((b * N + h) * S + s) * H], row + h * H, sizeof(T) * H);
        for (int64_t h = 0; h < kvN; ++h) {
          const T* kr = g.packed ? row + (N + h) * H : ctx.input(kKey).data<T>() + (b * S + s) * kvN * H + h * H;
          const T* vr =
              g.packed ? row + (N + kvN + h) * H : ctx.input(kValue).data<T>() + (b * S + s) * kvN * H + h * H;
          std::memcpy(&k[((b * kvN + h) * S + s) * H], kr, sizeof(T) * H);
          std::memcpy(&v[((b * kvN + h) * S + s) * H], vr, sizeof(T) * H);
        }
      }
  }

  if (a.rotary) {
    std::vector<int64_t> pos(static_cast<size_t>(B * S));
    const Tensor* pids = ctx.has_input(kPositionIds) ? &ctx.input(kPositionIds) : nullptr;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) {
        if (s >= st.rows[b].valid) {  // padding (query_seqlens): rotated at position 0, never read
          pos[b * S + s] = 0;
          continue;
        }
        int64_t p = st.first_prompt ? s : st.rows[b].past + s;
        if (pids) p = st.first_prompt ? pids->data<int64_t>()[0] + s : pids->data<int64_t>()[b * S + s];
        ONYX_CHECK(p >= 0 && p < g.cache_rows, "row ", b, " token ", s, " is at position ", p, ", outside cos_cache's ",
                   g.cache_rows, " positions");
        pos[b * S + s] = p;
      }
    const Tensor& cosc = ctx.input(kCosCache);
    const Tensor& sinc = ctx.input(kSinCache);
    auto cs = [&](int64_t b, int64_t s, int64_t j) {
      const int64_t i = pos[b * S + s] * g.half + j;
      return std::pair<double, double>{cosc.get_as_double(i), sinc.get_as_double(i)};
    };
    rotate(
        q.data(), q.data(), B, S, N, H, 2 * g.half, a.interleaved,
        [&](int64_t b, int64_t s, int64_t h) { return ((b * N + h) * S + s) * H; }, cs);
    rotate(
        k.data(), k.data(), B, S, kvN, H, 2 * g.half, a.interleaved,
        [&](int64_t b, int64_t s, int64_t h) { return ((b * kvN + h) * S + s) * H; }, cs);
  }

  // The present buffers start as past's bytes (unless they are past's own storage).
  const Shape present_shape{B, kvN, L, H};
  Tensor scratch[2];
  T* present[2];
  const T* past_kv[2] = {nullptr, nullptr};
  for (int i = 0; i < 2; ++i) {
    const size_t out = 1 + i;
    Tensor& pt = ctx.has_output(out) ? ctx.output(out) : (scratch[i] = Tensor(dtype_of<T>, present_shape));
    ONYX_CHECK(pt.shape() == present_shape, "present output has shape ", pt.shape().str(), ", expected ",
               present_shape.str());
    present[i] = pt.data<T>();
    const size_t past_in = i == 0 ? kPastKey : kPastValue;
    if (ctx.has_input(past_in)) past_kv[i] = ctx.input(past_in).data<T>();
    if (past_kv[i] && same_buffer(ctx.input(past_in), pt, i == 0 ? "present_key" : "present_value")) continue;
    std::fill(present[i], present[i] + present_shape.numel(), T{});
    if (!past_kv[i]) continue;
    for (int64_t bh = 0; bh < B * kvN; ++bh)
      std::memcpy(present[i] + bh * L * H, past_kv[i] + bh * g.past_len * H, sizeof(T) * g.past_len * H);
  }
  // Each row's keys and values by position: key position j of KV head h is row j - base of
  // k + h * count * H. Without a window cache that is present itself, with the new entries at
  // their positions; with one, the row's held past positions followed by the new ones, then
  // present's leading rows take the positions it keeps.
  struct Keys {
    const T* k;
    const T* v;
    int64_t count, base;
  };
  std::vector<Keys> keys(static_cast<size_t>(B));
  std::vector<std::vector<T>> window_k(a.window_cache ? B : 0), window_v(window_k.size());
  for (int64_t b = 0; b < B; ++b) {
    const GqaRow& r = st.rows[b];
    T* dst[2] = {present[0] + b * kvN * L * H, present[1] + b * kvN * L * H};
    const std::vector<T>* fresh[2] = {&k, &v};
    if (!a.window_cache) {
      for (int i = 0; i < 2; ++i)
        for (int64_t h = 0; h < kvN; ++h)
          std::memcpy(dst[i] + (h * L + r.past) * H, fresh[i]->data() + (b * kvN + h) * S * H, sizeof(T) * r.valid * H);
      keys[b] = {dst[0], dst[1], L, 0};
      continue;
    }
    const int64_t n = r.held_before + r.valid, base = r.past - r.held_before, keep = r.total - r.held_after - base;
    std::vector<T>* win[2] = {&window_k[b], &window_v[b]};
    for (int i = 0; i < 2; ++i) {
      win[i]->resize(static_cast<size_t>(kvN * n * H));
      for (int64_t h = 0; h < kvN; ++h) {
        T* w = win[i]->data() + h * n * H;
        std::memcpy(w, past_kv[i] + ((b * kvN + h) * g.past_len) * H, sizeof(T) * r.held_before * H);
        std::memcpy(w + r.held_before * H, fresh[i]->data() + (b * kvN + h) * S * H, sizeof(T) * r.valid * H);
      }
      // Read from this row's window, written after it was built: right when present is past.
      for (int64_t h = 0; h < kvN; ++h)
        std::memcpy(dst[i] + h * L * H, win[i]->data() + (h * n + keep) * H, sizeof(T) * r.held_after * H);
    }
    keys[b] = {window_k[b].data(), window_v[b].data(), n, base};
  }

  // Attention, one query at a time.
  const double scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(H));
  const Tensor* sink = ctx.has_input(kHeadSink) ? &ctx.input(kHeadSink) : nullptr;
  T* y = ctx.output(0).data<T>();
  const int64_t group = N / kvN;
  std::vector<double> score, acc(static_cast<size_t>(H));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < N; ++h) {
      const Keys& kb = keys[b];
      const T* kh = kb.k + (h / group) * kb.count * H;  // key position j is row j - kb.base
      const T* vh = kb.v + (h / group) * kb.count * H;
      // A sink is one more logit in the softmax that contributes no value.
      const double sink_logit = sink ? sink->get_as_double(h) : 0.0;
      const double* sink_ptr = a.smooth || sink ? &sink_logit : nullptr;
      for (int64_t s = 0; s < S; ++s) {
        const T* qs = &q[((b * N + h) * S + s) * H];
        const GqaRow& r = st.rows[b];
        T* ys = y + (b * S + s) * N * H + h * H;
        if (s >= r.valid) {  // a padding token of a right-padded chunk: zeros
          std::fill(ys, ys + H, static_cast<T>(0.0f));
          continue;
        }
        const int64_t causal_end = r.past + s + 1;
        const int64_t hi = a.causal ? std::min(causal_end, r.total) : r.total;
        const int64_t lo = std::min(hi, a.window > 0 ? std::max<int64_t>(0, causal_end - a.window) : 0);
        ONYX_ASSERT(lo >= kb.base && hi - kb.base <= kb.count, "row ", b, " reads keys [", lo, ", ", hi,
                    ") outside the positions held [", kb.base, ", ", kb.base + kb.count, ")");
        score.assign(static_cast<size_t>(hi - lo), 0.0);
        for (int64_t j = lo; j < hi; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < H; ++x)
            dot += static_cast<double>(static_cast<compute_t<T>>(qs[x])) *
                   static_cast<double>(static_cast<compute_t<T>>(kh[(j - kb.base) * H + x]));
          double sc = dot * scale;
          if (a.softcap > 0) sc = a.softcap * std::tanh(sc / a.softcap);
          if (bias) {
            const Shape& bs = bias->shape();
            const int64_t bi = (((bs[0] == 1 ? 0 : b) * bs[1] + (bs[1] == 1 ? 0 : h)) * S + s) * bs[3] + j;
            sc += bias->get_as_double(bi);
          }
          score[j - lo] = sc;
        }
        softmax_weighted_sum(
            score, hi > lo ? sink_ptr : nullptr, H,
            [&](int64_t j, int64_t x) {
              return static_cast<double>(static_cast<compute_t<T>>(vh[(lo - kb.base + j) * H + x]));
            },
            acc.data());
        for (int64_t x = 0; x < H; ++x) ys[x] = static_cast<T>(static_cast<compute_t<T>>(acc[x]));
      }
    }
}

}  // namespace

void register_group_query_attention_ops(OpRegistry& r) {
  r.add(domain_op("com.microsoft", "GroupQueryAttention", 1, infer_gqa, [](KernelContext& ctx) {
          dispatch<FloatTypes>(ctx.input(kQuery).dtype(), "GroupQueryAttention",
                               [&](auto tag) { gqa_kernel<typename decltype(tag)::type>(ctx); });
        })
            .reads_values({kTotalSeqLen})
            .may_update(1, 3)    // present_key: past_key itself, when bound to it (a shared buffer)
            .may_update(2, 4));  // present_value
}

}  // namespace onyx
