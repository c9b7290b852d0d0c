// The gated products' output (onyx::SiluGateLinear, gated RmsNormLinear and LinearNBits) from the
// gate's and the up's sums: act(g) * u, act as ops/gate_activation.h numbers them (0 SiLU, 1 GELU
// by tanh, 2 GELU by erf), in float.
#pragma once

#include <cuda_runtime.h>

namespace onyx::cuda {

__device__ __forceinline__ float gated_value(float g, float u, int act) {
  if (act == 1) return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
  if (act == 2) return 0.5f * g * (1.f + erff(g * 0.7071067811865476f)) * u;
  return g / (1.f + __expf(-g)) * u;
}

}  // namespace onyx::cuda
