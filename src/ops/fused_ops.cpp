// The ops that onyx's load-time fusions (passes/fuse_patterns.h) put in place of the op chains
// exporters emit; domain "onyx". Each computes what its chain computes, in the compute type
// (float for float16/bfloat16) with one rounding at the end instead of one per op.
//
//   onyx::RotaryHalf(x, cos, sin; split = h) = x * cos + rotate_half(x) * sin
//     rotate_half(x) = concat(-x[..., h:], x[..., :h]) along the last axis (HF's
//     apply_rotary_pos_emb, h = D/2 the default); cos and sin have one shape, broadcast onto
//     x's (numpy rules), ending in x's last dimension D.
//   onyx::SiluMul(gate, up) = gate * sigmoid(gate) * up (the SiLU-gated MLP), numpy broadcast.
#include <algorithm>
#include <cmath>

#include "cpu/activation.h"
#include "cpu/thread_pool.h"
#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/elementwise.h"

namespace onyx {

namespace {

void check_rotary_half(const Shape& x, const Shape& cos, const Shape& sin) {
  ONYX_CHECK(x.rank() >= 1, "x must have at least one dimension");
  ONYX_CHECK(cos == sin, "cos ", cos.str(), " and sin ", sin.str(), " must have one shape");
  const int64_t d = x[x.rank() - 1];
  ONYX_CHECK(cos.rank() >= 1 && cos.rank() <= x.rank() && cos[cos.rank() - 1] == d, "cos ", cos.str(),
             " must end in x's last dimension ", d, " and have at most x's rank (x is ", x.str(), ")");
  const size_t off = x.rank() - cos.rank();
  for (size_t i = 0; i < cos.rank(); ++i)
    ONYX_CHECK(cos[i] == 1 || cos[i] == x[off + i], "cos ", cos.str(), " does not broadcast to x ", x.str());
}

void infer_rotary_half(InferContext& ctx) {
  check_same_dtypes(ctx);
  if (ctx.input_shape(0).fully_known() && ctx.input_shape(1).fully_known() && ctx.input_shape(2).fully_known())
    check_rotary_half(ctx.input_concrete_shape(0), ctx.input_concrete_shape(1), ctx.input_concrete_shape(2));
  infer_same_as_input(ctx);
}

template <class T>
void rotary_half_kernel(KernelContext& ctx) {
  using C = compute_t<T>;
  const Tensor& x = ctx.input(0);
  const Tensor& cos = ctx.input(1);
  const Tensor& sin = ctx.input(2);
  check_rotary_half(x.shape(), cos.shape(), sin.shape());
  const int64_t d = x.shape()[x.rank() - 1];
  const int64_t h = std::min<int64_t>(std::max<int64_t>(ctx.attr_int("split", d / 2), 0), d);  // Slice clamps
  const T* xp = x.data<T>();
  const T* cp = cos.data<T>();
  const T* sp = sin.data<T>();
  T* y = ctx.output(0).data<T>();
  if constexpr (std::is_same_v<T, float>) {
    BlockBroadcast bb;
    if (block_broadcast(cos.shape(), x.shape(), bb) && bb.inner == 1 && d > 0 && bb.mid % d == 0) {
    // cos and sin run along x's last axes ([S, D] onto [B, H, S, D]): rows of D, the tables
    // indexed by the row's place in the block; blocks split over the pool.
    const int64_t rows_per_block = bb.mid / d;
    cpu::parallel_for(bb.outer * rows_per_block, std::max<int64_t>(1, 4096 / d), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = xp + r * d;
        const T* cr = cp + (r % rows_per_block) * d;
        const T* sr = sp + (r % rows_per_block) * d;
        T* yr = y + r * d;
        for (int64_t j = 0; j < d - h; ++j) yr[j] = xr[j] * cr[j] - xr[j + h] * sr[j];
        for (int64_t j = d - h; j < d; ++j) yr[j] = xr[j] * cr[j] + xr[j - (d - h)] * sr[j];
      }
    });
    return;
    }
  }
  for_each_broadcast<1>(x.shape(), {&cos.shape()}, [&](int64_t o, const std::array<int64_t, 1>& c) {
    const int64_t j = o % d;
    const C r = j < d - h ? -static_cast<C>(xp[o + h]) : static_cast<C>(xp[o - (d - h)]);
    y[o] = static_cast<T>(static_cast<C>(xp[o]) * static_cast<C>(cp[c[0]]) + r * static_cast<C>(sp[c[0]]));
  });
}

template <class T>
void silu_mul_kernel(KernelContext& ctx) {
  using C = compute_t<T>;
  const Tensor& g = ctx.input(0);
  const Tensor& u = ctx.input(1);
  Tensor& y = ctx.output(0);
  const T* gp = g.data<T>();
  const T* up = u.data<T>();
  T* yp = y.data<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (g.shape() == y.shape() && u.shape() == y.shape()) {
      cpu::gated(gp, up, yp, y.numel(), cpu::Activation{cpu::Act::kSilu});
      return;
    }
  }
  for_each_broadcast<2>(y.shape(), {&g.shape(), &u.shape()}, [&](int64_t o, const std::array<int64_t, 2>& i) {
    const C a = static_cast<C>(gp[i[0]]);
    yp[o] = static_cast<T>(a / (C(1) + std::exp(-a)) * static_cast<C>(up[i[1]]));
  });
}

}  // namespace

void register_dense_ops(OpRegistry& r);         // ops/dense.cpp
void register_rotary_cache_op(OpRegistry& r);   // ops/rotary_cache.cpp

void register_fused_ops(OpRegistry& r) {
  register_dense_ops(r);
  register_rotary_cache_op(r);
  r.add(domain_op("onyx", "RotaryHalf", 1, infer_rotary_half, [](KernelContext& ctx) {
    dispatch<FloatTypes>(ctx.input(0).dtype(), "RotaryHalf",
                         [&](auto tag) { rotary_half_kernel<typename decltype(tag)::type>(ctx); });
  }));
  r.add(domain_op("onyx", "SiluMul", 1,
                  [](InferContext& ctx) {
                    check_same_dtypes(ctx);
                    infer_broadcast(ctx);
                  },
                  [](KernelContext& ctx) {
                    dispatch<FloatTypes>(ctx.input(0).dtype(), "SiluMul",
                                         [&](auto tag) { silu_mul_kernel<typename decltype(tag)::type>(ctx); });
                  }));
}

}  // namespace onyx
