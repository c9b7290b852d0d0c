// onyx::RotaryCache, what the rotary-cache fusion (passes/fuse_rotary_cache.h) puts in place of a
// layer's rotary embeddings and cache writes: one node, so one CUDA kernel per layer, instead of
// two RotaryHalf and two Concat (or CacheUpdate) nodes.
//
//   onyx::RotaryCache(q, k, v, cos, sin, past_k, past_v, index?; split)
//     -> (q_rot, present_k, present_v, k_rot?)
//   q_rot = RotaryHalf(q, cos, sin; split), k_rot = RotaryHalf(k, cos, sin; split) (fused_ops.cpp)
//   without index: present_k = Concat(past_k, k_rot, axis 2), present_v = Concat(past_v, v, axis 2)
//   with index:    present_k = CacheUpdate(past_k, k_rot, index), present_v = CacheUpdate(past_v, v,
//                  index) (genai_ops.cpp): the new entries written at [index, index + S) of a cache
//                  of fixed capacity, in place when present is bound to the past it updates
//   q, k, v, past_k and past_v are 4-D [batch, heads, positions, head size]; every float input has
//   one dtype; output 3 (the rotated new keys on their own) is made only where it is asked for.
//
// This kernel is the specification: each output computed element by element as the ops it
// replaces compute it, in the compute type (float for float16/bfloat16) with one rounding.
//
// onyx::RotaryCacheAttention, what the rotary-attention fusion (passes/fuse_rotary_cache.h) makes
// of a RotaryCache with an index and the Attention that reads its three outputs, so that a decode
// step's rotary embeddings, cache writes and attention are one CUDA kernel:
//
//   onyx::RotaryCacheAttention(q, k, v, cos, sin, past_k, past_v, index, attn_mask?; split, scale?,
//                              onyx_zero_masked_rows?)
//     -> (q_rot, present_k, present_v, y)
//   (q_rot, present_k, present_v) = RotaryCache(q, k, v, cos, sin, past_k, past_v, index; split)
//   y = Attention(q_rot, present_k, present_v, attn_mask; scale, onyx_zero_masked_rows) (opset 23,
//   ONNX's definition; with onyx_zero_masked_rows=1 a row whose every key is masked is zeros)
//
// Its CPU kernel runs the two ops' own kernels in turn; so does its CUDA kernel where the fused
// one does not apply.
#include <algorithm>

#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/registry.h"

namespace onyx {

namespace {

constexpr size_t kQ = 0, kK = 1, kV = 2, kCos = 3, kSin = 4, kPastK = 5, kPastV = 6, kIndex = 7;

bool has_index(const NodeView& n) { return n.has_input(kIndex); }

void check_rank4(const PartialShape& s, const char* what) {
  ONYX_CHECK(!s.rank_known || s.dims.size() == 4, what, " must be 4-D [batch, heads, positions, head size], got ",
             s.str());
}

// cos and sin: one shape, ending in x's last dimension and broadcasting onto x (as RotaryHalf).
void check_tables(const Shape& x, const Shape& cos, const Shape& sin, const char* what) {
  ONYX_CHECK(cos == sin, "cos ", cos.str(), " and sin ", sin.str(), " must have one shape");
  const int64_t d = x[x.rank() - 1];
  ONYX_CHECK(cos.rank() >= 1 && cos.rank() <= x.rank() && cos[cos.rank() - 1] == d, "cos ", cos.str(),
             " must end in ", what, "'s last dimension ", d, " and have at most its rank (", what, " is ", x.str(), ")");
  const size_t off = x.rank() - cos.rank();
  for (size_t i = 0; i < cos.rank(); ++i)
    ONYX_CHECK(cos[i] == 1 || cos[i] == x[off + i], "cos ", cos.str(), " does not broadcast to ", what, " ", x.str());
}

// present's shape: the new entries' (k or v) with the past's positions added (Concat), or the
// cache's own (with an index); checks that the two agree off the positions axis.
PartialShape present_shape(const PartialShape& past, const PartialShape& fresh, bool indexed, const char* what) {
  if (!past.rank_known || !fresh.rank_known) return indexed ? past : PartialShape();
  PartialShape out = past;
  for (size_t a = 0; a < 4; ++a) {
    if (a == 2) continue;
    const int64_t p = past.dims[a], f = fresh.dims[a];
    ONYX_CHECK(p == PartialShape::kUnknown || f == PartialShape::kUnknown || p == f, what, " ", fresh.str(),
               " does not fit its cache ", past.str(), " at axis ", a);
    if (p == PartialShape::kUnknown) out.dims[a] = f;
  }
  if (!indexed)
    out.dims[2] = past.dims[2] == PartialShape::kUnknown || fresh.dims[2] == PartialShape::kUnknown
                      ? PartialShape::kUnknown
                      : checked_add(past.dims[2], fresh.dims[2], "RotaryCache: the positions axis");
  else if (past.dims[2] != PartialShape::kUnknown && fresh.dims[2] != PartialShape::kUnknown)
    ONYX_CHECK(fresh.dims[2] <= past.dims[2], what, " ", fresh.str(), " has more positions than the cache ",
               past.str(), " holds");
  return out;
}

void infer_rotary_cache(InferContext& ctx) {
  ONYX_CHECK(ctx.num_inputs() >= 7 && ctx.num_inputs() <= 8, "RotaryCache takes 7 or 8 inputs, got ",
             ctx.num_inputs());
  ONYX_CHECK(ctx.num_outputs() == 3 || ctx.num_outputs() == 4, "RotaryCache makes 3 or 4 outputs, got ",
             ctx.num_outputs());
  const DType t = ctx.input_dtype(kQ);
  for (size_t i = 1; i < 7; ++i)
    ONYX_CHECK(ctx.input_dtype(i) == t, "input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)), ", but q has ",
               dtype_name(t));
  const bool indexed = has_index(ctx);
  if (indexed)
    ONYX_CHECK(ctx.input_dtype(kIndex) == DType::kInt64, "index must be int64, got ", dtype_name(ctx.input_dtype(kIndex)));
  check_rank4(ctx.input_shape(kQ), "q");
  check_rank4(ctx.input_shape(kK), "k");
  check_rank4(ctx.input_shape(kV), "v");
  check_rank4(ctx.input_shape(kPastK), "past_k");
  check_rank4(ctx.input_shape(kPastV), "past_v");
  if (ctx.input_shape(kCos).fully_known() && ctx.input_shape(kSin).fully_known()) {
    const Shape cos = ctx.input_concrete_shape(kCos), sin = ctx.input_concrete_shape(kSin);
    if (ctx.input_shape(kQ).fully_known()) check_tables(ctx.input_concrete_shape(kQ), cos, sin, "q");
    if (ctx.input_shape(kK).fully_known()) check_tables(ctx.input_concrete_shape(kK), cos, sin, "k");
  }
  if (indexed && ctx.input_shape(kIndex).fully_known() && ctx.input_shape(kPastK).fully_known()) {
    const int64_t n = ctx.input_concrete_shape(kIndex).numel(), rows = ctx.input_concrete_shape(kPastK)[0];
    ONYX_CHECK(n == 1 || n == rows, "index must hold one position or one per row (", rows, "), got ",
               ctx.input_shape(kIndex).str());
  }
  ctx.set_output(0, t, ctx.input_shape(kQ));
  ctx.set_output(1, t, present_shape(ctx.input_shape(kPastK), ctx.input_shape(kK), indexed, "k"));
  ctx.set_output(2, t, present_shape(ctx.input_shape(kPastV), ctx.input_shape(kV), indexed, "v"));
  if (ctx.num_outputs() > 3) ctx.set_output(3, t, ctx.input_shape(kK));
}

// y = x * cos + rotate_half(x) * sin, element by element (RotaryHalf's definition).
template <class T>
void rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t split, T* y) {
  using C = compute_t<T>;
  const int64_t d = x.shape()[x.rank() - 1];
  const int64_t h = std::min<int64_t>(std::max<int64_t>(split, 0), d);  // Slice clamps
  const T* xp = x.data<T>();
  const T* cp = cos.data<T>();
  const T* sp = sin.data<T>();
  for_each_broadcast<1>(x.shape(), {&cos.shape()}, [&](int64_t o, const std::array<int64_t, 1>& c) {
    const int64_t j = o % d;
    const C r = j < d - h ? -static_cast<C>(xp[o + h]) : static_cast<C>(xp[o - (d - h)]);
    y[o] = static_cast<T>(static_cast<C>(xp[o]) * static_cast<C>(cp[c[0]]) + r * static_cast<C>(sp[c[0]]));
  });
}

// present = Concat(past, fresh, axis 2), or past with fresh written at each row's index.
template <class T>
void write_cache(const Tensor& past, const T* fresh, const Shape& fresh_shape, const Tensor* index, Tensor& present) {
  const int64_t rows = fresh_shape[0] * fresh_shape[1], len = fresh_shape[2], inner = fresh_shape[3];
  const int64_t heads = fresh_shape[1], old = past.shape()[2], total = present.shape()[2];
  const T* pp = past.data<T>();
  T* out = present.data<T>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = old;  // Concat: the new entries after the past's
    if (index) {
      at = index->get_as_int64(index->numel() == 1 ? 0 : r / heads);
      if (out != pp) std::copy_n(pp + r * total * inner, total * inner, out + r * total * inner);
    } else {
      std::copy_n(pp + r * old * inner, old * inner, out + r * total * inner);
    }
    std::copy_n(fresh + r * len * inner, len * inner, out + (r * total + at) * inner);
  }
}

template <class T>
void rotary_cache_kernel(KernelContext& ctx) {
  const Tensor& q = ctx.input(kQ);
  const Tensor& k = ctx.input(kK);
  const Tensor& v = ctx.input(kV);
  const Tensor& cos = ctx.input(kCos);
  const Tensor& sin = ctx.input(kSin);
  check_tables(q.shape(), cos.shape(), sin.shape(), "q");
  check_tables(k.shape(), cos.shape(), sin.shape(), "k");
  const int64_t split = ctx.attr_int("split", q.shape()[3] / 2);
  const Tensor* index = has_index(ctx) ? &ctx.input(kIndex) : nullptr;
  if (index) {
    const int64_t capacity = ctx.input(kPastK).shape()[2], len = k.shape()[2];
    ONYX_CHECK(ctx.input(kPastV).shape()[2] == capacity && v.shape()[2] == len, "past_k ",
               ctx.input(kPastK).shape().str(), " and past_v ", ctx.input(kPastV).shape().str(),
               " must hold one capacity, and k ", k.shape().str(), " and v ", v.shape().str(), " one length");
    for (int64_t i = 0; i < index->numel(); ++i) {
      const int64_t at = index->get_as_int64(i);
      ONYX_CHECK(at >= 0 && at + len <= capacity, "writing ", len, " positions at ", at,
                 index->numel() > 1 ? cat(" (row ", i, ")") : std::string(), " overruns the cache of ", capacity);
    }
  }
  rotate<T>(q, cos, sin, split, ctx.output(0).data<T>());
  Tensor scratch;
  T* k_rot;
  if (ctx.has_output(3)) {
    k_rot = ctx.output(3).data<T>();
  } else {
    scratch = Tensor(k.dtype(), k.shape(), ctx.allocator());
    k_rot = scratch.data<T>();
  }
  rotate<T>(k, cos, sin, split, k_rot);
  write_cache<T>(ctx.input(kPastK), k_rot, k.shape(), index, ctx.output(1));
  write_cache<T>(ctx.input(kPastV), v.data<T>(), v.shape(), index, ctx.output(2));
}

// ---- RotaryCacheAttention ----

constexpr size_t kMask = 8;

// The fused node's two parts as nodes of their own over its inputs and outputs: the RotaryCache
// reads inputs 0-7 and makes outputs 0-2; the Attention reads (q_rot, present_k, present_v, mask)
// as its inputs 0-3 and makes y.
struct RotaryAttentionParts {
  Node rotary, attention;
  const OpDef* rotary_def = nullptr;
  const OpDef* attention_def = nullptr;
};

RotaryAttentionParts rotary_attention_parts(const NodeView& n) {
  ONYX_CHECK(n.num_inputs() >= 8 && n.num_inputs() <= 9 && n.has_input(kIndex),
             "RotaryCacheAttention takes 8 or 9 inputs (q, k, v, cos, sin, past_k, past_v, index, attn_mask?), got ",
             n.num_inputs());
  ONYX_CHECK(n.num_outputs() == 4, "RotaryCacheAttention makes 4 outputs (q_rot, present_k, present_v, y), got ",
             n.num_outputs());
  RotaryAttentionParts p;
  p.rotary.name = n.node().name + "/rotary_cache";
  p.rotary.op_type = "RotaryCache";
  p.rotary.domain = "onyx";
  p.rotary.opset = 1;
  p.rotary.inputs = {0, 1, 2, 3, 4, 5, 6, 7};
  p.rotary.outputs = {0, 1, 2};
  p.attention.name = n.node().name + "/attention";
  p.attention.op_type = "Attention";
  p.attention.opset = 23;
  p.attention.inputs = {0, 1, 2};
  if (n.has_input(kMask)) p.attention.inputs.push_back(3);
  p.attention.outputs = {0};
  for (const Attribute& a : n.node().attributes) {
    if (a.name == "split") p.rotary.attributes.push_back(a);
    else if (a.name == "scale" || a.name == "onyx_zero_masked_rows") p.attention.attributes.push_back(a);
    else throw Error(cat("RotaryCacheAttention has no attribute '", a.name,
                         "' (it takes split, scale and onyx_zero_masked_rows)"));
  }
  p.rotary_def = OpRegistry::global().find("onyx", "RotaryCache", 1);
  p.attention_def = OpRegistry::global().find("", "Attention", 23);
  ONYX_CHECK(p.rotary_def && p.attention_def, "RotaryCacheAttention: RotaryCache or Attention is not registered");
  p.rotary.def = p.rotary_def;
  p.attention.def = p.attention_def;
  return p;
}

void infer_rotary_cache_attention(InferContext& ctx) {
  const RotaryAttentionParts p = rotary_attention_parts(ctx);
  std::vector<ValueType> rin;
  std::vector<const Tensor*> rvals;
  for (size_t i = 0; i < 8; ++i) {
    rin.push_back({ctx.input_dtype(i), ctx.input_shape(i)});
    rvals.push_back(ctx.input_value(i));
  }
  InferContext rotary(p.rotary, rin, rvals);
  p.rotary_def->infer(rotary);
  std::vector<ValueType> ain(rotary.outputs().begin(), rotary.outputs().begin() + 3);
  std::vector<const Tensor*> avals(3, nullptr);
  if (ctx.has_input(kMask)) {
    ain.push_back({ctx.input_dtype(kMask), ctx.input_shape(kMask)});
    avals.push_back(ctx.input_value(kMask));
  }
  InferContext attention(p.attention, ain, avals);
  p.attention_def->infer(attention);
  for (size_t o = 0; o < 3; ++o) ctx.set_output(o, rotary.outputs()[o].dtype, rotary.outputs()[o].shape);
  ctx.set_output(3, attention.outputs()[0].dtype, attention.outputs()[0].shape);
}

void rotary_cache_attention_kernel(const RotaryAttentionParts& p, KernelContext& ctx) {
  std::vector<const Tensor*> rin;
  for (size_t i = 0; i < 8; ++i) rin.push_back(&ctx.input(i));
  Tensor routs[3] = {ctx.output(0), ctx.output(1), ctx.output(2)};  // sharing the outputs' storage
  KernelContext rotary(p.rotary, std::move(rin), routs, ctx.allocator(), nullptr);
  p.rotary_def->kernel(rotary);
  std::vector<const Tensor*> ain{&routs[0], &routs[1], &routs[2]};
  if (ctx.has_input(kMask)) ain.push_back(&ctx.input(kMask));
  Tensor aout[1] = {ctx.output(3)};
  KernelContext attention(p.attention, std::move(ain), aout, ctx.allocator(), nullptr);
  p.attention_def->kernel(attention);
}

}  // namespace

void register_rotary_cache_op(OpRegistry& r) {
  r.add(domain_op("onyx", "RotaryCacheAttention", 1, infer_rotary_cache_attention,
                  [](KernelContext& ctx) { rotary_cache_attention_kernel(rotary_attention_parts(ctx), ctx); })
            .specialized([](const Node& node) -> KernelFn {
              auto parts = std::make_shared<const RotaryAttentionParts>(rotary_attention_parts(NodeView(node)));
              return [parts](KernelContext& ctx) { rotary_cache_attention_kernel(*parts, ctx); };
            })
            .may_update(1, kPastK)
            .may_update(2, kPastV));
  r.add(domain_op("onyx", "RotaryCache", 1, infer_rotary_cache,
                  [](KernelContext& ctx) {
                    dispatch<FloatTypes>(ctx.input(kQ).dtype(), "RotaryCache",
                                         [&](auto tag) { rotary_cache_kernel<typename decltype(tag)::type>(ctx); });
                  })
            .may_update(1, kPastK)
            .may_update(2, kPastV));
}

}  // namespace onyx
