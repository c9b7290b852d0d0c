// Row kernels (rowwise.h) and the activation span (activation.h), per Highway target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rowwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/activation.h"
#include "cpu/rowwise.h"
#include "cpu/thread_pool.h"
#include "cpu/vec_math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace onyx::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Work per chunk handed to a thread: rows enough for ~16k elements.
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

void SoftmaxRowsImpl(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  parallel_for(rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      VF vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
      int64_t j = 0;
      for (; j + L <= n; j += L) vmax = hn::Max(vmax, hn::LoadU(d, xr + j));
      float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
      for (; j < n; ++j) mx = std::max(mx, xr[j]);
      const VF vm = hn::Set(d, mx);
      VF vsum = hn::Zero(d);
      j = 0;
      if (log) {
        for (; j + L <= n; j += L) vsum = hn::Add(vsum, ExpNonPositive(d, hn::Sub(hn::LoadU(d, xr + j), vm)));
      } else {
        for (; j + L <= n; j += L) {
          const VF e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, xr + j), vm));
          hn::StoreU(e, d, yr + j);
          vsum = hn::Add(vsum, e);
        }
      }
      if (j < n) {  // the tail through a padded vector: padding contributes e^-inf = 0
        HWY_ALIGN float buf[HWY_LANES(float)] = {};
        for (int64_t t = 0; t < L; ++t) buf[t] = j + t < n ? xr[j + t] : -std::numeric_limits<float>::infinity();
        const VF e = ExpNonPositive(d, hn::Sub(hn::Load(d, buf), vm));
        vsum = hn::Add(vsum, e);
        hn::Store(e, d, buf);
        if (!log)
          for (int64_t t = 0; j + t < n; ++t) yr[j + t] = buf[t];
      }
      const float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
      if (log) {
        const VF off = hn::Set(d, mx + std::log(sum));
        j = 0;
        for (; j + L <= n; j += L) hn::StoreU(hn::Sub(hn::LoadU(d, xr + j), off), d, yr + j);
        for (; j < n; ++j) yr[j] = xr[j] - (mx + std::log(sum));
      } else {
        const VF inv = hn::Set(d, 1.0f / sum);
        j = 0;
        for (; j + L <= n; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, yr + j), inv), d, yr + j);
        for (; j < n; ++j) yr[j] *= 1.0f / sum;
      }
    }
  });
}

void NormRowsImpl(const NormRows* ap) {
  const NormRows& a = *ap;
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = a.n;
  parallel_for(a.rows, row_grain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = a.x + r * n;
      const float* sr = a.skip ? a.skip + r * n : nullptr;
      // x' = x + skip + bias, written to `sum` (or y) first so the second pass reads it back.
      float* tr = a.sum ? a.sum + r * n : a.y + r * n;
      const bool staged = sr || a.bias || a.sum;
      const float* in = staged ? tr : xr;
      VF vs = hn::Zero(d);
      int64_t j = 0;
      for (; j + L <= n; j += L) {
        VF v = hn::LoadU(d, xr + j);
        if (sr) v = hn::Add(v, hn::LoadU(d, sr + j));
        if (a.bias) v = hn::Add(v, hn::LoadU(d, a.bias + j));
        if (staged) hn::StoreU(v, d, tr + j);
        vs = hn::Add(vs, v);
      }
      float s = hn::GetLane(hn::SumOfLanes(d, vs));
      for (; j < n; ++j) {
        float v = xr[j] + (sr ? sr[j] : 0.f) + (a.bias ? a.bias[j] : 0.f);
        if (staged) tr[j] = v;
        s += v;
      }
      const float mean = a.center && n ? s / static_cast<float>(n) : 0.f;
      const VF vm = hn::Set(d, mean);
      VF vq = hn::Zero(d);
      j = 0;
      for (; j + L <= n; j += L) {
        const VF c = hn::Sub(hn::LoadU(d, in + j), vm);
        vq = hn::MulAdd(c, c, vq);
      }
      float q = hn::GetLane(hn::SumOfLanes(d, vq));
      for (; j < n; ++j) q += (in[j] - mean) * (in[j] - mean);
      const float inv = 1.0f / std::sqrt((n ? q / static_cast<float>(n) : 0.f) + a.epsilon);
      const VF vi = hn::Set(d, inv);
      float* yr = a.y + r * n;
      j = 0;
      for (; j + L <= n; j += L) {
        VF v = hn::Mul(hn::Mul(hn::Sub(hn::LoadU(d, in + j), vm), vi), hn::LoadU(d, a.scale + j));
        if (a.shift) v = hn::Add(v, hn::LoadU(d, a.shift + j));
        hn::StoreU(v, d, yr + j);
      }
      for (; j < n; ++j) yr[j] = (in[j] - mean) * inv * a.scale[j] + (a.shift ? a.shift[j] : 0.f);
      if (a.mean) a.mean[r] = mean;
      if (a.inv_std) a.inv_std[r] = inv;
    }
  });
}

void ActivateImpl(const float* x, float* y, int64_t n, const Activation* act) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  parallel_for((n + 4095) / 4096, 4, [&](int64_t c0, int64_t c1) {
    const int64_t e = std::min(n, c1 * 4096);
    int64_t j = c0 * 4096;
    for (; j + L <= e; j += L) hn::StoreU(Activate(d, hn::LoadU(d, x + j), *act), d, y + j);
    if (j < e) {
      HWY_ALIGN float buf[HWY_LANES(float)] = {};
      for (int64_t t = 0; j + t < e; ++t) buf[t] = x[j + t];
      hn::Store(Activate(d, hn::Load(d, buf), *act), d, buf);
      for (int64_t t = 0; j + t < e; ++t) y[j + t] = buf[t];
    }
  });
}

void GatedImpl(const float* g, const float* u, float* y, int64_t n, const Activation* act) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  parallel_for((n + 4095) / 4096, 4, [&](int64_t c0, int64_t c1) {
    const int64_t e = std::min(n, c1 * 4096);
    int64_t j = c0 * 4096;
    for (; j + L <= e; j += L)
      hn::StoreU(hn::Mul(Activate(d, hn::LoadU(d, g + j), *act), hn::LoadU(d, u + j)), d, y + j);
    if (j < e) {
      HWY_ALIGN float bg[HWY_LANES(float)] = {}, bu[HWY_LANES(float)] = {};
      for (int64_t t = 0; j + t < e; ++t) bg[t] = g[j + t], bu[t] = u[j + t];
      hn::Store(hn::Mul(Activate(d, hn::Load(d, bg), *act), hn::Load(d, bu)), d, bg);
      for (int64_t t = 0; j + t < e; ++t) y[j + t] = bg[t];
    }
  });
}

void RangeWithZeroImpl(const float* x, int64_t n, float* lo_out, float* hi_out) {
  const DF d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  VF lo = hn::Zero(d), hi = hn::Zero(d);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const VF v = hn::LoadU(d, x + i);
    const VF v0 = hn::IfThenZeroElse(hn::IsNaN(v), v);  // NaN stays out of the range (0 is in it)
    lo = hn::Min(lo, v0);
    hi = hn::Max(hi, v0);
  }
  float l = hn::GetLane(hn::MinOfLanes(d, lo)), h = hn::GetLane(hn::MaxOfLanes(d, hi));
  for (; i < n; ++i) {
    l = std::min(l, x[i]);
    h = std::max(h, x[i]);
  }
  *lo_out = l;
  *hi_out = h;
}

void ExpWeightsImpl(const float* z, int64_t n, float m, float tau, double* e) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as a vector holds doubles
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto vm = hn::Set(dd, static_cast<double>(m)), vtau = hn::Set(dd, static_cast<double>(tau));
  // Below e^-708 a weight is 0 (Highway's Exp is defined down to about there): next to the
  // largest token's weight of 1 it is nothing, and a weight of 0 is never drawn.
  const auto floor = hn::Set(dd, -708.0);
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const auto zd = hn::PromoteTo(dd, hn::LoadU(df, z + j));
    const auto x = hn::Sub(zd, vm);
    const auto keep = hn::And(hn::Ge(zd, vtau), hn::Gt(x, floor));
    hn::StoreU(hn::IfThenElseZero(keep, hn::Exp(dd, hn::Max(x, floor))), dd, e + j);
  }
  for (; j < n; ++j) {
    const double x = static_cast<double>(z[j]) - m;
    e[j] = z[j] >= tau && x > -708.0 ? std::exp(x) : 0.0;
  }
}

template <class Q>
void Quantize8(const float* x, int64_t n, float scale, float zero_point, float lo, float hi, Q* y) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<Q, DF> dq;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const float nan_code = std::clamp(zero_point, lo, hi);
  const VF s = hn::Set(d, scale), z = hn::Set(d, zero_point), vlo = hn::Set(d, lo), vhi = hn::Set(d, hi);
  const VF vnan = hn::Set(d, nan_code);
  auto chunks = [&](int64_t c0, int64_t c1) {
    const int64_t e = std::min(n, c1 * 16384);
    int64_t i = c0 * 16384;
    for (; i + L <= e; i += L) {
      const VF scaled = hn::Div(hn::LoadU(d, x + i), s);
      VF q = hn::Min(hn::Max(hn::Add(hn::Round(scaled), z), vlo), vhi);
      q = hn::IfThenElse(hn::IsNaN(scaled), vnan, q);
      hn::StoreU(hn::DemoteTo(dq, hn::ConvertTo(di, q)), dq, y + i);
    }
    for (; i < e; ++i) {
      const float scaled = x[i] / scale;
      const float q = std::isnan(scaled) ? nan_code : std::clamp(std::nearbyint(scaled) + zero_point, lo, hi);
      y[i] = static_cast<Q>(q);
    }
  };
  // One chunk (a short span, down to one element of a blocked quantization) runs here without
  // the pool's call.
  if (n <= 16384) chunks(0, 1);
  else parallel_for((n + 16383) / 16384, 1, chunks);
}

void Quantize8Impl(const float* x, int64_t n, float scale, float zero_point, float lo, float hi, bool is_signed,
                   void* y) {
  if (is_signed) Quantize8(x, n, scale, zero_point, lo, hi, static_cast<int8_t*>(y));
  else Quantize8(x, n, scale, zero_point, lo, hi, static_cast<uint8_t*>(y));
}

template <class Q>
void Requantize8(const int32_t* acc, const double* mult, int64_t n, double zero_point, double lo, double hi, Q* y) {
  const hn::ScalableTag<double> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<Q, decltype(d)> dq;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const double nan_code = std::clamp(zero_point, lo, hi);
  const auto z = hn::Set(d, zero_point), vlo = hn::Set(d, lo), vhi = hn::Set(d, hi), vnan = hn::Set(d, nan_code);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto scaled = hn::Mul(hn::PromoteTo(d, hn::LoadU(di, acc + i)), hn::LoadU(d, mult + i));
    auto q = hn::Min(hn::Max(hn::Add(hn::Round(scaled), z), vlo), vhi);
    q = hn::IfThenElse(hn::IsNaN(scaled), vnan, q);
    hn::StoreU(hn::DemoteTo(dq, hn::DemoteTo(di, q)), dq, y + i);
  }
  for (; i < n; ++i) {
    const double scaled = static_cast<double>(acc[i]) * mult[i];
    const double q = std::isnan(scaled) ? nan_code : std::clamp(std::nearbyint(scaled) + zero_point, lo, hi);
    y[i] = static_cast<Q>(q);
  }
}

void Requantize8Impl(const int32_t* acc, const double* mult, int64_t n, double zero_point, double lo, double hi,
                     bool is_signed, void* y) {
  if (is_signed) Requantize8(acc, mult, n, zero_point, lo, hi, static_cast<int8_t*>(y));
  else Requantize8(acc, mult, n, zero_point, lo, hi, static_cast<uint8_t*>(y));
}

}  // namespace onyx::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace onyx::cpu {

HWY_EXPORT(SoftmaxRowsImpl);
HWY_EXPORT(NormRowsImpl);
HWY_EXPORT(ActivateImpl);
HWY_EXPORT(GatedImpl);
HWY_EXPORT(RangeWithZeroImpl);
HWY_EXPORT(ExpWeightsImpl);
HWY_EXPORT(Quantize8Impl);
HWY_EXPORT(Requantize8Impl);

void range_with_zero(const float* x, int64_t n, float* lo, float* hi) {
  HWY_DYNAMIC_DISPATCH(RangeWithZeroImpl)(x, n, lo, hi);
}

void exp_weights(const float* z, int64_t n, float m, float tau, double* e) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(ExpWeightsImpl)(z, n, m, tau, e);
}

void quantize_8bit(const float* x, int64_t n, float scale, float zero_point, float lo, float hi, bool is_signed,
                   void* y) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(Quantize8Impl)(x, n, scale, zero_point, lo, hi, is_signed, y);
}

void requantize_8bit(const int32_t* acc, const double* mult, int64_t n, double zero_point, double lo, double hi,
                     bool is_signed, void* y) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(Requantize8Impl)(acc, mult, n, zero_point, lo, hi, is_signed, y);
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, bool log) {
  if (rows <= 0 || n <= 0) return;
  HWY_DYNAMIC_DISPATCH(SoftmaxRowsImpl)(x, y, rows, n, log);
}

void norm_rows(const NormRows& a) {
  if (a.rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(NormRowsImpl)(&a);
}

void activate(const float* x, float* y, int64_t n, const Activation& act) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(ActivateImpl)(x, y, n, &act);
}

void gated(const float* g, const float* u, float* y, int64_t n, const Activation& act) {
  if (n <= 0) return;
  HWY_DYNAMIC_DISPATCH(GatedImpl)(g, u, y, n, &act);
}

const char* act_name(Act a) {
  switch (a) {
    case Act::kNone: return "";
    case Act::kRelu: return "relu";
    case Act::kLeakyRelu: return "leaky_relu";
    case Act::kClip: return "clip";
    case Act::kSigmoid: return "sigmoid";
    case Act::kTanh: return "tanh";
    case Act::kGelu: return "gelu";
    case Act::kGeluTanh: return "gelu_tanh";
    case Act::kSilu: return "silu";
    case Act::kHardSigmoid: return "hard_sigmoid";
    case Act::kHardSwish: return "hard_swish";
    case Act::kErf: return "erf";
  }
  return "?";
}

}  // namespace onyx::cpu
#endif  // HWY_ONCE
