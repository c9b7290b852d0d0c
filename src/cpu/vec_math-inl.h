// Per-target vector math shared by the kernel files (included once per Highway target, after
// hwy/highway.h): exp, erf, sigmoid and the activations of activation.h on one vector.
// exp and tanh are Highway's (hwy/contrib/math); erf is Abramowitz and Stegun's 7.1.26 form
// (absolute error below 1.5e-7) evaluated in float.
#if defined(ONYX_CPU_VEC_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ONYX_CPU_VEC_MATH_INL_H_
#undef ONYX_CPU_VEC_MATH_INL_H_
#else
#define ONYX_CPU_VEC_MATH_INL_H_
#endif

#include <limits>

#include "cpu/activation.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^x; inputs below -87.3 give 0 and above 88.7 inf (Highway's Exp is defined on a narrower range).
template <class D, class V>
HWY_INLINE V ExpClamped(D d, V x) {
  const V lo = hn::Set(d, -87.3f), hi = hn::Set(d, 88.7f);
  const V r = hn::Exp(d, hn::Min(hn::Max(x, lo), hi));
  const V with_inf = hn::IfThenElse(hn::Gt(x, hi), hn::Set(d, std::numeric_limits<float>::infinity()), r);
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenZeroElse(hn::Lt(x, lo), with_inf));
}

// e^x for x <= 0, a softmax's x - max: 2^n e^r with n = round(x log2 e) and r = x - n ln 2 (ln 2
// in two parts), |r| <= ln 2 / 2, e^r by its Taylor polynomial of degree 6 (truncation below
// 1.2e-7 relative); 0 below -87.3, NaN kept. About a third fewer operations than ExpClamped,
// which serves any x: 2^n is made from n's bits without a range check (n is in [-126, 0]).
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lo = hn::Set(d, -87.3f);
  const V xc = hn::Max(x, lo);
  const V n = hn::Round(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc);  // ln 2's leading bits: n times it is exact
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);  // and the rest
  V p = hn::Set(d, 1.0f / 720);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenZeroElse(hn::Lt(x, lo), hn::Mul(p, two_n)));
}

template <class D, class V>
HWY_INLINE V Sigmoid(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, ExpClamped(d, hn::Neg(x))));
}

// erf to about 1.5e-7 absolute (Abramowitz and Stegun 7.1.26), for GELU only: 1 / (1 + a |x|)
// by the reciprocal estimate and one Newton step (a division is the costliest instruction
// here), e^(-x^2) with its argument only floored (it is never above 0; a NaN x stays NaN
// through GELU's product with x).
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  const V ax = hn::Abs(x);
  const V den = hn::MulAdd(hn::Set(d, 0.3275911f), ax, hn::Set(d, 1.0f));
  V t = hn::ApproximateReciprocal(den);
  t = hn::Mul(t, hn::NegMulAdd(den, t, hn::Set(d, 2.0f)));
  V p = hn::Set(d, 1.061405429f);
  p = hn::MulAdd(p, t, hn::Set(d, -1.453152027f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.421413741f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.284496736f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.254829592f));
  p = hn::Mul(p, t);
  const V e = hn::Exp(d, hn::Max(hn::Neg(hn::Mul(ax, ax)), hn::Set(d, -87.3f)));
  const V y = hn::NegMulAdd(p, e, hn::Set(d, 1.0f));  // 1 - p e
  return hn::CopySign(y, x);
}

// erf to within about 2 ulp (relative 1.7e-7 below 1, absolute 1.1e-7 above): x P1(x^2) for
// |x| < 1, 1 - e^(-x^2) P2(|x|) from 1 to 4 with the sign of x, 1 beyond; NaN stays NaN. P1 and
// P2 are least-squares fits made by tools/fit_erf.py.
template <class D, class V>
HWY_INLINE V ErfFloat(D d, V x) {
  const V ax = hn::Abs(x);
  const V t = hn::Mul(x, x);
  V p = hn::Set(d, -5.6508536646e-04f);
  p = hn::MulAdd(p, t, hn::Set(d, 4.9197795104e-03f));
  p = hn::MulAdd(p, t, hn::Set(d, -2.6710286849e-02f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.1279986892e-01f));
  p = hn::MulAdd(p, t, hn::Set(d, -3.7612264473e-01f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.1283790790e+00f));
  const V small = hn::Mul(x, p);
  const V a = hn::Min(ax, hn::Set(d, 4.0f));
  V q = hn::Set(d, 1.6403232641e-06f);
  q = hn::MulAdd(q, a, hn::Set(d, -4.7267420600e-05f));
  q = hn::MulAdd(q, a, hn::Set(d, 6.1669284086e-04f));
  q = hn::MulAdd(q, a, hn::Set(d, -4.8284643807e-03f));
  q = hn::MulAdd(q, a, hn::Set(d, 2.5372271579e-02f));
  q = hn::MulAdd(q, a, hn::Set(d, -9.4915462825e-02f));
  q = hn::MulAdd(q, a, hn::Set(d, 2.6206822474e-01f));
  q = hn::MulAdd(q, a, hn::Set(d, -5.4721281900e-01f));
  q = hn::MulAdd(q, a, hn::Set(d, 8.7786077971e-01f));
  q = hn::MulAdd(q, a, hn::Set(d, -1.0839436203e+00f));
  q = hn::MulAdd(q, a, hn::Set(d, 9.9261147043e-01f));
  const V e = hn::Exp(d, hn::Neg(hn::Mul(a, a)));
  const V large = hn::CopySign(hn::NegMulAdd(e, q, hn::Set(d, 1.0f)), x);
  const V y = hn::IfThenElse(hn::Lt(ax, hn::Set(d, 1.0f)), small, large);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

template <class D, class V>
HWY_INLINE V Activate(D d, V x, const Activation& act) {
  switch (act.kind) {
    case Act::kNone: return x;
    case Act::kRelu: return hn::Max(x, hn::Zero(d));
    case Act::kLeakyRelu: return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Mul(x, hn::Set(d, act.a)), x);
    case Act::kClip: return hn::Min(hn::Max(x, hn::Set(d, act.a)), hn::Set(d, act.b));
    case Act::kSigmoid: return Sigmoid(d, x);
    case Act::kTanh: return hn::Tanh(d, x);
    case Act::kGelu: {
      const V half = hn::Set(d, 0.5f);
      const V e = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f)));
      return hn::Mul(hn::Mul(half, x), hn::Add(hn::Set(d, 1.0f), e));
    }
    case Act::kGeluTanh: {
      const V x3 = hn::Mul(hn::Mul(x, x), x);
      const V inner = hn::Mul(hn::Set(d, 0.7978845608028654f), hn::MulAdd(hn::Set(d, 0.044715f), x3, x));
      return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), hn::Tanh(d, inner)));
    }
    case Act::kSilu: return hn::Mul(x, Sigmoid(d, x));
    case Act::kHardSigmoid:
      return hn::Min(hn::Max(hn::MulAdd(hn::Set(d, act.a), x, hn::Set(d, act.b)), hn::Zero(d)), hn::Set(d, 1.0f));
    case Act::kHardSwish: {
      const V g = hn::MulAdd(x, hn::Set(d, 1.0f / 6), hn::Set(d, 0.5f));
      return hn::Mul(x, hn::Min(hn::Max(g, hn::Zero(d)), hn::Set(d, 1.0f)));
    }
    case Act::kErf: return ErfFloat(d, x);
  }
  return x;
}

// Whether `k` costs a few instructions (no exp, erf or tanh): a fused kernel applies those in
// registers as it stores, and the others through ActivateSpan afterwards.
inline bool IsCheap(Act k) {
  return k == Act::kNone || k == Act::kRelu || k == Act::kLeakyRelu || k == Act::kClip || k == Act::kHardSigmoid ||
         k == Act::kHardSwish;
}

// Activate for the cheap kinds (IsCheap); any other kind leaves x as it is.
template <class D, class V>
HWY_INLINE V ActivateCheap(D d, V x, const Activation& act) {
  switch (act.kind) {
    case Act::kRelu:
    case Act::kLeakyRelu:
    case Act::kClip:
    case Act::kHardSigmoid:
    case Act::kHardSwish: return Activate(d, x, act);
    default: return x;
  }
}

// x[i] = ActivateCheap(x[i]) for N registers, the kind tested once: ReLU and HardSwish (the
// convolutions' usual ones) as straight-line code, the other kinds per register.
template <size_t N, class D, class V>
HWY_INLINE void ActivateCheapAll(D d, V* x, const Activation& act) {
  switch (act.kind) {
    case Act::kRelu:
      HWY_UNROLL(64)
      for (size_t i = 0; i < N; ++i) x[i] = hn::Max(x[i], hn::Zero(d));
      return;
    case Act::kHardSwish:
      HWY_UNROLL(64)
      for (size_t i = 0; i < N; ++i) {
        const V g = hn::MulAdd(x[i], hn::Set(d, 1.0f / 6), hn::Set(d, 0.5f));
        x[i] = hn::Mul(x[i], hn::Min(hn::Max(g, hn::Zero(d)), hn::Set(d, 1.0f)));
      }
      return;
    default:
      HWY_UNROLL(64)
      for (size_t i = 0; i < N; ++i) x[i] = ActivateCheap(d, x[i], act);
  }
}

// p[i] = act(p[i]) for i in [0, n). A fused kernel's epilogue stores its registers and then calls
// this once per stored row for the costly kinds: Activate inlined per register of every tile shape
// multiplied each kernel's code (the gemm and depthwise files took clang with the sanitizers many
// minutes).
template <class D>
HWY_NOINLINE void ActivateSpan(D d, float* HWY_RESTRICT p, int64_t n, const Activation& act) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + L <= n; j += L) hn::StoreU(Activate(d, hn::LoadU(d, p + j), act), d, p + j);
  if (j < n) {
    HWY_ALIGN float buf[HWY_LANES(float)] = {};
    for (int64_t t = 0; j + t < n; ++t) buf[t] = p[j + t];
    hn::Store(Activate(d, hn::Load(d, buf), act), d, buf);
    for (int64_t t = 0; j + t < n; ++t) p[j + t] = buf[t];
  }
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard
