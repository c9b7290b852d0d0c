// The rows of an RMS norm before a product, as onyx::RmsNormLinear and
// onyx::RmsNormLinearNBits compute them on the CPU: h = x + skip (skip may be null), rounded into
// `sum` when not null, and h / sqrt(mean(h^2) + eps) * gamma rounded to T, in double.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/common.h"

namespace onyx {

template <class T>
std::vector<T> rms_normalized_rows(const T* x, const T* skip, const T* gamma, T* sum, int64_t m, int64_t k,
                                   double eps) {
  std::vector<T> normed(static_cast<size_t>(m * k));
  std::vector<double> h(static_cast<size_t>(k));
  for (int64_t r = 0; r < m; ++r) {
    double sq = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t i = r * k + j;
      h[j] = static_cast<double>(static_cast<compute_t<T>>(x[i])) +
             (skip ? static_cast<double>(static_cast<compute_t<T>>(skip[i])) : 0.0);
      if (sum) sum[i] = static_cast<T>(static_cast<compute_t<T>>(h[j]));
      sq += h[j] * h[j];
    }
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(k) + eps);
    for (int64_t j = 0; j < k; ++j)
      normed[static_cast<size_t>(r * k + j)] =
          static_cast<T>(static_cast<compute_t<T>>(h[j] * inv * static_cast<double>(static_cast<compute_t<T>>(gamma[j]))));
  }
  return normed;
}

}  // namespace onyx
