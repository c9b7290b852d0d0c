// Walking numpy-style broadcasts: for each output element, the flat index of
// the element each input contributes.
#pragma once

#include <array>
#include <vector>

#include "onyx/shape.h"

namespace onyx {

// fn(o, base, step, n) for runs of `out`'s elements [o, o + n) along its last axis (the whole
// tensor at once where every input has its shape, or where it is a scalar): input k's element for
// output o + j is at base[k] + j * step[k], step[k] 1 or 0 (broadcast along that axis). Each
// input shape broadcasts to `out`.
template <size_t K, class Fn>
void for_each_broadcast_row(const Shape& out, const std::array<const Shape*, K>& ins, Fn&& fn) {
  const size_t r = out.rank();
  const int64_t total = out.numel();
  if (total == 0) return;
  std::array<int64_t, K> base{}, step{};
  bool all_same = true;
  for (size_t k = 0; k < K; ++k) all_same &= *ins[k] == out;
  if (all_same || r == 0) {
    for (size_t k = 0; k < K; ++k) step[k] = ins[k]->numel() == 1 ? 0 : 1;
    fn(int64_t{0}, base, step, total);
    return;
  }
  // Per input, the element stride along each output axis (0 where broadcast).
  std::vector<std::array<int64_t, K>> stride(r);
  for (size_t k = 0; k < K; ++k) {
    const Shape& s = *ins[k];
    int64_t acc = 1;
    for (size_t i = r; i-- > 0;) {
      size_t off = r - s.rank();
      int64_t d = i < off ? 1 : s[i - off];
      stride[i][k] = d == 1 ? 0 : acc;
      acc *= d;
    }
  }
  const int64_t inner = out[r - 1];
  std::vector<int64_t> counter(r, 0);
  for (int64_t o = 0; o < total; o += inner) {
    fn(o, base, stride[r - 1], inner);
    // Advance the outer counter (axes r-2 .. 0).
    for (size_t i = r - 1; i-- > 0;) {
      ++counter[i];
      for (size_t k = 0; k < K; ++k) base[k] += stride[i][k];
      if (counter[i] < out[i]) break;
      for (size_t k = 0; k < K; ++k) base[k] -= stride[i][k] * counter[i];
      counter[i] = 0;
    }
  }
}

// fn(out_index, std::array<int64_t, K> input_indices) for every element of `out`,
// where each input shape broadcasts to `out`.
template <size_t K, class Fn>
void for_each_broadcast(const Shape& out, const std::array<const Shape*, K>& ins, Fn&& fn) {
  for_each_broadcast_row<K>(out, ins,
                            [&](int64_t o, const std::array<int64_t, K>& base, const std::array<int64_t, K>& step,
                                int64_t n) {
                              std::array<int64_t, K> idx;
                              for (int64_t j = 0; j < n; ++j) {
                                for (size_t k = 0; k < K; ++k) idx[k] = base[k] + j * step[k];
                                fn(o + j, idx);
                              }
                            });
}

}  // namespace onyx
