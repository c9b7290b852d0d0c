// The activation of a gated product's gate (onyx::SiluGateLinear, RmsNormLinear with gated = 1):
// y = act(x · w_gate^T) * (x · w_up^T). Llama-family MLPs gate by SiLU; Gemma's by GELU (its tanh
// approximation). The node's string attribute `activation` names it ("silu" where absent).
#pragma once

#include <cmath>
#include <string>

#include "onyx/error.h"

namespace onyx {

enum class GateActivation : int {
  kSilu = 0,      // g / (1 + exp(-g))
  kGeluTanh = 1,  // 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))): com.microsoft FastGelu, Gelu(approximate="tanh")
  kGelu = 2,      // 0.5 g (1 + erf(g / sqrt(2))): com.microsoft Gelu, Gelu(approximate="none")
};

inline const char* gate_activation_name(GateActivation a) {
  switch (a) {
    case GateActivation::kSilu: return "silu";
    case GateActivation::kGeluTanh: return "gelu_tanh";
    case GateActivation::kGelu: return "gelu";
  }
  return "?";
}

// The activation an attribute value names; an error naming the value and the ones known.
inline GateActivation gate_activation_of(const std::string& name) {
  for (GateActivation a : {GateActivation::kSilu, GateActivation::kGeluTanh, GateActivation::kGelu})
    if (name == gate_activation_name(a)) return a;
  throw Error(cat("activation '", name, "' is not a gate activation onyx knows (silu, gelu_tanh, gelu)"));
}

// The gate's activation of g, in the compute type C (float or double).
template <class C>
C gate_activation(C g, GateActivation a) {
  switch (a) {
    case GateActivation::kSilu: return g / (C(1) + std::exp(-g));
    case GateActivation::kGeluTanh: {
      const C k = static_cast<C>(0.7978845608028654);  // sqrt(2 / pi)
      return C(0.5) * g * (C(1) + std::tanh(k * (g + static_cast<C>(0.044715) * g * g * g)));
    }
    case GateActivation::kGelu: return C(0.5) * g * (C(1) + std::erf(g * static_cast<C>(0.7071067811865476)));
  }
  return g;
}

}  // namespace onyx
