// The activations a fused kernel applies to its result in registers (a matrix product's
// epilogue, a convolution's), and the same functions over a span of floats. Each has a scalar
// definition here, the specification the vector versions are tested against.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace onyx::cpu {

enum class Act : uint8_t {
  kNone,
  kRelu,
  kLeakyRelu,    // x < 0 ? a * x : x
  kClip,         // min(max(x, a), b)
  kSigmoid,
  kTanh,
  kGelu,         // x * (1 + erf(x / sqrt 2)) / 2
  kGeluTanh,     // x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2
  kSilu,         // x * sigmoid(x)
  kHardSigmoid,  // max(0, min(1, a * x + b))
  kHardSwish,    // x * max(0, min(1, x / 6 + 1 / 2))
  kErf,          // erf(x) (the Erf op's float32 kernel)
};

struct Activation {
  Act kind = Act::kNone;
  float a = 0, b = 0;
};

const char* act_name(Act a);

// The scalar definition (double inside, one rounding).
inline float activate_reference(float xf, const Activation& act) {
  const double x = xf;
  switch (act.kind) {
    case Act::kNone: return xf;
    case Act::kRelu: return x > 0 ? xf : 0.f;
    case Act::kLeakyRelu: return static_cast<float>(x < 0 ? act.a * x : x);
    case Act::kClip: return xf < act.a ? act.a : (xf > act.b ? act.b : xf);
    case Act::kSigmoid: return static_cast<float>(1 / (1 + std::exp(-x)));
    case Act::kTanh: return static_cast<float>(std::tanh(x));
    case Act::kGelu: return static_cast<float>(0.5 * x * (1 + std::erf(x / std::sqrt(2.0))));
    case Act::kGeluTanh:
      return static_cast<float>(0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
    case Act::kSilu: return static_cast<float>(x / (1 + std::exp(-x)));
    case Act::kHardSigmoid: return static_cast<float>(std::fmax(0.0, std::fmin(1.0, act.a * x + act.b)));
    case Act::kHardSwish: return static_cast<float>(x * std::fmax(0.0, std::fmin(1.0, x / 6 + 0.5)));
    case Act::kErf: return static_cast<float>(std::erf(x));
  }
  return xf;
}

// y[i] = act(x[i]) (y may be x), vectorized.
void activate(const float* x, float* y, int64_t n, const Activation& act);

// y[i] = act(g[i]) * u[i] (a gated unit: SiLU-gated for Llama's MLP); y may be g or u.
void gated(const float* g, const float* u, float* y, int64_t n, const Activation& act);

}  // namespace onyx::cpu
