// The softmax-weighted sum of one attention query row, shared by the com.microsoft
// attention ops (GroupQueryAttention, MultiHeadAttention). In double throughout.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace onyx {

// out[0..width) = sum_j softmax(scores)_j * value(j, x) over the keys j of `scores`; a score
// of -infinity leaves its key out. With `sink` (a logit that joins the softmax but carries no
// value: head_sink, smooth_softmax) exp(*sink) adds to the denominator. When every key is
// left out (and there is no sink) the row is zeros.
template <class Value>
void softmax_weighted_sum(const std::vector<double>& scores, const double* sink, int64_t width, Value value,
                          double* out) {
  std::fill(out, out + width, 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (double s : scores) mx = std::max(mx, s);
  if (sink) mx = std::max(mx, *sink);
  if (mx == -std::numeric_limits<double>::infinity()) return;
  double den = sink ? std::exp(*sink - mx) : 0.0;
  for (size_t j = 0; j < scores.size(); ++j) {
    if (scores[j] == -std::numeric_limits<double>::infinity()) continue;
    const double w = std::exp(scores[j] - mx);
    den += w;
    for (int64_t x = 0; x < width; ++x) out[x] += w * value(static_cast<int64_t>(j), x);
  }
  for (int64_t x = 0; x < width; ++x) out[x] /= den;
}

}  // namespace onyx
